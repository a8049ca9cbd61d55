#!/usr/bin/env bash
# The CUDA build's own code, run in the emulated CUDA build (tests/emu/; make emu) on a machine
# without a GPU. Usage: test_emu.sh REFERENCE_DIR (tests/reference.py's 2-layer model) PYTORCH_OPS_DIR
# REFERENCE_DIR_4_LAYERS (for interleaved 1F1B, two chunks of one layer a stage at pp 2)
#  - every kernel launcher against its host twin in fp32, bf16 and fp16 (tests/test_emu_kernels.cpp);
#  - every dev/ lab's versions against the host twin and PyTorch at the labs' small sizes;
#  - train_gpt_emu_fp32's losses against tests/reference.py's float64 trajectory, the CPU build's
#    bar (1e-4; 6 steps at one rank, 3 at several), under NCCL (emulated over MPI): one rank, dp 2 ZeRO-3, tp 2, pp 2 with ZeRO-2 (1F1B) and
#    ZeRO-3 (ZB-H1), pp 2 ZeRO-1 (GPipe), these three in random stream orders (the links stream), cp 2, cp 4, cp 2 x tp 2 x pp 2 ZeRO-3 with sequence parallelism (np 8: ring
#    attention's kernels, ZeRO over the cp pair); with the 4-layer model, pp 2
#    ZeRO-3 under interleaved 1F1B (V 2: the ring's paired shifts as NCCL groups with two peers, the
#    second gradient buffer's device copy; 3 steps); dp 2 ZeRO-3 also through -comm mpi (the
#    host-staged collectives); bf16 and fp16 at one rank, bf16 at cp 2, within their bars (3e-3, 5e-4, 7e-4);
#  - -f 1 (TF32 GEMMs) moves fp32's losses by TF32's rounding: more than 1e-6, less than 1e-2;
#  - -ge 2 (GELU in cuBLASLt's epilogues) with -fa 2 (FlashAttention-2 in registers, mma.sync) in
#    bf16 within bf16's bar: no GELU kernel launched, the mma.sync attention kernels and no WMMA ones;
#  - -r 0..3 bit-identical under cp 2 in bf16 (the flash kernels, tensor cores, rerun by recompute);
#  - resume bit-exact under pp 2 ZeRO-3 and under cp 2 (bf16, NCCL), with validation and samples in the logs;
#  - sampling with the KV cache (fp32) draws the tokens a full forward per token draws;
#  - the watchdog (-timeout 5) under NCCL: a rank stopped at step 3, the job ended with exit code 3 (or
#    the launcher's report of the stopped rank's signal: tests/watchdog_status.sh);
#  - GPUs told apart by PCI id: ranks bound to one GPU each by CUDA_VISIBLE_DEVICES (each sees
#    device 0) train over NCCL; two ranks on one GPU are refused by NCCL with one line on every
#    rank, and train through -comm mpi; the GPU chosen once, by the launcher's local rank, before
#    MPI_Init and after it;
#  - a failed NCCL link (CUDA_EMU_NCCL_FAIL_AFTER: its work never completes, as on a GPU) ends
#    the job with a line naming the group, not a hang;
#  - the pipeline's bubble under NCCL, whose receives only queue work: at pp 2 with one micro-batch
#    the first stage idles while the second computes, at least as long as the schedule replayed
#    with the stages' own measured times says (bubble_simulated); timed as compute, the wait once
#    showed as a bubble of 0.01.
set -euo pipefail
REF=$1 OPS=$2 REF4=${3:?usage: test_emu.sh REFERENCE_DIR PYTORCH_OPS_DIR REFERENCE_DIR_4_LAYERS}; PYTHON=${PYTHON:-/usr/bin/python3}
E=tests/build/emu
D=$E/runs; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=1
MPIRUN="timeout 300 mpirun"
source tests/watchdog_status.sh  # defines: watchdog_status_ok

for p in fp32 bf16 fp16; do
    $E/test_emu_kernels_$p > $D/kernels_$p.txt || { cat $D/kernels_$p.txt; echo "FAIL: kernel launchers against their host twins, $p"; exit 1; }
    echo "kernels, $p: $(grep -c '^ok' $D/kernels_$p.txt) checks against the host twins passed"
done

for lab in $E/dev/*; do
    DEV_REF_DIR=$OPS $lab > $D/lab.txt || { cat $D/lab.txt; echo "FAIL: lab $(basename $lab) against the host twin and PyTorch"; exit 1; }
    echo "lab $(basename $lab): $(grep -c 'checks against the host twin' $D/lab.txt) versions x sizes and $(grep -c ': ok$' $D/lab.txt) PyTorch comparisons passed"
done

trajectory() {  # trajectory NAME TRAINER TOLERANCE NP FLAGS...: 6 steps at one rank, 3 at several (emulation is slow)
    local name=$1 trainer=$2 tol=$3 np=$4; shift 4
    log=$D/$(echo "$name" | tr -c 'a-zA-Z0-9\n' _).txt  # left set for the caller
    local steps=6; [ $np -gt 1 ] && steps=3
    $PYTHON tests/check_trajectory.py --trainer $trainer --ref $REF --accum 2 --tol $tol --launcher "$MPIRUN -np $np" \
        --steps $steps --extra "$*" > $log 2>&1 || { tail -n 20 $log; echo "FAIL: $name: the trajectory against float64 (tolerance $tol)"; exit 1; }
    echo "$name: $(tail -n 1 $log)"
}
export OMP_NUM_THREADS=2  # one rank: the emulator runs a grid's blocks on both cores
trajectory "fp32, one rank" ./train_gpt_emu_fp32 1e-4 1
# -f 1: TF32 (CUBLAS_COMPUTE_32F_FAST_TF32, which the emulator computes as the tensor cores do: each
# input rounded to TF32's 10-bit mantissa, the sums in fp32): the losses leave fp32's by TF32's
# rounding (measured: 5.4e-5 at most), no more, and not by nothing (the switch reaches the GEMMs)
TF="-e $REF/model.bin -i $REF/train.bin -b 2 -t 32 -x 3 -l 1e-3 -v 0 -s 0"
./train_gpt_emu_fp32 $TF -log $D/fp32.jsonl > /dev/null && ./train_gpt_emu_fp32 $TF -f 1 -log $D/tf32.jsonl > /dev/null \
    || { echo "FAIL: the -f 0 and -f 1 runs"; exit 1; }
$PYTHON - $D/fp32.jsonl $D/tf32.jsonl <<'PY'
import json, sys
fp32, tf32 = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:])
worst = max(abs(a - b) for a, b in zip(fp32, tf32))
assert len(fp32) == len(tf32) == 3 and 1e-6 < worst < 1e-2, f"FAIL: -f 1: losses {tf32} against fp32's {fp32}: max |diff| {worst:.2e}, not in (1e-6, 1e-2)"
print(f"ok: -f 1 (TF32): 3 losses within {worst:.1e} of fp32's, and not equal")
PY
# bars ~10x the max |diff| measured by check_trajectory.py --tol 1 with these flags (tests/README.md's
# table): bf16 2.3e-4 -> 3e-3, fp16 4.3e-5 -> 5e-4
trajectory "bf16, one rank" ./train_gpt_emu 3e-3 1
trajectory "fp16, one rank" ./train_gpt_emu_fp16 5e-4 1
# -ge 2: GELU in the fc GEMMs' cuBLASLt epilogues (kernels/gelu_fusion.cuh), forward and backward,
# and -fa 2: attention by kernels/flash_attention_mma.cuh; one run for both (each kernel is checked
# alone in test_emu_kernels), within bf16's bar (measured 4.8e-4 with -ge 2 alone), no GELU kernel
# launched (the epilogues took every call), and the mma.sync attention kernels in place of the WMMA ones
CUDA_EMU_LAUNCH_REPORT=$D/ge2.report.jsonl trajectory "bf16 -ge 2 -fa 2, one rank" ./train_gpt_emu 3e-3 1 -ge 2 -fa 2
! grep -q gelu_ $D/ge2.report.jsonl && grep -q cublasLtMatmul $D/ge2.report.jsonl \
    || { grep gelu_ $D/ge2.report.jsonl; echo "FAIL: -ge 2 launched GELU kernels: the epilogues were not taken"; exit 1; }
for k in flash_forward_mma_kernel flash_dkv_mma_kernel flash_dq_mma_kernel; do
    grep -q "$k" $D/ge2.report.jsonl || { echo "FAIL: -fa 2 launched no $k"; exit 1; }; done
! grep -q wmma_kernel $D/ge2.report.jsonl || { echo "FAIL: -fa 2 launched WMMA attention kernels"; exit 1; }
# and the kernel ledger (ledger.h) of -fa 2 names the attention kernels the run launched (tests/test_ledger.sh
# holds the -fa 1 ledger's bytes and FLOPs to a run; -fa 2's do the same work in other kernels)
./train_gpt_cpu_bf16 -e $REF/model.bin -b 2 -t 32 -plan 1 -gpu H100 -fa 2 2>/dev/null | grep '^{"ledger"' \
    | grep -o '"kernel": "flash[^"]*"' | sort > $D/fa2.ledger
grep -o '"kernel": "flash[^"]*"' $D/ge2.report.jsonl | sort > $D/fa2.launched
cmp -s $D/fa2.ledger $D/fa2.launched || { diff $D/fa2.ledger $D/fa2.launched; echo "FAIL: -fa 2's ledger and launches name other attention kernels"; exit 1; }
# -fa 2 where its kernels do not go: one line naming the flag, exit 1, before any step
refused() {  # refused WHAT EXPECTED COMMAND...
    local what=$1 want=$2; shift 2
    if "$@" > $D/refused.txt 2>&1 || ! grep -q "^error: -fa 2: .*$want" $D/refused.txt || grep -q "^step" $D/refused.txt; then
        cat $D/refused.txt; echo "FAIL: -fa 2 $what: not refused in one line"; exit 1; fi
}
FA="-e $REF/model.bin -i $REF/train.bin -b 2 -t 32 -x 1 -v 0 -s 0 -fa 2"
refused "in the fp32 build" "bf16 and fp16 builds" ./train_gpt_emu_fp32 $FA
refused "under -cp 2" "ring attention" $MPIRUN -np 2 ./train_gpt_emu $FA -cp 2
echo "-fa 2: refused in the fp32 build and under -cp 2"

export OMP_NUM_THREADS=1
trajectory "fp32, dp 2 ZeRO-3" ./train_gpt_emu_fp32 1e-4 2 -b 2 -z 3
trajectory "fp32, dp 2 ZeRO-3, -comm mpi" ./train_gpt_emu_fp32 1e-4 2 -b 2 -z 3 -comm mpi
trajectory "fp32, tp 2" ./train_gpt_emu_fp32 1e-4 2 -tp 2
# the pipeline's transfers on their own stream (pipeline_links.h), in random stream orders (tests/test_overlap.sh:
# the adversarial ones)
CUDA_EMU_STREAMS=seed:2 trajectory "fp32, pp 2 ZeRO-2 (1F1B)" ./train_gpt_emu_fp32 1e-4 2 -pp 2 -z 2
CUDA_EMU_STREAMS=seed:4 trajectory "fp32, pp 2 ZeRO-3 (ZB-H1: B now, W deferred)" ./train_gpt_emu_fp32 1e-4 2 -pp 2 -ps zb -z 3
CUDA_EMU_STREAMS=seed:3 trajectory "fp32, pp 2 ZeRO-1 (GPipe: lone sends and receives)" ./train_gpt_emu_fp32 1e-4 2 -pp 2 \
    -ps gpipe -z 1
$PYTHON tests/check_trajectory.py --trainer ./train_gpt_emu_fp32 --ref $REF4 --accum 4 --tol 1e-4 --launcher "$MPIRUN -np 2" \
    --steps 3 --extra "-pp 2 -ps interleaved -vp 2 -z 3" > $D/interleaved.txt 2>&1 \
    || { tail -n 20 $D/interleaved.txt; echo "FAIL: fp32, pp 2 interleaved: the trajectory against float64"; exit 1; }
echo "fp32, pp 2 ZeRO-3, interleaved (V 2), 4 layers: $(tail -n 1 $D/interleaved.txt)"
# ring attention: every step a block of the flash attention kernels (tensor cores in bf16)
trajectory "fp32, cp 2" ./train_gpt_emu_fp32 1e-4 2 -cp 2
trajectory "fp32, cp 4" ./train_gpt_emu_fp32 1e-4 4 -cp 4
# bar ~10x the max |diff| measured with --tol 1 (7.3e-5, at 2329610 with this file's flags)
trajectory "bf16, cp 2" ./train_gpt_emu 7e-4 2 -cp 2
# -r 0..3 bit-identical through the flash kernels (the backward's recomputed forward is the same kernels)
R="-e $REF/model.bin -i $REF/train.bin -b 4 -t 32 -d 256 -x 2 -l 1e-3 -c 0.1 -shuffle 0 -v 0 -s 0 -cp 2"
for r in 0 1 2 3; do
    $MPIRUN -np 2 ./train_gpt_emu $R -r $r -log $D/r$r.jsonl > $D/r$r.txt 2>&1 || { tail -n 5 $D/r$r.txt; echo "FAIL: bf16, cp 2, -r $r: the run"; exit 1; }
done
$PYTHON tests/identical_steps.py --recompute-levels 0,1,2,3 "bf16, cp 2, -r 0..3" $D/r0.jsonl $D/r1.jsonl $D/r2.jsonl $D/r3.jsonl \
    || { echo "FAIL: bf16, cp 2: -r 0..3 not bit-identical, or the activations kept not shrinking"; exit 1; }
CUDA_EMU_NCCL_REPORT=1 trajectory "fp32, cp 2 x tp 2 -sp 1 x pp 2 ZeRO-3 (ring attention's kernels and sends; f and g as all-gathers and reduce-scatters)" \
    ./train_gpt_emu_fp32 1e-4 8 -cp 2 -tp 2 -sp 1 -pp 2 -z 3
# every NCCL communicator made carries something (the world group's traffic is host data, through MPI)
communicators=$(grep -c "^NCCL emulation: communicator" $log)
unused=$(grep -c "^NCCL emulation: communicator.*: 0 collectives, 0 sends" $log || true)
[ "$communicators" -gt 0 ] && [ "$unused" -eq 0 ] || { echo "FAIL: $unused of $communicators NCCL communicators carried nothing"; exit 1; }
echo "np 8: $communicators NCCL communicators (over the ranks), each carried collectives or sends"
# and each was made with its sums' order pinned (process_grid.h: nccl_pin_sum_order; a user's setting
# kept over it: tests/test_nccl_settings.sh)
pinned=$(grep -c "^NCCL emulation: communicator.*; NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_NVLS_ENABLE=0$" $log || true)
[ "$pinned" -eq "$communicators" ] || { echo "FAIL: $pinned of $communicators NCCL communicators made with NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_NVLS_ENABLE=0"; exit 1; }
echo "np 8: every communicator made with NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_NVLS_ENABLE=0"

# with validation and samples: forward-only passes through the pipeline, the logits' all-gather and broadcast
FLAGS="-e $REF/model.bin -i data/tinyshakespeare_train.bin -j data/tinyshakespeare_val.bin -b 2 -t 32 -d 128 -x 8 -l 1e-3 -u 2 -q 0.1 -c 0.1 -v 4 -m 2 -s 4 -g 8 -n 4"
source tests/resume_case.sh
resume_case bf16_pp2_zero3 "$MPIRUN -np 2" ./train_gpt_emu "-pp 2 -z 3"
resume_case bf16_cp2 "$MPIRUN -np 2" ./train_gpt_emu "-cp 2"  # ring attention's flash kernels (WMMA)

# sampling with the KV cache (kv_cache.h: one query against the cached keys, the kernels of ring
# attention's blocks) against a full forward per token: the same 40 tokens (T 32: the last 8 by full
# forwards either way, as the window slides)
S="-e $REF/model.bin -i $REF/train.bin -b 1 -t 32 -x 1 -v 0 -s 1 -g 40"
./train_gpt_emu_fp32 $S -log $D/kv_cache.jsonl > $D/kv_cache.txt 2>&1 \
    && TRAIN_GPT_SAMPLE_FULL_FORWARD=1 ./train_gpt_emu_fp32 $S -log $D/full_forward.jsonl > $D/full_forward.txt 2>&1 \
    || { tail -n 3 $D/kv_cache.txt $D/full_forward.txt; echo "FAIL: the sampling runs"; exit 1; }
$PYTHON - $D/kv_cache.jsonl $D/full_forward.jsonl <<'PY'
import json, sys
cached, full = ([json.loads(l).get("sample") for l in open(p)] for p in sys.argv[1:])
assert cached[-1], f"FAIL: KV cache: no sample: {cached}"
assert cached == full, f"FAIL: KV cache: samples {cached} differ from the full forward's {full}"
print(f"ok: fp32, samples with the KV cache equal the full forward's: {cached[-1][:60]}...")
PY

# the watchdog under (emulated) NCCL: a rank stopped as step 3 begins; the other, its collective
# queued and its host waiting on the GPU, ends the job with the watchdog's line and exit code 3
code=0; TRAIN_GPT_STOP_AT_STEP=3 $MPIRUN -np 2 ./train_gpt_emu_fp32 -e $REF/model.bin -i $REF/train.bin -b 2 -t 32 -x 6 -v 0 -s 0 \
    -timeout 5 > $D/watchdog.txt 2>&1 || code=$?
# the line matched whole: the rank, the operation and group its peer waits in, the step; at least the
# timeout's 5 s idle, but no upper bound: a busy machine may let the watchdog's thread wake late
watchdog_status_ok $code $D/watchdog.txt && [ "$(grep -c 'error: watchdog' $D/watchdog.txt)" = 1 ] && grep -Eq \
    "^error: watchdog: rank 0 made no progress for ([5-9]|[1-9][0-9]+) s, since it began an all-reduce of the dp group at step 3 \(-timeout 5\)" \
    $D/watchdog.txt || { tail -n 12 $D/watchdog.txt; echo "FAIL: the watchdog under NCCL (exit code $code)"; exit 1; }
echo "ok: a stopped rank under NCCL: $(grep -m1 'error: watchdog' $D/watchdog.txt | cut -c1-120), exit code $code"

# GPU binding (8 emulated GPUs, PCI bus ids 0x10..0x17; CUDA_VISIBLE_DEVICES as a launcher sets it)
ONE="-e $REF/model.bin -i $REF/train.bin -b 2 -t 32 -d 128 -x 1 -v 0 -s 0"
$MPIRUN -np 2 bash -c "CUDA_VISIBLE_DEVICES=\${PMI_RANK:-\$OMPI_COMM_WORLD_RANK} exec ./train_gpt_emu_fp32 $ONE" > $D/bound.txt 2>&1 \
    || { tail -n 3 $D/bound.txt; echo "FAIL: ranks bound to a GPU each by CUDA_VISIBLE_DEVICES"; exit 1; }
grep -q "NCCL collectives" $D/bound.txt || { echo "FAIL: ranks bound to one GPU each fell back from NCCL"; tail -n 3 $D/bound.txt; exit 1; }
echo "ok: 2 ranks bound to one GPU each (CUDA_VISIBLE_DEVICES) train over NCCL"
# the GPU chosen once: from the launcher's local rank before MPI_Init (a CUDA-aware MPI's context),
# kept after it even where MPI's node rank differs (here the launcher's numbering reversed: rank 0
# is local rank 1, so its header names device 1; chosen again from MPI's, it named device 0)
$MPIRUN -np 2 bash -c "MPI_LOCALRANKID=\$((1 - PMI_RANK)) exec ./train_gpt_emu_fp32 $ONE" > $D/reversed.txt 2>&1 \
    || { tail -n 3 $D/reversed.txt; echo "FAIL: local ranks numbered in reverse by the launcher"; exit 1; }
grep -q "^train_gpt | CUDA emulation (device 1) |" $D/reversed.txt \
    || { grep -m 1 "^train_gpt |" $D/reversed.txt; echo "FAIL: rank 0, the launcher's local rank 1, is not on device 1"; exit 1; }
echo "ok: the launcher's local rank picks the GPU before MPI_Init and after: $(grep -m 1 "^train_gpt |" $D/reversed.txt | cut -c1-45)"
code=0; CUDA_EMU_DEVICES=1 $MPIRUN -np 2 ./train_gpt_emu_fp32 $ONE > $D/shared.txt 2>&1 || code=$?
[ $code -ne 0 ] && [ $code -ne 124 ] && [ "$(grep -c '^error: 2 ranks share one GPU: NCCL needs a GPU per rank' $D/shared.txt)" -eq 2 ] \
    || { echo "FAIL: 2 ranks on one GPU under NCCL, exit $code"; cat $D/shared.txt; exit 1; }
echo "ok: 2 ranks on one GPU under NCCL: $(grep -m1 error $D/shared.txt)"
CUDA_EMU_DEVICES=1 $MPIRUN -np 2 ./train_gpt_emu_fp32 $ONE -comm mpi > $D/shared_mpi.txt 2>&1 \
    || { tail -n 3 $D/shared_mpi.txt; echo "FAIL: 2 ranks on one GPU through -comm mpi"; exit 1; }
echo "ok: 2 ranks on one GPU train through -comm mpi"

code=0; CUDA_EMU_NCCL_FAIL_AFTER=30 timeout 120 mpirun -np 2 ./train_gpt_emu_fp32 $ONE -x 4 -z 3 > $D/link.txt 2>&1 || code=$?
[ $code -ne 0 ] && [ $code -ne 124 ] && grep -q "^error: NCCL failed in the dp group: remote process exited" $D/link.txt \
    || { echo "FAIL: a failed NCCL link, exit $code (124: a hang)"; tail -n 3 $D/link.txt; exit 1; }
echo "ok: a failed NCCL link ends the job: $(grep -m1 '^error' $D/link.txt)"

# the memory preflight on a GPU of an H200's size: GPT-2 124M at B=64, T=1024 (~70 GiB) fits it,
# B=1024 does not (test_bad_input.sh's case once assumed an 80 GB card)
code=0; CUDA_EMU_DEVICE_MEMORY=$((141 * 1000 * 1000 * 1000)) ./train_gpt_emu_fp32 -e d12 -b 1024 -t 1024 -x 1 -v 0 -s 0 \
    -i $REF/train.bin > $D/fit.txt 2>&1 || code=$?
[ $code -eq 1 ] && grep -q "does not fit in memory" $D/fit.txt || { echo "FAIL: the preflight on 141 GB, exit $code"; cat $D/fit.txt; exit 1; }
echo "ok: on 141 GB: $(grep -m1 -o 'does not fit.*GiB (1 ranks' $D/fit.txt)"

# The bubble is a timing, so not bounded by a number a busy machine could undercut (at 2329610 the
# stages measured [0.84, 0.04], [0.79, 0.02], [0.82, 0.02]: the first stage's idle depends on how fast
# each rank ran). bubble_simulated replays the schedule with the durations the stages themselves
# measured and no time for messages: the first stage begins with its forward and cannot take its
# backward before the second stage's forward and backward are done, so its measured idle is at least
# the replay's whatever the load (measured 0.8388 vs 0.8385); only the timer's grain separates
# them, which 0.5x leaves room for. The wait timed as compute (the bug seen once) makes the
# measured idle ~0.01 while the replay, the wait inside its backward, still shows about half.
$MPIRUN -np 2 ./train_gpt_emu_fp32 -e $REF/model.bin -i $REF/train.bin -b 4 -t 32 -d 128 -x 3 -pp 2 -v 0 -s 0 -log $D/bubble.jsonl > /dev/null \
    || { echo "FAIL: the pp 2 bubble run"; exit 1; }
$PYTHON - $D/bubble.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    measured, replayed = r["bubble_stages"][0], r["bubble_simulated"][0]
    if not (replayed > 0 and measured >= 0.5 * replayed):  # (a NaN fails too)
        sys.exit(f"FAIL: pp 2 bubble: the first stage idled {measured:.4f} of the step, under half the {replayed:.4f} "
                 f"the schedule replayed with its measured times gives (stages {r['bubble_stages']}, replayed {r['bubble_simulated']})")
first = ", ".join(f"{r['bubble_stages'][0]:.2f}" for r in rows)
replay = ", ".join(f"{r['bubble_simulated'][0]:.2f}" for r in rows)
print(f"ok: pp 2, one micro-batch under NCCL: the first stage idles {first} of the step, the schedule replayed {replay} "
      f"(formula 0.50 for equal stages)")
PY

#!/usr/bin/env bash
# Resume is bit-exact (docs/design.md: Invariants, 4): a run stopped at a checkpoint and resumed with -y 1
# logs the same losses, norms, scales and samples (all 17 digits) and writes the same final
# model file, byte for byte, as the run that never stopped. Covered: shuffled data and the
# sampling RNG (fp32, one rank); sharded master weights and stochastic rounding (bf16, dp 2,
# ZeRO-2); the loss scaler's state after an overflow and a growth (fp16, dp 2, ZeRO-3); tensor
# parallelism with ZeRO over each TP rank's DP group (bf16, tp 2 x dp 2, ZeRO-3); 3D (bf16,
# dp 2 x tp 2 x pp 2, ZeRO-1, 1F1B over 2 micro-batches); ring attention (bf16, cp 2, ZeRO-1);
# interleaved 1F1B (fp32, pp 2, V 2).
# Bad checkpoints (truncated, another precision, another global micro-batch) are refused with a
# message and left untouched. Resuming under another layout (the optimizer file, re-sharded)
# continues the unbroken fp32 trajectory within 1e-5 in loss: dp 2 ZeRO-1 -> cp 2 x tp 2 with
# sequence parallelism (-sp 1), dp 2 x tp 2 -sp 1 x pp 2 ZeRO-3 -> dp 2 x cp 2 ZeRO-1 -> one rank, and pp 2 1F1B
# -> pp 2 interleaved (the same shard sizes holding other layers: the state files record which).
# Usage: test_resume.sh REFERENCE_DIR REFERENCE_DIR_4_LAYERS (the interleaved cases need 4 layers)
set -euo pipefail
REF=$1 REF4=${2:?usage: test_resume.sh REFERENCE_DIR REFERENCE_DIR_4_LAYERS}
# The trainers: the CPU builds unless TRAINER_FP32, TRAINER_BF16, TRAINER_FP16 name others (make
# test-gpu: the CUDA builds); TRAINER_FLAGS is added to every run (-comm mpi: ranks sharing a GPU)
TRAINER_FP32=${TRAINER_FP32:-./train_gpt_cpu} TRAINER_BF16=${TRAINER_BF16:-./train_gpt_cpu_bf16}
TRAINER_FP16=${TRAINER_FP16:-./train_gpt_cpu_fp16} TRAINER_FLAGS=${TRAINER_FLAGS:-}
D=tests/build/resume; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=1
FLAGS="-e $REF/model.bin -i data/tinyshakespeare_train.bin -b 2 -t 32 -d 128 -x 8 -l 1e-3 -u 2 -q 0.1 -c 0.1 -v 0 -s 4 -g 8 -n 4 $TRAINER_FLAGS"
source tests/resume_case.sh  # resume_case NAME LAUNCH TRAINER EXTRA_FLAGS, over $D and $FLAGS
resume_case fp32 "" $TRAINER_FP32 ""
resume_case bf16_dp2_zero2 "timeout 300 mpirun -np 2" $TRAINER_BF16 "-b 1 -z 2"
resume_case bf16_tp2_dp2_zero3 "timeout 300 mpirun -np 4" $TRAINER_BF16 "-b 1 -tp 2 -z 3"
resume_case bf16_3d_zero1 "timeout 300 mpirun -np 8" $TRAINER_BF16 "-b 1 -tp 2 -pp 2 -z 1"
resume_case bf16_cp2_zero1 "timeout 300 mpirun -np 2" $TRAINER_BF16 "-cp 2 -z 1"  # ring attention
resume_case fp32_pp2_interleaved "timeout 300 mpirun -np 2" $TRAINER_FP32 "-e $REF4/model.bin -b 1 -pp 2 -ps interleaved -vp 2"
TRAIN_GPT_INJECT_NONFINITE=2 resume_case fp16_dp2_zero3_scaler "timeout 300 mpirun -np 2" $TRAINER_FP16 "-b 1 -z 3 -lsi 2"
grep -q '"skipped": true' $D/fp16_dp2_zero3_scaler-whole.jsonl || { echo "FAIL: the injected non-finite gradient skipped no step"; exit 1; }
scales=$(grep -o '"scale": [0-9.]*' $D/fp16_dp2_zero3_scaler-whole.jsonl | awk '{print $2}' | tr '\n' ' ')
echo "fp16 scales through the run: $scales"
[ "$(echo $scales | awk '{print ($2 > $3 && $NF > $3)}')" = 1 ] || { echo "FAIL: the scale should back off, then grow"; exit 1; }

# bad checkpoints: one clear error, nothing written over
C=$D/fp32-cut
sums=$(md5sum $C/* | md5sum)
head -c 500 $C/state_00000004_00000.bin > $D/trunc.bin; cp $C/model_00000004.bin $C/optimizer_00000004.bin $C/complete_00000004 $D/
cp $D/trunc.bin $D/state_00000004_00000.bin
if $TRAINER_FP32 $FLAGS -o $D -y 1 -x 8 > /dev/null 2> $D/err.txt; then echo "FAIL: truncated state accepted"; exit 1; fi
grep -q "is truncated" $D/err.txt || { echo "FAIL: expected 'is truncated', got: $(cat $D/err.txt)"; exit 1; }
echo "ok: $(cat $D/err.txt)"
if $TRAINER_BF16 $FLAGS -o $C -y 1 > /dev/null 2> $D/err.txt; then echo "FAIL: an fp32 checkpoint resumed in bf16"; exit 1; fi
grep -q "written by a 4-byte floatX build" $D/err.txt || { echo "FAIL: expected 'written by a 4-byte floatX build', got: $(cat $D/err.txt)"; exit 1; }
echo "ok: $(grep -m1 error $D/err.txt)"
if timeout 120 mpirun -np 4 $TRAINER_BF16 $FLAGS -b 1 -z 3 -o $D/bf16_tp2_dp2_zero3-cut -y 1 > /dev/null 2> $D/err.txt; then echo "FAIL: a tp 2 checkpoint resumed under dp 4 with another global micro-batch"; exit 1; fi
# (refused by run.json's record of the global micro-batch, before the state file's own check)
grep -q "global micro-batch" $D/err.txt || { echo "FAIL: expected 'global micro-batch', got: $(cat $D/err.txt)"; exit 1; }
echo "ok: $(grep -m1 error $D/err.txt)"
# and without run.json (a directory from before it): the state file's own record refuses it
mv $D/bf16_tp2_dp2_zero3-cut/run.json $D/run.json.aside
if timeout 120 mpirun -np 4 $TRAINER_BF16 $FLAGS -b 1 -z 3 -o $D/bf16_tp2_dp2_zero3-cut -y 1 > /dev/null 2> $D/err.txt; then echo "FAIL: a tp 2 checkpoint resumed under dp 4 with another global micro-batch, no run.json"; exit 1; fi
grep -q "tokens per global micro-batch" $D/err.txt || { echo "FAIL: expected 'tokens per global micro-batch', got: $(cat $D/err.txt)"; exit 1; }
echo "ok: $(grep -m1 error $D/err.txt)"
[ "$(md5sum $C/* | md5sum)" = "$sums" ] || { echo "FAIL: a refused resume changed the checkpoint"; exit 1; }

# crash safety: the last of 2 ranks is killed (SIGKILL) halfway through writing step 4's state; the
# job ends; step 4 has no completion marker, so -y 1 resumes from step 2 and the run ends with the
# unbroken run's final model, byte for byte. -nk 2 keeps the newest two checkpoints.
CRASH_FLAGS="-e $REF/model.bin -i data/tinyshakespeare_train.bin -b 2 -t 32 -x 6 -l 1e-3 -v 0 -s 0 -n 2 -z 1 $TRAINER_FLAGS"
timeout 300 mpirun -np 2 $TRAINER_FP32 $CRASH_FLAGS -o $D/crash-whole > /dev/null
if TRAIN_GPT_DIE_IN_CHECKPOINT=4 timeout 300 mpirun -np 2 $TRAINER_FP32 $CRASH_FLAGS -o $D/crash > $D/crash.txt 2>&1; then
    echo "FAIL: the job went on after a rank died"; exit 1; fi
[ -f $D/crash/complete_00000002 ] && [ ! -f $D/crash/complete_00000004 ] && ls $D/crash/state_00000004_00001.bin.tmp > /dev/null \
    || { echo "FAIL: after the crash: $(ls $D/crash)"; exit 1; }
timeout 300 mpirun -np 2 $TRAINER_FP32 $CRASH_FLAGS -o $D/crash -y 1 > $D/crash-resume.txt
grep -q "resuming from step 2" $D/crash-resume.txt || { echo "FAIL: $(grep resum $D/crash-resume.txt)"; exit 1; }
cmp $D/crash-whole/model_00000006.bin $D/crash/model_00000006.bin || { echo "FAIL: resumed after the crash, final models differ"; exit 1; }
echo "ok: a rank killed mid-checkpoint: the job ended, -y 1 took step 2 (complete), final model identical"
timeout 300 mpirun -np 2 $TRAINER_FP32 $CRASH_FLAGS -nk 2 -o $D/keep > /dev/null
[ -f $D/keep/DONE_00000006 ] && [ -f $D/keep/main.log ] || { echo "FAIL: -o has no llm.c DONE_00000006 or main.log"; exit 1; }
[ "$(cd $D/keep && ls | grep -E '^(complete|model|optimizer|state)_' | tr '\n' ' ')" = "complete_00000004 complete_00000006 model_00000004.bin model_00000006.bin optimizer_00000004.bin optimizer_00000006.bin state_00000004_00000.bin state_00000004_00001.bin state_00000006_00000.bin state_00000006_00001.bin " ] \
    || { echo "FAIL: -nk 2 left $(ls $D/keep)"; exit 1; }
echo "ok: -nk 2 keeps steps 4 and 6"

# another layout: the checkpoint's optimizer file (m, v in llm.c's order) re-sharded for the new
# (dp, tp, pp, ZeRO stage); same -d and global micro-batch dp*B*T (B follows dp). fp32, so that
# the bar is round-off: the new layout sums gradients in another order (measured ~6e-8)
relayout_chain() {  # relayout_chain NAME "NP FLAGS" "NP FLAGS" ...: run the first whole, then resume each next at 4, 6
    local name=$1; shift
    local F="-e ${MODEL_FILE:-$REF/model.bin} -i data/tinyshakespeare_train.bin -t 32 -d 256 -x 8 -l 1e-3 -u 2 -q 0.1 -c 0.1 -v 0 -s 0 -n 2 $TRAINER_FLAGS"
    local first=($1); shift
    timeout 300 mpirun -np ${first[0]} $TRAINER_FP32 $F ${first[@]:1} -o $D/$name-whole -log $D/$name-whole.jsonl > /dev/null
    cp -r $D/$name-whole $D/$name
    local at=4
    for next in "$@"; do  # as if the previous layout had stopped after step $at's checkpoint
        local layout=($next)
        for f in $D/$name/complete_*; do [ ${f##*_} -gt $(printf %08d $at) ] && rm $D/$name/*_${f##*_}*; done
        head -n $at $D/$name-whole.jsonl > $D/$name.jsonl.tmp; [ -f $D/$name.jsonl ] && head -n $at $D/$name.jsonl > $D/$name.jsonl.tmp
        mv $D/$name.jsonl.tmp $D/$name.jsonl
        timeout 300 mpirun -np ${layout[0]} $TRAINER_FP32 $F ${layout[@]:1} -o $D/$name -y 1 -log $D/$name.jsonl > $D/$name-resume.txt
        grep -q "resuming under another layout" $D/$name-resume.txt || { echo "FAIL $name: $(grep resum $D/$name-resume.txt)"; exit 1; }
        at=$((at + 2))
    done
    $PYTHON - $D/$name-whole.jsonl $D/$name.jsonl "$name" <<'PY'
import json, math, sys
whole, chain = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
for name, rows in (("unbroken", whole), ("resumed", chain)):
    assert [r["step"] for r in rows] == list(range(1, 9)), f"{sys.argv[3]}: the {name} run logged steps {[r['step'] for r in rows]}"
# a NaN is the worst difference (max() would pass over it: every comparison with NaN is false)
diffs = [abs(a["loss"] - b["loss"]) for a, b in zip(whole, chain)]
worst = math.inf if any(math.isnan(d) for d in diffs) else max(diffs)
assert worst < 1e-5, f"FAIL {sys.argv[3]}: max |loss diff| {worst:.2e} (a NaN counts as inf)"
print(f"ok {sys.argv[3]}: resumed under other layouts, steps 5-8 within {worst:.1e} of the unbroken run")
PY
}
PYTHON=${PYTHON:-/usr/bin/python3}
relayout_chain dp2_zero1_to_cp2_tp2_sp "2 -b 2 -z 1" "4 -b 4 -cp 2 -tp 2 -sp 1"
relayout_chain 3d_sp_zero3_to_dp2_cp2_to_one "8 -b 2 -tp 2 -sp 1 -pp 2 -z 3" "4 -b 2 -cp 2 -z 1" "1 -b 4"
# the same shard sizes, other layers: 1F1B's stage 0 holds layers 0 and 1, interleaved's (V 2) 0 and 2
if [ -n "$REF4" ]; then
    MODEL_FILE=$REF4/model.bin relayout_chain pp2_1f1b_to_interleaved "2 -b 4 -pp 2 -z 1" "2 -b 4 -pp 2 -z 1 -ps interleaved -vp 2"
fi

#!/usr/bin/env bash
# One short GPU lease, used in order of value: each part under its own time limit, so that a
# lease of minutes ends with the most important answers even when a later part runs out.
# Everything is built beforehand on a machine without a GPU (nvcc is enough; docs/gpu.md:
# "A GPU session") and carried, with .device (MPICH, found by .device/env.sh), data/ and .gpurun/
# (llm.c's two builds, the commit measured):
#   1. speed: GPT-2 124M against llm.c with cuDNN, llm.c's default build and PyTorch compiled
#      (scripts/bench_gpu.sh at B 64, then B 16 and 32), and ours under -fa 1, 2 and -ge 0, 2
#   2. the flash attention labs: every version against the host twin and PyTorch, then timed
#   3. each kernel's time in one d12 step (ncu, one metric: gpu__time_duration), as CSV and as the
#      record that refits ledger.h's kernel_classes
#   4. the GPU suite: the CUDA build against PyTorch float64 (test_gpt2_gpu), its trajectories, then
#      compute-sanitizer, resume, the layouts
# The records land in $OUT/gpu-runs/ (commit them into docs/gpu-runs/, one commit, and rerun
# scripts/gpu_runs_table.py for docs/gpu.md). Output: the log on stdout and $OUT/gpu_session.log.
#   bash scripts/gpu_session.sh      (LLMC_BIN, LLMC_CUDNN_BIN default to .gpurun/llmc*/train_gpt2cu)
set -u
cd "$(dirname "$0")/.."
OUTDIR=${OUT:-/tmp/gpu_session}; mkdir -p "$OUTDIR"
exec > >(tee "$OUTDIR/gpu_session.log") 2>&1
source .device/env.sh
export PYTHON=python3
# the binaries were built elsewhere and carried: make must not rebuild them here
make() { echo "(make $* skipped: built before the lease)"; }
export -f make
part() {  # part NAME SECONDS COMMAND...: runs it under its limit and says how it ended
    local name=$1 limit=$2; shift 2
    echo; echo "=== $name (limit $limit s)"; local start=$SECONDS
    timeout --kill-after=5 "$limit" "$@"; local rc=$?
    echo "=== $name: exit $rc after $((SECONDS - start)) s"
}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv
if ! ./train_gpt -h > /dev/null 2>&1; then  # carried binaries that do not run here: build them here
    ./train_gpt -h 2>&1 | head -3; ldd ./train_gpt | grep "not found"
    unset -f make
    part build_here 240 make -j16 train_gpt train_gpt_fp32 train_gpt_fp16 tests/build/test_gpt2_gpu \
        dev/attention_forward dev/attention_backward dev/attention_ring dev/fp32/attention_ring
    make() { echo "(make $* skipped: built above)"; }
    export -f make
fi

COMMIT=$(cat .gpurun/commit 2>/dev/null || echo unknown); export COMMIT
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
mkdir -p "$OUTDIR/gpu-runs"
LLMC_BIN=${LLMC_BIN:-.gpurun/llmc/train_gpt2cu} LLMC_CUDNN_BIN=${LLMC_CUDNN_BIN:-.gpurun/llmc_cudnn/train_gpt2cu}
[ -x "$LLMC_BIN" ] || { echo "=== no llm.c default build at $LLMC_BIN: its column stays null"; LLMC_BIN=; }
[ -x "$LLMC_CUDNN_BIN" ] || { echo "=== no llm.c cuDNN build at $LLMC_CUDNN_BIN: its column stays null"; LLMC_CUDNN_BIN=; }
BENCH="env LLMC_BIN=$LLMC_BIN LLMC_CUDNN_BIN=$LLMC_CUDNN_BIN RECORD_DIR=$OUTDIR/gpu-runs STEPS=12 bash scripts/bench_gpu.sh"
part speed_b64 240 env BATCHES=64 $BENCH
# the kernels' options: -fa 2 (kernels/flash_attention_mma.cuh: FlashAttention-2 with the scores in
# registers) against -fa 1 (WMMA), and -ge (kernels/gelu_fusion.cuh: GELU in the fc GEMMs' cuBLASLt
# epilogues, the backward's with a 32 MiB workspace): the step's time under each; the faster become
# the defaults (and bench_gpu.sh's flags) where resume stays bit-exact (the suite's resume check)
part kernel_options 120 bash -c 'for f in "-fa 1 -ge 0" "-fa 2 -ge 0" "-fa 1 -ge 2" "-fa 2 -ge 2"; do echo "$f: $(./train_gpt -e d12 -b 16 -t 1024 -x 8 -v 0 -s 0 $f | grep -E "step +8/")"; done'
# the labs: version 7 forward and 6 backward are -fa 2's kernels, 6 and 5 -fa 1's
part lab_attention_forward 60 env DEV_REF_DIR=tests/build/pytorch_ops ./dev/attention_forward
part lab_attention_backward 40 env DEV_REF_DIR=tests/build/pytorch_ops ./dev/attention_backward
NCU_CMD="./train_gpt -e d12 -b 8 -t 1024 -x 1 -v 0 -s 0"
part kernels_of_one_step 90 "$(command -v ncu || echo /usr/local/cuda/bin/ncu)" --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 900 \
    --log-file "$OUTDIR/ncu.txt" $NCU_CMD
[ -s "$OUTDIR/ncu.txt" ] && python3 scripts/ncu_table.py "$OUTDIR/ncu.txt" --commit "$COMMIT" --gpu "$GPU" --B 8 --T 1024 \
    --command "ncu --clock-control none --metrics gpu__time_duration.sum $NCU_CMD" \
    --record "$OUTDIR/gpu-runs/ncu_$(date -u +%F)_${COMMIT}_B8.json"  # the kernels by time, largest first
part speed_b16_b32 200 env BATCHES="16 32" $BENCH
part correctness 150 env ONLY='gpu_gpt2_vs_pytorch|gpu_(fp32|bf16|fp16)_trajectory_accum1$' bash tests/run_tests_gpu.sh
# the layouts need mpirun: the .device bundle's (Debian's MPICH) needs libslurm38 in .device/debs (docs/gpu.md)
REST='memcheck_bf16|initcheck|racecheck|synccheck|lab_attention_ring|lab_layernorm_backward|lab_matmul_backward_bias'
if mpirun -np 1 true > /dev/null 2>&1; then REST="$REST|resume|dp2_zero|cp2|tp2|pp2"
else echo "=== mpirun does not start here ($(mpirun -np 1 true 2>&1 | head -1)): the multi-rank checks are left out"; fi
part rest_of_make_test_gpu 400 env ONLY="$REST" bash tests/run_tests_gpu.sh

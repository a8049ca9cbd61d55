#!/usr/bin/env bash
# One short GPU lease, used in order of value: each part under its own time limit, so that a
# lease of minutes ends with the most important answers even when a later part runs out.
# Everything is built beforehand on a machine without a GPU (nvcc is enough; docs/gpu.md:
# "A GPU session") and carried, with .device (MPICH, found by .device/env.sh) and data/:
#   1. the CUDA build against PyTorch float64 (test_gpt2_gpu) and its trajectories, one micro-step
#   2. GPT-2 124M step speed, ours against llm.c's train_gpt2cu (scripts/bench_gpu.sh), and under -ge 0, 1, 2
#   3. the flash attention labs: every version against the host twin and PyTorch, then timed
#   4. each kernel's time in one d12 step (ncu, one metric: gpu__time_duration), as CSV
#   5. what is left of make test-gpu: compute-sanitizer, resume, the layouts
# LLMC_DIR: where llm.c's train_gpt2cu is (part 2 is skipped without it). Output: the log on
# stdout and, where $OUT is set (the device tool's folder), $OUT/gpu_session.log and the CSV.
#   LLMC_DIR=.gpurun/llmc bash scripts/gpu_session.sh
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

part correctness 150 env ONLY='gpu_gpt2_vs_pytorch|gpu_(fp32|bf16|fp16)_trajectory_accum1$' bash tests/run_tests_gpu.sh
if [ -n "${LLMC_DIR:-}" ]; then part speed 170 env LLMC_DIR="$LLMC_DIR" STEPS=12 BATCHES="16 32 64" bash scripts/bench_gpu.sh
else echo "=== speed: skipped (no LLMC_DIR)"; fi
# -ge (kernels/gelu_fusion.cuh): GELU in the fc GEMMs' cuBLASLt epilogues, the backward's with a 32 MiB
# workspace (without one its DGELU GEMM measured 4x slower): the step's time at -ge 0, 1 and 2
part gelu_fusion 60 bash -c 'for g in 0 1 2; do echo "-ge $g: $(./train_gpt -e d12 -b 16 -t 1024 -x 8 -v 0 -s 0 -ge $g | grep -E "step +8/")"; done'
part lab_attention_forward 60 env DEV_REF_DIR=tests/build/pytorch_ops ./dev/attention_forward
part lab_attention_backward 40 env DEV_REF_DIR=tests/build/pytorch_ops ./dev/attention_backward
part kernels_of_one_step 90 "$(command -v ncu || echo /usr/local/cuda/bin/ncu)" --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 900 \
    --log-file "$OUTDIR/ncu.txt" ./train_gpt -e d12 -b 8 -t 1024 -x 1 -v 0 -s 0
[ -s "$OUTDIR/ncu.txt" ] && python3 scripts/ncu_table.py "$OUTDIR/ncu.txt"  # the kernels by time, largest first
# the layouts need mpirun: the .device bundle's (Debian's MPICH) needs libslurm38 in .device/debs (docs/gpu.md)
REST='memcheck_bf16|initcheck|racecheck|synccheck|lab_attention_ring|lab_layernorm_backward|lab_matmul_backward_bias'
if mpirun -np 1 true > /dev/null 2>&1; then REST="$REST|resume|dp2_zero|cp2|tp2|pp2"
else echo "=== mpirun does not start here ($(mpirun -np 1 true 2>&1 | head -1)): the multi-rank checks are left out"; fi
part rest_of_make_test_gpu 400 env ONLY="$REST" bash tests/run_tests_gpu.sh

#!/usr/bin/env bash
# tests/run_tests_gpu.sh: `make test-gpu`: the CUDA trainer against the PyTorch float64
# reference, through flags only (the GPU build computes fp32 without TF32).
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
REF=tests/build/ref
mkdir -p tests/build
passed=0; failed=0
check() {
    local name=$1; shift
    if "$@" > tests/build/$name.log 2>&1; then echo "PASS $name"; passed=$((passed + 1))
    else echo "FAIL $name"; tail -n 25 tests/build/$name.log | sed 's/^/    /'; failed=$((failed + 1)); fi
}
[ -f $REF/debug_state.bin ] || check pytorch_reference $PYTHON tests/reference.py --out $REF
# tolerances as the CPU builds' (tests/run_tests.sh): fp32 without TF32, bf16 3e-2, fp16 1e-2
for K in 1 2 4; do
    check gpu_fp32_trajectory_accum$K $PYTHON tests/check_trajectory.py --trainer ./train_gpt_fp32 --ref $REF --accum $K --tol 1e-4
    check gpu_bf16_trajectory_accum$K $PYTHON tests/check_trajectory.py --trainer ./train_gpt --ref $REF --accum $K --tol 3e-2
    check gpu_fp16_trajectory_accum$K $PYTHON tests/check_trajectory.py --trainer ./train_gpt_fp16 --ref $REF --accum $K --tol 1e-2
done
check gpu_bad_input bash tests/test_bad_input.sh ./train_gpt_fp32 "$REF"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]

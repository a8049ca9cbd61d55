#!/usr/bin/env bash
# tests/run_tests_gpu.sh: `make test-gpu`: the CUDA trainer against the PyTorch float64
# reference, through flags only (the GPU build computes fp32 without TF32).
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
TRAINER=${TRAINER:-./train_gpt}
REF=tests/build/ref
mkdir -p tests/build
passed=0; failed=0
check() {
    local name=$1; shift
    if "$@" > tests/build/$name.log 2>&1; then echo "PASS $name"; passed=$((passed + 1))
    else echo "FAIL $name"; tail -n 25 tests/build/$name.log | sed 's/^/    /'; failed=$((failed + 1)); fi
}
[ -f $REF/debug_state.bin ] || check pytorch_reference $PYTHON tests/reference.py --out $REF
for K in 1 2 4; do
    check gpu_trajectory_accum$K $PYTHON tests/check_trajectory.py --trainer $TRAINER --ref $REF --accum $K --tol 1e-4
done
check gpu_bad_input bash tests/test_bad_input.sh "$TRAINER" "$REF"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]

#!/usr/bin/env bash
# ./train_gpt (the CUDA build) where no GPU can be used: one line on every rank that says so and
# points to ./train_gpt_cpu, and a non-zero exit, not a crash or an NCCL error. Skipped where
# train_gpt was not built (no nvcc) or a GPU is present: exit 77, which run_tests.sh reports as
# SKIP and counts (CI, which has nvcc and no GPU, must skip nothing).
set -euo pipefail
D=tests/build/no_gpu; rm -rf $D; mkdir -p $D
if [ ! -x ./train_gpt ]; then echo "skipped: ./train_gpt was not built (no nvcc)"; exit 77; fi
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then echo "skipped: this machine has a GPU"; exit 77; fi
for np in 1 2; do
    code=0
    timeout 120 mpirun -np $np ./train_gpt -e d2 -x 1 > $D/out.txt 2> $D/err.txt || code=$?
    [ $code -ne 0 ] && [ $code -ne 124 ] || { echo "FAIL: np $np exit $code"; cat $D/err.txt; exit 1; }
    count=$(grep -c "^error: no CUDA device found.*./train_gpt_cpu takes the same flags" $D/err.txt || true)
    [ "$count" -eq $np ] || { echo "FAIL: the line from $count of $np ranks"; cat $D/err.txt; exit 1; }
    echo "ok (np $np, exit $code): $(head -n 1 $D/err.txt)"
done

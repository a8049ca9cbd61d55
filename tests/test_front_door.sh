#!/usr/bin/env bash
# The README's front door at 8 ranks with the default B=4, T=1024 on the default data (make data):
# tinyshakespeare's validation shard (32,768 tokens) is smaller than one global micro-batch
# (8 x 4 x 1024 + 1), which once stopped the run at data loading. Now the run trains, says in one
# line that it validates on fewer sequences per rank, and validates. (-x 1 -m 1: the issue's
# -x 2 with 20 validation batches takes minutes on 2 cores; the data loading is the same.)
set -euo pipefail
D=tests/build/front_door; rm -rf $D; mkdir -p $D
OMP_NUM_THREADS=1 timeout 600 mpirun -np 8 ./train_gpt_cpu -e d2 -x 1 -m 1 > $D/out.txt 2>&1 || { tail -n 5 $D/out.txt; exit 1; }
grep -m1 "^note: validating on B=3 sequences per rank" $D/out.txt
grep -m1 "^step     1/1" $D/out.txt
grep -m1 "^val loss" $D/out.txt

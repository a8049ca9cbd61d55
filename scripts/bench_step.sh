#!/usr/bin/env bash
# Step time of a model at one sequence length for several micro-batch sizes: the median
# of the steps after the first two (warm-up), from the trainer's own JSON log.
#   scripts/bench_step.sh [TRAINER] [INIT] [T] [B...]
#   scripts/bench_step.sh ./train_gpt d12 1024 1 2 4 8       GPT-2 124M on a GPU
#   scripts/bench_step.sh ./train_gpt_cpu d2 256 1 2 4        a small model on the CPU
# Needs the tinyshakespeare shards (`make data`). Extra trainer flags: BENCH_FLAGS="-r 1 -z 1".
set -eu
cd "$(dirname "$0")/.."
TRAINER=${1:-./train_gpt}; INIT=${2:-d12}; T=${3:-1024}; shift $(( $# < 3 ? $# : 3 ))
BATCHES=${*:-1 2 4 8}
[ -s data/tinyshakespeare_train.bin ] || make data
D=$(mktemp -d)
printf "%-8s %6s %4s %12s %12s\n" init T B "ms/step" "tok/s"
for B in $BATCHES; do
    $TRAINER -e $INIT -t $T -b $B -x 8 -v 0 -s 0 -log $D/b$B.jsonl ${BENCH_FLAGS:-} > $D/b$B.out 2>&1 || { echo "B=$B failed:"; tail -3 $D/b$B.out; continue; }
    /usr/bin/python3 - $D/b$B.jsonl $INIT $T $B <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
ms = statistics.median(r["ms"] for r in rows)
print(f"{sys.argv[2]:<8} {sys.argv[3]:>6} {sys.argv[4]:>4} {ms:12.1f} {int(sys.argv[3]) * int(sys.argv[4]) / ms * 1000:12.0f}")
PY
done
rm -rf $D

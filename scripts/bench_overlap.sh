#!/usr/bin/env bash
# The data-parallel reductions beside the backward (overlap.h), measured on the CPU build: GPT-2 of
# depth 4 (-e d4: C 256, 16.4M parameters, 12.9M of them the tied wte) at dp 4, ZeRO-1 and ZeRO-3,
# -overlap 0 and 1. Each log row carries the step's split (step_time.h, averaged over the ranks);
# this prints, per run, the mean over steps 2..N of the step, its compute, the time collectives were
# in flight and the part of it the ranks waited (comm_exposed), and exposed / in flight: the overlap
# works where it is under 1. A timing, so a benchmark and not a test (tests/test_overlap.sh holds
# what does not depend on the machine's load: at -overlap 1 some communication in flight beside the
# backward, at 0 none).
#   scripts/bench_overlap.sh [STEPS]    STEPS per run, default 6 (about 4 s each on 2 cores)
# What to expect: ZeRO-1 waits for under the whole flight (each layer's reduce-scatter runs behind the
# layers below; the wte's, most of the bytes, comes last and is all exposed: zero.h); ZeRO-3's
# gathers run one layer ahead and its reductions beside the backward (zero.h: zero_gather_unit).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-6}
PYTHON=${PYTHON:-/usr/bin/python3}
export OMP_NUM_THREADS=1
[ -x ./train_gpt_cpu ] || { echo "bench_overlap.sh: build the CPU trainer first (make train_gpt_cpu)"; exit 1; }
[ -f data/tinyshakespeare_train.bin ] || make -s data
D=$(mktemp -d); trap 'rm -rf $D' EXIT
for z in 1 3; do
    for o in 0 1; do
        mpirun -np 4 ./train_gpt_cpu -e d4 -i data/tinyshakespeare_train.bin -b 4 -t 64 -x $STEPS -v 0 -s 0 \
            -z $z -overlap $o -log $D/z${z}_overlap$o.jsonl > /dev/null
    done
done
$PYTHON - $D <<'PY'
import json, sys
d = sys.argv[1]
print(f"{'dp 4, d4, B 4, T 64':24} {'step ms':>8} {'compute':>8} {'in flight':>10} {'exposed':>8} {'exposed/in flight':>18}")
for z in (1, 3):
    for o in (0, 1):
        rows = [json.loads(l) for l in open(f"{d}/z{z}_overlap{o}.jsonl")][1:]  # step 1 warms up
        mean = lambda f: sum(f(r) for r in rows) / len(rows)
        ms, compute = mean(lambda r: r["ms"]), mean(lambda r: r["time_ms"]["compute"])
        flight, exposed = mean(lambda r: r["time_ms"]["comm_in_flight"]), mean(lambda r: r["time_ms"]["comm_exposed"])
        print(f"{f'ZeRO-{z} -overlap {o}':24} {ms:8.1f} {compute:8.1f} {flight:10.1f} {exposed:8.1f} {exposed / flight:18.2f}")
PY

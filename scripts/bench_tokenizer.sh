#!/usr/bin/env bash
# Encode throughput of ./tokenize shards with 1 and 2 threads (2 = the cores of the development
# machine), medians of RUNS interleaved pairs of runs (default 9), on:
#   documents  tinyshakespeare x10 (11 MB) as blank-line documents: documents in parallel
#   one file   tinyshakespeare x5 (5.6 MB) as one document: cut at safe places, pieces in parallel
#   one file   5 MB of made-up words drawn Zipf-like from 200,000 (seed 1): fewer cache hits, as
#              in varied English
#   JSON lines tinyshakespeare x5's blank-line blocks as {"text": ...} lines (6 MB), also gzip-compressed
# The time is ./tokenize's own: reading, encoding and writing every shard, after the vocabulary is
# loaded and before the word cache is freed. Each input's shards from 1 and 2 threads must be
# byte for byte the same (the ids do not depend on the threads), or the benchmark fails.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x ./tokenize ] || make tokenize
[ -s data/tinyshakespeare.txt ] || make data
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
for i in $(seq 10); do cat data/tinyshakespeare.txt; done > $D/shakespeare_x10.txt
for i in $(seq 5); do cat data/tinyshakespeare.txt; done > $D/shakespeare_x5.txt
python3 - $D <<'PY'
import itertools, json, random, sys
d = sys.argv[1]
rng = random.Random(1)
syllables = "an be con de er in ing ion lo ma ne or pre qu re st ter un ver wh ly ous ent al ph ch th ight ow ea".split()
words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(200000)]
weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(words))))
lines, size = [], 0
while size < 5_000_000:
    line = " ".join(rng.choices(words, cum_weights=weights, k=rng.randint(5, 14))).capitalize() + rng.choice(".,;!?:") + "\n"
    lines.append(line + ("\n" if rng.random() < 0.1 else ""))
    size += len(lines[-1])
open(f"{d}/zipf_words.txt", "w").write("".join(lines))
text = open("data/tinyshakespeare.txt", encoding="utf-8").read()
with open(f"{d}/shakespeare_x5.jsonl", "w") as f:
    for block in text.split("\n\n") * 5:
        f.write(json.dumps({"text": block + "\n\n"}) + "\n")
PY
gzip -k $D/shakespeare_x5.jsonl
seconds() {  # one run of ./tokenize shards ARGS...: its own time (the last run's shards removed first:
              # replacing an existing file would add its deletion to the time)
    rm -f $D/out*
    ./tokenize shards -o $D/out "$@" 2>&1 > /dev/null | grep -oE "tokens in [0-9.]+ s" | grep -oE "[0-9.]+"
}
# RUNS pairs of runs, 1 thread then 2, interleaved, so that both see the machine in the same mood
# (its speed drifts by up to 2x within minutes); speedup: the median of the pairs' ratios, and
# the range of the middle half of them (first to third quartile), which shows how much the
# machine moved during the benchmark
RUNS=${RUNS:-9}
printf "%-42s %6s %10s %10s %8s   %s\n" input MB "1 thread" "2 threads" speedup "middle half of the pairs"
for input in "documents:--split-on-blank-lines:shakespeare_x10.txt" "one file:-:shakespeare_x5.txt" \
             "one file:-:zipf_words.txt" "JSON lines:--jsonl:shakespeare_x5.jsonl" "JSON lines, gzip:--jsonl:shakespeare_x5.jsonl.gz"; do
    IFS=: read -r kind flag file <<< "$input"
    args=(); [ "$flag" != "-" ] && args=("$flag")
    for run in $(seq $RUNS); do
        echo "$(seconds --threads 1 "${args[@]}" $D/$file) $(seconds --threads 2 "${args[@]}" $D/$file)"
    done > $D/pairs.txt
    ./tokenize shards -o $D/one --threads 1 "${args[@]}" $D/$file > /dev/null 2>&1
    ./tokenize shards -o $D/two --threads 2 "${args[@]}" $D/$file > /dev/null 2>&1
    cmp -s $D/one_train.bin $D/two_train.bin || { echo "FAIL: $file: 2 threads give other ids than 1"; exit 1; }
    python3 - "$kind: $file" $D/$file $D/pairs.txt <<'PY'
import os, statistics, sys
name, path, pairs = sys.argv[1], sys.argv[2], [tuple(map(float, l.split())) for l in open(sys.argv[3])]
mb = os.path.getsize(path[:-3] if path.endswith(".gz") else path) / 1e6  # text MB, also for the .gz
one, two = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
ratios = [a / b for a, b in pairs]
low, speedup, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
print(f"{name:<42} {mb:6.1f} {mb / one:5.1f} MB/s {mb / two:5.1f} MB/s {speedup:7.2f}x   {low:.2f}-{high:.2f}x")
PY
done

#!/usr/bin/env bash
# Encode throughput of ./tokenize shards with 1 and 2 threads (2 = the cores of the development
# machine), best of 5 runs each (this machine's timings wander by 20%), on:
#   documents  tinyshakespeare x10 (11 MB) as blank-line documents: documents in parallel
#   one file   tinyshakespeare x5 (5.6 MB) as one document: cut at safe places, pieces in parallel
#   one file   5 MB of made-up words drawn Zipf-like from 200,000 (seed 1): fewer cache hits, as
#              in varied English
#   JSON lines tinyshakespeare's blank-line blocks as {"text": ...} lines
# The time is ./tokenize's own: reading, encoding and writing every shard, after the vocabulary is
# loaded and before the per-thread word caches are freed.
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
with open(f"{d}/shakespeare.jsonl", "w") as f:
    for block in text.split("\n\n"):
        f.write(json.dumps({"text": block + "\n\n"}) + "\n")
PY
best_seconds() {  # best of 5 runs of: ./tokenize shards ARGS...
    for run in 1 2 3 4 5; do
        ./tokenize shards -o $D/out "$@" 2>&1 > /dev/null | grep -oE "tokens in [0-9.]+ s" | grep -oE "[0-9.]+"
    done | sort -n | head -n1
}
printf "%-34s %9s %9s %9s %8s\n" input MB "1 thread" "2 threads" speedup
for input in "documents:--split-on-blank-lines:shakespeare_x10.txt" "one file:-:shakespeare_x5.txt" \
             "one file:-:zipf_words.txt" "JSON lines:--jsonl:shakespeare.jsonl"; do
    IFS=: read -r kind flag file <<< "$input"
    args=(); [ "$flag" != "-" ] && args=("$flag")
    one=$(best_seconds --threads 1 "${args[@]}" $D/$file)
    two=$(best_seconds --threads 2 "${args[@]}" $D/$file)
    mb=$(python3 -c "import os; print(f'{os.path.getsize(\"$D/$file\") / 1e6:.1f}')")
    python3 -c "print(f'{\"$kind: $file\":<34} {$mb:9.1f} {$mb / $one:6.1f} MB/s {$mb / $two:6.1f} MB/s {$one / $two:7.2f}x')"
done

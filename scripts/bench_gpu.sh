#!/usr/bin/env bash
# GPT-2 124M on one GPU, side by side in one run: llm.c's train_gpt2cu and our train_gpt, bf16,
# T=1024, B in 16 32 64, on the same random model file (ours after one step at learning rate 0,
# written in llm.c's bf16 format, version 5) and the same tokens (tinyshakespeare). Prints each
# program's median tokens per second (the first two steps left out), their ratio, our MFU (mfu.h)
# and llm.c's own, for every B (llm.c's tok/s is its bias-corrected moving average; ours each step's).
#   LLMC_DIR=~/llm.c scripts/bench_gpu.sh          STEPS=10 BATCHES="16 32 64"
# LLMC_DIR: a checkout of karpathy/llm.c (we compare with commit f1e2ace) in which llm.c's own
# `make train_gpt2cu` was run; this script builds no other project's code. Record the result in
# docs/gpu.md ("Measured on a GPU": the commit, the GPU, the table this prints).
set -euo pipefail
cd "$(dirname "$0")/.."
LLMC_DIR=${LLMC_DIR:-}
STEPS=${STEPS:-10}
BATCHES=${BATCHES:-16 32 64}
[ -n "$LLMC_DIR" ] && [ -x "$LLMC_DIR/train_gpt2cu" ] || {
    echo "bench_gpu.sh: set LLMC_DIR to a checkout of karpathy/llm.c in which llm.c's own \`make train_gpt2cu\` was run"
    echo "  (a clone of karpathy/llm.c: git checkout f1e2ace, then make train_gpt2cu in it)"; exit 1; }
LLMC_DIR=$(cd "$LLMC_DIR" && pwd)
[ -s data/tinyshakespeare_train.bin ] || make data
make -s train_gpt
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT

# the same random GPT-2 124M for both: our d12 initialisation after one step at learning rate 0
./train_gpt -e d12 -b 4 -t 1024 -x 1 -l 0 -v 0 -s 0 -o "$D/init" > "$D/init.out" 2>&1 || { tail -3 "$D/init.out"; exit 1; }
MODEL="$D/init/model_00000001.bin"
TRAIN="$PWD/data/tinyshakespeare_train.bin" VAL="$PWD/data/tinyshakespeare_val.bin"

for B in $BATCHES; do
    # llm.c: validation only after the last step (its -v 0 would divide by zero), on the train shard
    # (it asserts that every shard holds B*T+1 tokens: tinyshakespeare's val shard has 32K), no
    # sampling, no checkpoints; its step line carries ms and tok/s
    (cd "$D" && "$LLMC_DIR/train_gpt2cu" -e "$MODEL" -i "$TRAIN" -j "$TRAIN" -b $B -t 1024 -x $STEPS -v 1000000 -s 0 -h 0 \
        > "llmc_b$B.out" 2>&1) || { echo "llm.c at B=$B failed:"; tail -3 "$D/llmc_b$B.out"; continue; }
    ./train_gpt -e "$MODEL" -i "$TRAIN" -j "$VAL" -b $B -t 1024 -x $STEPS -v 0 -s 0 -log "$D/ours_b$B.jsonl" \
        > "$D/ours_b$B.out" 2>&1 || { echo "ours at B=$B failed:"; tail -3 "$D/ours_b$B.out"; continue; }
done

python3 - "$D" $BATCHES <<'PY'
import json, os, re, statistics, sys
d, batches = sys.argv[1], sys.argv[2:]
print(f"GPT-2 124M, bf16, T=1024, one GPU; median of the steps after the first two")
print(f"{'B':>4} {'llm.c tok/s':>12} {'ours tok/s':>12} {'ours/llm.c':>11} {'llm.c MFU':>10} {'our MFU':>8}")
for B in batches:
    lp, op = f"{d}/llmc_b{B}.out", f"{d}/ours_b{B}.jsonl"
    if not (os.path.exists(lp) and os.path.exists(op)):
        continue
    llmc = re.findall(r"^step +\d+/\d+ \|.*\| (-?[0-9.]+)% bf16 MFU \| ([0-9.]+) tok/s", open(lp).read(), re.M)[2:]
    ours = [json.loads(l) for l in open(op)][2:]
    if not llmc or not ours:
        print(f"{B:>4}  (no step lines to read)")
        continue
    a = statistics.median(float(t) for _, t in llmc)
    o = statistics.median(r["tok_per_s"] for r in ours)
    a_mfu = statistics.median(float(m) for m, _ in llmc)
    mfus = [r["mfu"] for r in ours if r.get("mfu") is not None]
    o_mfu = f"{100 * statistics.median(mfus):7.1f}%" if mfus else "     ?"
    print(f"{B:>4} {a:12.0f} {o:12.0f} {o / a:10.2f}x {a_mfu:9.1f}% {o_mfu}")
PY

#!/usr/bin/env bash
# scripts/fineweb.sh [fineweb|edu] [OUT_DIR]: FineWeb's 10B-token sample (HuggingFaceFW/fineweb,
# sample-10BT), or FineWeb-Edu's (HuggingFaceFW/fineweb-edu), as llm.c's dev/data/fineweb.py writes
# it: GPT-2's ids of each document's "text" after an EOT ("<|endoftext|>" in a text is text, as
# tiktoken's encode_ordinary reads it), uint16 shards of 100M tokens, the first 100M tokens the
# validation shard. Writes OUT_DIR/NAME_val.bin and OUT_DIR/NAME_train_000000.bin ... (about 100
# shards, 19 GB; NAME fineweb or edu_fineweb; OUT_DIR data/fineweb10B or data/edu_fineweb10B).
# Needs a network to Hugging Face's hub. The Python package `datasets` (pinned) goes into a virtual
# environment of its own (.venv-fineweb), not beside the system's torch: it brings numpy 2, which
# Debian's torch 1.13 cannot import. The documents stream from the hub (nothing but the shards is
# kept) through this machine's ./tokenize (every core), not Python's tokenizer.
#   FINEWEB_JSONL=FILE   documents from FILE's JSON lines instead (tests/test_recipe.sh: the same
#                        pipeline on a small file, where no hub can be reached)
set -euo pipefail
cd "$(dirname "$0")/.."
KIND=${1:-fineweb}
case $KIND in
    fineweb) DATASET=HuggingFaceFW/fineweb NAME=fineweb ;;
    edu) DATASET=HuggingFaceFW/fineweb-edu NAME=edu_fineweb ;;
    *) echo "usage: scripts/fineweb.sh [fineweb|edu] [OUT_DIR]"; exit 1 ;;
esac
OUT=${2:-data/${NAME}10B}
SHARD=${FINEWEB_SHARD_TOKENS:-100000000}  # llm.c's 10**8 (tests make it small)
mkdir -p "$OUT"
[ -x ./tokenize ] || make tokenize
documents() {  # the documents, one JSON line each ({"text": ...}), on stdout
    if [ -n "${FINEWEB_JSONL:-}" ]; then cat "$FINEWEB_JSONL"; return; fi
    local venv=${FINEWEB_VENV:-.venv-fineweb}
    [ -x "$venv/bin/python" ] || { /usr/bin/python3 -m venv "$venv" && "$venv/bin/pip" install -q datasets==3.0.1; }
    "$venv/bin/python" - "$DATASET" <<'PY'
import json, sys
from datasets import load_dataset
for doc in load_dataset(sys.argv[1], name="sample-10BT", split="train", streaming=True):
    sys.stdout.write(json.dumps({"text": doc["text"]}) + "\n")
PY
}
documents | ./tokenize shards --jsonl --val-tokens "$SHARD" --shard-tokens "$SHARD" -o "$OUT/$NAME" /dev/stdin
ls "$OUT"

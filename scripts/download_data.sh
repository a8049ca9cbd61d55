#!/usr/bin/env bash
# Puts GPT-2's vocabulary and tinyshakespeare into data/: copied from ../shared/data when
# this checkout sits beside it, otherwise downloaded from their public homes:
#   https://openaipublic.blob.core.windows.net/gpt-2/models/124M/encoder.json
#   https://openaipublic.blob.core.windows.net/gpt-2/models/124M/vocab.bpe
#   https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
# `download_data.sh hellaswag` fetches HellaSwag's validation set (10,042 examples, as llm.c's
# dev/data/hellaswag.py does) and writes data/hellaswag_val.bin, the trainer's -h 1 default -hf:
#   https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl
set -eu
cd "$(dirname "$0")/.."
mkdir -p data/gpt2
fetch() {  # fetch DEST SHARED_PATH URL
    [ -s "$1" ] && return 0
    if [ -s "$2" ]; then cp "$2" "$1"; echo "copied $2 -> $1"; return 0; fi
    echo "downloading $3 -> $1"
    if command -v curl > /dev/null; then curl -fsSL "$3" -o "$1.tmp"; else wget -q "$3" -O "$1.tmp"; fi
    mv "$1.tmp" "$1"
}
fetch data/gpt2/encoder.json ../shared/data/gpt2/encoder.json https://openaipublic.blob.core.windows.net/gpt-2/models/124M/encoder.json
fetch data/gpt2/vocab.bpe ../shared/data/gpt2/vocab.bpe https://openaipublic.blob.core.windows.net/gpt-2/models/124M/vocab.bpe
fetch data/tinyshakespeare.txt ../shared/data/tinyshakespeare.txt https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
if [ "${1:-}" = hellaswag ]; then
    fetch data/hellaswag_val.jsonl ../shared/data/hellaswag_val.jsonl \
        https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl
    [ -x ./tokenize ] || make tokenize
    ./tokenize hellaswag data/hellaswag_val.jsonl data/hellaswag_val.bin
fi

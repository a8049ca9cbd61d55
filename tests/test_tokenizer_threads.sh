#!/usr/bin/env bash
# ./tokenize shards's threads under ThreadSanitizer: the word cache they share without a lock
# (tokenizer.h: WordCache), and the encoding pool (tokenize.cpp: EncodePool): jobs added by the
# reader while workers encode, written and removed oldest first. Built with -fsanitize=thread;
# 4 threads on one file cut in 4 kB pieces (read ahead by 64 MB, and by 20 kB so that the reader
# waits on the workers all along) and on JSON lines: no data race reported, and the ids equal
# the plain build's on 1 thread.
set -euo pipefail
D=tests/build/tokenizer_threads; rm -rf $D; mkdir -p $D
g++ -O1 -g -fsanitize=thread -std=c++17 tokenizer/tokenize.cpp -lpcre2-8 -lz -pthread -o $D/tokenize_tsan
cat data/tinyshakespeare.txt data/tinyshakespeare.txt > $D/twice.txt
python3 - $D <<'PY'
import json, sys
text = open("data/tinyshakespeare.txt", encoding="utf-8").read()
with open(f"{sys.argv[1]}/blocks.jsonl", "w") as f:
    for block in text.split("\n\n")[:3000]:
        f.write(json.dumps({"text": block}) + "\n")
PY
for input in "twice.txt:--piece-bytes 4096" "twice.txt:--piece-bytes 4096 --read-ahead-bytes 20000" "blocks.jsonl:--jsonl"; do
    file=${input%%:*} flags=${input#*:}
    TSAN_OPTIONS="halt_on_error=1 exitcode=66" $D/tokenize_tsan shards -o $D/tsan --threads 4 $flags $D/$file > /dev/null 2> $D/tsan.err || {
        echo "FAIL: $file under ThreadSanitizer"; head -n 40 $D/tsan.err; exit 1; }
    ! grep -q "ThreadSanitizer" $D/tsan.err || { echo "FAIL: $file: a ThreadSanitizer report"; head -n 40 $D/tsan.err; exit 1; }
    ./tokenize shards -o $D/plain --threads 1 $flags $D/$file > /dev/null 2>&1
    cmp $D/tsan_train.bin $D/plain_train.bin || { echo "FAIL: $file: 4 threads under TSan give other ids than 1"; exit 1; }
    echo "ok: $file ($flags) on 4 threads under ThreadSanitizer: no race, the ids of 1 thread"
done

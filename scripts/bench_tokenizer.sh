#!/usr/bin/env bash
# Encode throughput of ./tokenize: tinyshakespeare repeated 10 times (11 MB), split into
# blank-line documents, with 1 and with 2 threads. Prints MB/s (file bytes / wall time of
# the encoding, as ./tokenize reports it; reading and writing files excluded).
set -eu
cd "$(dirname "$0")/.."
[ -x ./tokenize ] || make tokenize
[ -s data/tinyshakespeare.txt ] || make data
D=$(mktemp -d)
for i in $(seq 10); do cat data/tinyshakespeare.txt; done > $D/shakespeare_x10.txt
echo "input: $(du -h $D/shakespeare_x10.txt | cut -f1) ($(nproc) cores here)"
for threads in 1 2; do
    ./tokenize shards -o $D/out --threads $threads --split-on-blank-lines $D/shakespeare_x10.txt 2>&1 >/dev/null \
        | grep documents | sed "s/^/threads $threads: /"
done
rm -rf $D

#!/usr/bin/env bash
# A short run from a fresh d2 (L=2, C=128) on tinyshakespeare: the loss must fall by more
# than 3 nats within 40 steps (from ~10.8 = log(50257)), validation must run, sampling must run.
set -eu
TRAINER=$1; SHARED=$2; PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/text; mkdir -p $D; rm -f $D/log.jsonl
$PYTHON tests/make_byte_shard.py $SHARED/data/gpt2/encoder.json $SHARED/data/tinyshakespeare.txt $D/shakespeare
$TRAINER -e d2 -i $D/shakespeare_train.bin -j $D/shakespeare_val.bin -b 4 -t 64 -x 40 -l 3e-3 -u 5 \
    -v 20 -m 4 -s 40 -g 16 -log $D/log.jsonl -o $D/out | tee $D/stdout.txt
$PYTHON - $D/log.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-5:]) / 5
vals = [r["val_loss"] for r in rows if "val_loss" in r]
print(f"first loss {first:.3f}, mean of last 5 {last:.3f}, val losses {vals}")
assert len(rows) == 40 and [r["step"] for r in rows] == list(range(1, 41))
assert all(k in rows[0] for k in ("loss", "lr", "norm", "ms", "tok_per_s"))
assert first > 10.0 and last < first - 3.0, "loss did not fall"
assert len(vals) == 2 and vals[-1] < 8.0, "validation did not run or did not improve"
PY
grep -q "^sample (token ids):" $D/stdout.txt
test -s $D/out/model_00000040.bin

#!/usr/bin/env bash
# The foundation's and the tokenizer's end-to-end check, as a user runs it after `make data`:
#   ./train_gpt_cpu -e d2 -b 4 -t 256 -x 20 -s 10
# on tinyshakespeare (BPE shards from ./tokenize), with no -i/-j: the loss must fall, the
# validation must run, samples must print as decoded text and land in the log, the model file
# must be written.
set -euo pipefail
PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/text; rm -rf $D; mkdir -p $D
./train_gpt_cpu -e d2 -b 4 -t 256 -x 20 -s 10 -log $D/log.jsonl -o $D/out | tee $D/stdout.txt
grep -q "training on data/tinyshakespeare_train.bin, validating on data/tinyshakespeare_val.bin: the default shards" $D/stdout.txt
$PYTHON - $D/log.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-3:]) / 3
vals = [r["val_loss"] for r in rows if "val_loss" in r]
samples = [r["sample"] for r in rows if "sample" in r]
print(f"first loss {first:.3f}, mean of last 3 {last:.3f}, val {vals}, samples {[s[:40] for s in samples]}")
assert len(rows) == 20 and [r["step"] for r in rows] == list(range(1, 21))
assert all(k in rows[0] for k in ("loss", "lr", "norm", "ms", "tok_per_s", "mfu"))
assert first > 10.5 and last < first - 0.5, "loss did not fall"
assert len(vals) == 1 and vals[0] < first, "validation did not run or did not improve"
assert [r["step"] for r in rows if "sample" in r] == [10, 20]
assert all(len(s) > 40 and not s.replace(" ", "").isdigit() for s in samples), "samples are not decoded text"
PY
grep -q "^sample:" $D/stdout.txt
test -s $D/out/model_00000020.bin

#!/usr/bin/env bash
# make shakespeare's script (scripts/shakespeare.sh), small: a d2 model, 4 steps, 1024 validation
# tokens. What the learner is promised is there: a sample of the untrained model and two from
# training (text, decoded), the loss plot as a PNG, and the last line with the validation loss
# beside the bigram model's on the same tokens (scripts/bigram_loss.py); the validation loss in that
# line is the run's last (its JSON log's), and below the untrained model's (it learnt something in
# 4 steps). The full run's numbers are a measurement, in docs/shakespeare.md, not a test.
set -euo pipefail
PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/shakespeare; rm -rf $D
OMP_NUM_THREADS=2 MODEL=d2 B=4 T=64 STEPS=4 LR=1e-3 VAL_TOKENS=1024 OUT=$D bash scripts/shakespeare.sh > $D.txt 2>&1 \
    || { tail -n 5 $D.txt; echo "FAIL: scripts/shakespeare.sh"; exit 1; }
cat $D.txt
$PYTHON - $D.txt $D/log.jsonl $D/loss.png <<'PY'
import json, re, sys
out, log, png = open(sys.argv[1], errors="replace").read(), [json.loads(l) for l in open(sys.argv[2])], sys.argv[3]
samples = [s for s in re.findall(r"^---\n(.*?)(?=\n---|\n--|\n==)", out, re.M | re.S)]
assert len(samples) == 3 and all(len(s.strip()) > 20 and not s.replace(" ", "").isdigit() for s in samples), \
    f"FAIL: not three decoded samples (untrained, halfway, end): {samples}"
assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", f"FAIL: {png} is not a PNG"
last = re.search(r"^== [0-9]+ s\. Validation loss ([0-9.]+); a bigram model's on the same 1024 tokens: ([0-9.]+) "
                 r"\((beaten|not beaten)\)", out, re.M)
assert last, "FAIL: no last line with the validation and bigram losses"
val, bigram = float(last[1]), float(last[2])
logged = [r["val_loss"] for r in log if "val_loss" in r]
assert len(logged) == 4 and abs(val - logged[-1]) < 1e-5, f"FAIL: the last line's {val}, the log's {logged}"
assert logged[-1] < logged[0] < 11, f"FAIL: the validation loss did not fall: {logged}"
assert (last[3] == "beaten") == (val < bigram) and 3 < bigram < 7, f"FAIL: bigram {bigram}, verdict {last[3]}"
print(f"ok: three samples, {png}, validation loss {logged} against the bigram's {bigram}")
PY

#!/usr/bin/env bash
# The GPT-2 124M recipe's own scripts, small, where no hub can be reached (docs/recipes.md):
#  - scripts/fineweb.sh's pipeline (documents as JSON lines -> ./tokenize shards) on tinyshakespeare's
#    paragraphs as documents, shards of 10,000 tokens: the validation shard first, then the train
#    shards, each whole, together [EOT] + GPT-2's ids of each document in order (OpenAI's encoder,
#    tests/gpt2_encoder_reference.py, computed here);
#  - scripts/run_gpt2_124M.sh with llm.c's flags, made small by EXTRA (d2, B 4, T 64, 4 steps,
#    validation and HellaSwag every 2) on ./train_gpt_cpu at 2 ranks under scripts/supervise.sh: it
#    finishes with DONE_00000004, llm.c's main.log (trl each step; tel and eval at steps 2 and 4),
#    and the JSON log's HellaSwag fields.
# Usage: test_recipe.sh
set -euo pipefail
PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/recipe; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=1
$PYTHON - $D <<'PY'
import json, sys
d = sys.argv[1]
paragraphs = [p for p in open("data/tinyshakespeare.txt", encoding="utf-8").read().split("\n\n") if p.strip()][:1500]
with open(f"{d}/docs.jsonl", "w") as f:
    for p in paragraphs:
        f.write(json.dumps({"text": p}) + "\n")
# HellaSwag-shaped examples for -h 1 (tests/test_hellaswag.py checks the scoring itself)
lines = [l for l in open("data/tinyshakespeare.txt", encoding="utf-8").read().splitlines() if 10 < len(l) < 40]
with open(f"{d}/hellaswag.jsonl", "w") as f:
    for i in range(8):
        f.write(json.dumps({"ctx": lines[i], "endings": lines[8 + 4 * i:12 + 4 * i], "label": i % 4}) + "\n")
PY
FINEWEB_JSONL=$D/docs.jsonl FINEWEB_SHARD_TOKENS=10000 bash scripts/fineweb.sh fineweb $D/data > $D/fineweb.txt 2>&1 \
    || { tail -5 $D/fineweb.txt; echo "FAIL: scripts/fineweb.sh"; exit 1; }
$PYTHON - $D <<'PY'
import glob, json, sys
import numpy as np
sys.path.insert(0, "tests")
from gpt2_encoder_reference import Encoder
d = sys.argv[1]
enc = Encoder("data/gpt2")
want = []
for line in open(f"{d}/docs.jsonl"):
    want += [50256] + enc.encode_text(json.loads(line)["text"])
files = [f"{d}/data/fineweb_val.bin"] + sorted(glob.glob(f"{d}/data/fineweb_train_*.bin"))
shards = []
for path in files:
    raw = open(path, "rb").read()
    header = np.frombuffer(raw[:1024], dtype=np.int32)
    tokens = np.frombuffer(raw[1024:], dtype=np.uint16)
    assert header[0] == 20240520 and header[2] == len(tokens), f"FAIL: {path}: header {header[:3]}, {len(tokens)} tokens"
    shards.append(tokens)
sizes = [len(s) for s in shards]
assert all(n == 10000 for n in sizes[:-1]) and 0 < sizes[-1] <= 10000, f"FAIL: shard sizes {sizes}"
assert np.concatenate(shards).tolist() == want, "FAIL: the shards' tokens are not [EOT] + GPT-2's ids of each document"
print(f"scripts/fineweb.sh: {len(want)} tokens of {sum(1 for _ in open(f'{d}/docs.jsonl'))} documents in shards {sizes}")
PY
./tokenize hellaswag $D/hellaswag.jsonl $D/hellaswag.bin > /dev/null
code=0
DATA=$D/data OUT=$D/run HELLASWAG=$D/hellaswag.bin TRAINER=./train_gpt_cpu LAUNCH="timeout 300 mpirun -np 2" \
    EXTRA="-e d2 -b 4 -t 64 -d 512 -x 4 -v 2 -m 1 -n 2 -l 1e-3 -u 2" bash scripts/run_gpt2_124M.sh > $D/run.txt 2>&1 || code=$?
[ $code -eq 0 ] || { tail -n 8 $D/run.txt; echo "FAIL: scripts/run_gpt2_124M.sh (small) exited $code"; exit 1; }
[ -f $D/run/DONE_00000004 ] || { ls $D/run; echo "FAIL: no DONE_00000004 after the recipe's run"; exit 1; }
$PYTHON - $D <<'PY'
import json, re, sys
d = sys.argv[1]
log = open(f"{d}/run/main.log").read().splitlines()
kinds = [re.match(r"s:(\d+) (trl|tel|eval):", l).groups() for l in log]
want = [("0", "trl"), ("1", "trl"), ("2", "tel"), ("2", "eval"), ("2", "trl"), ("3", "trl"), ("4", "tel"), ("4", "eval")]
assert sorted(kinds) == sorted(want), f"FAIL: main.log lines {kinds}, expected {want}"
rows = [json.loads(l) for l in open(f"{d}/run/log.jsonl")]
evaluated = [r["step"] for r in rows if "hellaswag_correct" in r and r["hellaswag_total"] == 8]
assert evaluated == [2, 4], f"FAIL: HellaSwag in the JSON log at steps {evaluated}, expected [2, 4]"
print(f"scripts/run_gpt2_124M.sh (small): 4 steps, main.log {len(log)} lines, HellaSwag at steps {evaluated}, DONE")
PY
echo "ok: the GPT-2 124M recipe's scripts"

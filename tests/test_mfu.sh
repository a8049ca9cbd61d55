#!/usr/bin/env bash
# MFU in the step line and the log (mfu.h), on the CPU build: at one rank and dp 2, every log row's
# "mfu" equals 6N + 6LCT (N: every parameter of the model file, computed here from its dimensions,
# the padded vocabulary included) times the row's tokens per second over the peak the run's header
# names (OpenBLAS's sgemm rate every rank measured at start-up, summed), within the rounding of the
# logged numbers; and it lies in (0, 1). Usage: test_mfu.sh TRAINER REFERENCE_DIR
set -euo pipefail
TRAINER=$1 REF=$2 PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/mfu; rm -rf $D; mkdir -p $D
FLAGS="-e $REF/model.bin -i $REF/train.bin -b 4 -t 32 -x 3 -v 0 -s 0"
$TRAINER $FLAGS -log $D/one.jsonl > $D/one.txt
timeout 300 mpirun -np 2 $TRAINER $FLAGS -log $D/dp2.jsonl > $D/dp2.txt
$PYTHON - $D <<'PY'
import json, re, sys
d = sys.argv[1]
for name, ranks in (("one", 1), ("dp2", 2)):
    out = open(f"{d}/{name}.txt").read()
    L, NH, C, V, Vp, maxT = map(int, re.search(r"model L=(\d+) NH=(\d+) C=(\d+) V=(\d+) Vp=(\d+) maxT=(\d+)", out).groups())
    T = 32
    N = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C   # wte, wpe, the blocks, lnf
    flops = 6 * N + 6 * L * C * T                                # llm.c's convention
    m = re.search(r"MFU: 6N \+ 6LCT = ([0-9.e+]+) FLOPs per token against ([0-9.e+]+) FLOP/s \((\d+) ranks?: (.*)\)", out)
    assert m, f"{name}: no MFU line in the header"
    said, peak = float(m.group(1)), float(m.group(2))
    assert abs(said - flops) <= 1e-3 * flops, (name, said, flops)
    assert int(m.group(3)) == ranks and "sgemm" in m.group(4), m.group(0)
    rows = [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
    assert len(rows) == 3
    for r in rows:
        want = flops * r["tok_per_s"] / peak
        assert 0 < r["mfu"] < 1, (name, r["mfu"])
        assert abs(r["mfu"] - want) <= 2e-3 * want, (name, r["step"], r["mfu"], want)
    print(f"{name}: {flops:.4g} FLOPs per token, peak {peak:.3g} FLOP/s over {ranks} rank(s), MFU {[r['mfu'] for r in rows]}")
PY
grep -q "| MFU [0-9.]*% |" $D/one.txt || { echo "FAIL: the step line has no MFU"; exit 1; }
echo "ok: the step line and every log row carry MFU against the measured sgemm rate"

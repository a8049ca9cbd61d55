#!/usr/bin/env bash
# The kernel ledger calibrated by the last GPU run (ledger.h: kernel_classes): each class's slowdown
# recomputed here from the run's record (docs/gpu-runs/ncu_*.json, ncu's milliseconds per class) over
# the ledger's roofline of that class at the record's shape, against the table's (within 1%: the
# table writes 3-4 digits); every class of the record names some kernel of the ledger and every
# ledger class is in the record; and the calibrated step within 10% of the record's measured total.
# scripts/ncu_table.py --record groups a run's kernels into those classes, read from ledger.h: a
# CSV of four launches in ncu's format (cuBLAS's, a template kernel named "void ...", one of no class).
# Usage: test_ledger_calibration.sh (the CPU bf16 build's -plan: seconds, no emulated run)
set -euo pipefail
PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/ledger_calibration; rm -rf $D; mkdir -p $D
{ echo '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
  for k in 'nvjet_sm90_tst_128x64(int)|2,000' 'void flash_dq_wmma_kernel<64, __nv_bfloat16>(const float *)|3,000' \
           'encoder_forward_kernel(float *)|500' 'void layernorm_backward_kernel128<__nv_bfloat16>(float *)|700'; do
      echo "\"0\",\"${k%|*}\",\"gpu__time_duration.sum\",\"ns\",\"${k#*|}\""; done; } > $D/ncu.csv
$PYTHON scripts/ncu_table.py $D/ncu.csv --record $D/record.json > /dev/null
$PYTHON -c "
import json, sys
c = json.load(open('$D/record.json'))['classes_ms']
want = {'gemm': 0.002, 'flash_attention': 0.003, 'layernorm_backward_and_column_sums': 0.0007}
ok = set(c) == set(want) and all(abs(c[k] - v) < 1e-6 for k, v in want.items())
print(('' if ok else 'FAIL: ') + f'ncu_table.py --record: classes {c}, want {want}')
sys.exit(0 if ok else 1)"
$PYTHON - <<'PY'
import glob, json, subprocess, sys
recs = sorted(glob.glob("docs/gpu-runs/ncu_*.json"))
rec = json.load(open(recs[-1]))
gpu = {"NVIDIA H200": "H200", "NVIDIA H100 80GB HBM3": "H100"}[rec["gpu"]]
out = subprocess.run(["./train_gpt_cpu_bf16", "-e", "d12", "-b", str(rec["B"]), "-t", str(rec["T"]), "-plan", "1",
                      "-gpu", gpu], capture_output=True, text=True, check=True).stdout
led = json.loads(next(l for l in out.splitlines() if l.startswith('{"ledger"')))
roof, slow = {}, {}
for r in led["ledger"]:
    roof[r["class"]] = roof.get(r["class"], 0.0) + r["ms"]
    slow.setdefault(r["class"], set()).add(r["slowdown"])
bad = []
for c, ms in rec["classes_ms"].items():
    if c not in roof:
        bad.append(f"class {c} of {recs[-1]} names no kernel of the ledger")
        continue
    want, have = ms / roof[c], slow[c]
    if len(have) != 1 or abs(next(iter(have)) / want - 1) > 0.01:
        bad.append(f"class {c}: slowdown {sorted(have)} in ledger.h, {want:.3f} from {recs[-1]} ({ms} ms / {roof[c]:.3f} ms)")
    print(f"{c:>36}: measured {ms:6.2f} ms, roofline {roof[c]:6.3f} ms, slowdown {want:6.3f} (ledger.h {sorted(have)})")
for c in roof:
    if c and c not in rec["classes_ms"]:
        bad.append(f"class {c} of ledger.h is not in {recs[-1]}")
cal = led["roofline"]["calibrated_ms_per_step"]
print(f"calibrated step {cal:.2f} ms against {rec['total_ms']} ms measured ({rec['commit']}, B {rec['B']}, {rec['gpu']})")
if not abs(cal / rec["total_ms"] - 1) <= 0.10:
    bad.append(f"the calibrated step {cal:.2f} ms is over 10% from the measured {rec['total_ms']} ms")
for b in bad:
    print(f"FAIL: {b}")
sys.exit(1 if bad else 0)
PY

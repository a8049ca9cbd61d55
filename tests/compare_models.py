#!/usr/bin/python3
"""
tests/compare_models.py: final parameters of other layouts against the single-rank run's.

    compare_models.py SINGLE.bin INIT.bin OTHER.bin...

The callers name every OTHER explicitly (one per layout they ran, never a glob, which would drop a
layout that never wrote its final model): a missing file fails, with a line naming it.

Each OTHER must follow SINGLE: |p - p_single| / |p_single - p_init| < 1e-5 (L2 over the model;
measured ~1e-6) and max |p - p_single| < 1e-4. They differ only by the order in which fp32 sums
are added (over DP ranks, over TP ranks' partial products). Elementwise most agree to ~1e-9, but
where a gradient is zero in exact arithmetic (the key bias: softmax ignores a shift shared by a
row of scores) it is pure round-off, and AdamW's m / (sqrt(v) + eps) turns that noise into steps
of ~lr * noise / eps, so the elementwise bound is lr / 10 = 1e-4, not fp32 round-off.
"""
import os
import sys
import numpy as np


def params(path):
    raw = open(path, "rb").read()
    return np.frombuffer(raw[1024:], dtype=np.float32).astype(np.float64)


missing = [p for p in sys.argv[1:] if not os.path.isfile(p)]
for path in missing:
    print(f"FAIL: {path} missing: that run never wrote its final model")
if missing or len(sys.argv) < 4:
    sys.exit(f"compare_models.py: {len(missing)} of the {len(sys.argv) - 1} files named missing" if missing else __doc__)
single, init = params(sys.argv[1]), params(sys.argv[2])
for path in sys.argv[3:]:
    final = params(path)
    assert final.shape == single.shape, f"{path}: {final.shape} parameters, single rank {single.shape}"
    rel = np.linalg.norm(final - single) / np.linalg.norm(single - init)
    diff = np.abs(final - single).max()
    print(f"{path}: final parameters relative L2 {rel:.1e}, max |diff| {diff:.1e} against the single rank's")
    assert rel < 1e-5 and diff < 1e-4, f"{path}: final parameters off the single rank's"

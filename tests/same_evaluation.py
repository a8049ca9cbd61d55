#!/usr/bin/python3
"""
tests/same_evaluation.py: validation and sampling under a parallel layout give one rank's.

    same_evaluation.py ONE_RANK.jsonl OTHER.jsonl LABEL

Compares the last log rows: the validation loss within 1e-5 (fp32 sums in another order)
and the sampled text exactly (a token would differ only if a uniform draw fell within
round-off of a boundary of the cumulative distribution).
"""
import json
import sys

one, other = (json.loads(open(path).readlines()[-1]) for path in sys.argv[1:3])
print(f"val loss one rank {one['val_loss']:.7f}, {sys.argv[3]} {other['val_loss']:.7f}; "
      f"samples equal: {one['sample'] == other['sample']}")
assert abs(one["val_loss"] - other["val_loss"]) < 1e-5 and one["sample"] == other["sample"] and len(one["sample"]) > 0

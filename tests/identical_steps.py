#!/usr/bin/python3
"""
tests/identical_steps.py: runs that must agree bit for bit (recompute levels: the same kernels on
the same inputs) log the same loss and gradient norm at every step, all 17 digits.

    identical_steps.py LABEL LOG.jsonl LOG.jsonl...
"""
import json
import sys

label, paths = sys.argv[1], sys.argv[2:]
rows = [[(x["loss"], x["norm"]) for x in map(json.loads, open(p))] for p in paths]
assert len(rows[0]) > 0 and all(r == rows[0] for r in rows), f"{label}: steps differ: {rows}"
print(f"{label}: {len(paths)} runs identical over {len(rows[0])} steps, last {rows[0][-1]}")

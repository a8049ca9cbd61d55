#!/usr/bin/python3
"""
tests/same_norms.py: a parallel layout's gradient norm at every step against the single rank's.

    same_norms.py SINGLE.jsonl LAYOUT.jsonl LABEL

The norm sums every parameter's gradient, so a gradient a layout gets wrong anywhere (a sum over
ranks left out, say) shows in it even where AdamW's normalized update hides it from the loss.
Bar: 1e-5 relative per step (the layouts add the same fp32 products in other orders; measured
~1e-7). The logs must have the same steps.
"""
import json
import sys

single, layout = ([json.loads(line)["norm"] for line in open(path)] for path in sys.argv[1:3])
assert len(single) == len(layout) and single, (len(single), len(layout))
errors = [abs(a - b) / abs(a) for a, b in zip(single, layout)]
worst = max(errors)
assert all(e < 1e-5 for e in errors), f"{sys.argv[3]}: gradient norms off the single rank's by {worst:.2e} (relative)"
print(f"{sys.argv[3]}: gradient norms within {worst:.1e} (relative) of the single rank's over {len(single)} steps")

#!/usr/bin/python3
"""
tests/identical_steps.py: runs that must agree bit for bit (recompute levels: the same kernels on
the same inputs) log the same loss and gradient norm at every step, all 17 digits.

    identical_steps.py [--recompute-levels 0,1,2,3] LABEL LOG.jsonl LOG.jsonl...

With --recompute-levels the logs are runs at those -r levels, rising, and identical losses alone
would still pass if -r did nothing: so each rank's activations measured in the first step (the log
row's "measured"[rank]["memory"]["activations"], what the forward keeps) must also fall strictly from
each level to the next. Every level of recompute.h's table keeps less than the one below it on every
layer (recompute_keeps: -r 1 drops the GELU output, -r 2 also the two LayerNorm outputs, -r 3 all
but the block's output), every rank holds at least one layer, and a dropped tensor is allocated once
as scratch (activations_transient), not as kept activations; so every rank's kept bytes shrink at
every step up in -r, whatever the layout (pipeline stages, sets in flight, cp, tp, sp).
tests/test_recompute.sh uses first_step_activations and assert_shrinking too.

The "measured" bytes a log row holds are the model's ledger (gpt2.h: model->memory, summed by
allocate_buffers from the same buffer lists -plan sums): they prove the levels differ as the ledger
says, not that the process holds less. peak_rss_bytes measures that apart: the kernel's count of
the pages a run touched (tests/test_recompute.sh compares its drop from -r 0 with recompute.h's
formula, computed in the test).
"""
import json
import os
import subprocess
import sys


def first_step_activations(path):
    """Each rank's activation bytes (kept by the forward) measured in the log's first step."""
    with open(path) as f:
        return [m["memory"]["activations"] for m in json.loads(f.readline())["measured"]]


def assert_shrinking(label, levels, paths):
    """The runs at recompute levels `levels` (rising), logged in `paths`: each rank's first-step
    activations fall strictly at every step up in -r. Returns them, one list per run."""
    assert len(levels) == len(paths) and list(levels) == sorted(set(levels)), f"{label}: levels {levels} for {len(paths)} logs"
    acts = [first_step_activations(p) for p in paths]
    assert all(len(a) == len(acts[0]) > 0 for a in acts), f"{label}: ranks measured differ: {acts}"
    for (r0, a0), (r1, a1) in zip(zip(levels, acts), zip(levels[1:], acts[1:])):
        for rank, (x0, x1) in enumerate(zip(a0, a1)):
            assert x1 < x0, f"{label}: rank {rank} keeps {x1} bytes of activations at -r {r1}, not fewer than {x0} at -r {r0}"
    return acts


def peak_rss_bytes(argv):
    """Runs argv (output discarded) and returns its peak resident memory in bytes: ru_maxrss of the
    child as wait4 reports it (Linux: kB), the kernel's count of the pages the process touched, which
    no line of the trainer computes. A nonzero exit fails."""
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"{' '.join(argv)}: exit {os.waitstatus_to_exitcode(status)}"
    return usage.ru_maxrss * 1024


def main(argv):
    levels = None
    if argv and argv[0] == "--recompute-levels":
        levels = [int(x) for x in argv[1].split(",")]
        argv = argv[2:]
    label, paths = argv[0], argv[1:]
    rows = [[(x["loss"], x["norm"]) for x in map(json.loads, open(p))] for p in paths]
    assert len(rows[0]) > 0 and all(r == rows[0] for r in rows), f"{label}: steps differ: {rows}"
    print(f"{label}: {len(paths)} runs identical over {len(rows[0])} steps, last {rows[0][-1]}")
    if levels is not None:
        acts = assert_shrinking(label, levels, paths)
        print(f"{label}: first-step activations by rank shrink with -r: " +
              "; ".join(f"-r {r} {a}" for r, a in zip(levels, acts)))


if __name__ == "__main__":
    main(sys.argv[1:])

#!/usr/bin/python3
"""
tests/check_trajectory.py: runs the trainer with the reference's flags and compares
the loss of every step in its -log with tests/reference.py's float64 trajectory.

    check_trajectory.py --trainer ./train_gpt_cpu --ref DIR --accum K --tol 1e-4 [--launcher "mpirun -np 2"]

-d = B*T*K gives K accumulation micro-steps; everything else is TRAJECTORY's.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import TRAJECTORY  # noqa: E402  the one place the flags are written


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--accum", type=int, required=True)
    ap.add_argument("--tol", type=float, required=True)
    ap.add_argument("--launcher", default="")
    ap.add_argument("--extra", default="", help="more trainer flags")
    ap.add_argument("--steps", type=int, default=None, help="run and compare only the first N steps")
    a = ap.parse_args()
    t = TRAJECTORY
    log = os.path.join(a.ref, f"run_accum{a.accum}.jsonl")
    if os.path.exists(log):
        os.remove(log)
    cmd = shlex.split(a.launcher) + [a.trainer, "-e", os.path.join(a.ref, "model.bin"), "-i", os.path.join(a.ref, "train.bin"),
           "-b", str(t["B"]), "-t", str(t["T"]), "-d", str(t["B"] * t["T"] * a.accum), "-l", str(t["lr"]),
           "-u", str(t["warmup"]), "-q", str(t["final_frac"]), "-c", str(t["wd"]), "-gc", str(t["clip"]),
           "-x", str(a.steps or t["steps"]), "-shuffle", "0", "-v", "0", "-s", "0", "-log", log] + shlex.split(a.extra)
    print(" ".join(cmd))
    subprocess.run(cmd, check=True)
    rows = [json.loads(line) for line in open(log)]
    ref = [float(x) for x in open(os.path.join(a.ref, f"trajectory_{a.accum}.txt"))][:a.steps]
    assert [r["step"] for r in rows] == list(range(1, len(ref) + 1)), "log rows must be steps 1..N"
    worst = 0.0
    for r, want in zip(rows, ref):
        diff = abs(r["loss"] - want)
        worst = diff if not diff <= worst else worst  # a NaN is the worst (max(0.0, nan) is 0.0)
        print(f"step {r['step']}: loss {r['loss']:.7f} reference {want:.7f} |diff| {diff:.2e}")
    print(f"max |diff| {worst:.2e} (tolerance {a.tol:g})")
    sys.exit(0 if worst < a.tol else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""
tests/check_trajectory.py: runs the trainer with the reference's flags and compares
the loss of every step in its -log with tests/reference.py's float64 trajectory.

    check_trajectory.py --trainer ./train_gpt_cpu --ref DIR --accum K --tol 1e-4 [--launcher "mpirun -np 2"] [--params TOL]

-d = B*T*K gives K accumulation micro-steps; everything else is TRAJECTORY's.

--params TOL also compares every parameter tensor after the last step with the reference's
after the same steps (params_K.npy): ||ours - ref|| / ||ref - init|| (L2 over the tensor, init
the model file both started from) must stay under TOL for each of the 16 tensors. The losses
barely see an optimizer that errs where the loss is insensitive: weight decay applied to every
tensor (LayerNorm gains and biases too) moves the 6 losses by 8e-5 to 1.2e-4 (the loss bar is
1e-4), decay at 0.9x its value by 7e-6; the parameters show them at 600x and 2x the fp32 bar.
Relative to the update, not to ||ref||: what an optimizer bug gets wrong is a fraction of the
step it takes, and ||ref|| would dilute it by the initial values (400x on the gains: ~1, moved
by ~2e-3 in 6 steps). The run must take all of TRAJECTORY's steps (the schedule ends there).

Ours: an fp32 build's final model file (-o; a temporary directory unless --extra names one);
a 16-bit build's fp32 master weights, from the optimizer file of a checkpoint at the last step
(-n, added here), since its model file holds them rounded to bf16/fp16, more than the gains move.
Elements the float64 run did not move (the key bias: softmax ignores a shift shared by a row of
scores, so its exact gradient is zero; wte's padded rows) have no update to be a fraction of,
and AdamW turns the round-off in their zero gradient into steps of up to ~lr: they are bounded
elementwise by steps * lr instead (measured: 1.5e-6 fp32, 8.5e-4 fp16, 2.7e-3 bf16).

Measured on the CPU builds (accum 1, 2, 4; tests/run_tests.sh's bars are 10x): fp32 <= 3.1e-5,
on the LayerNorm gains, which is fp32's storage of a value near 1 (6e-8 a rounding, ~1.5e-7
after 6 steps) against their 2.3e-3 move; every other tensor <= 1.6e-5 (most ~1e-6). fp16
masters <= 1.05e-2 (wpe), bf16 <= 3.9e-2 (ln2w): their gradients' own rounding.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import NAMES, TRAJECTORY, shapes  # noqa: E402  the one place the flags are written


def read_model(path):
    """an llm.c model file's tensors as float64 (fp32: version 3, bf16: version 5), and (L, C, maxT)"""
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype=np.int32)
    assert h[0] == 20240326 and h[1] in (3, 5), f"{path}: not an llm.c model file (header {h[:2]})"
    maxT, L, C = int(h[2]), int(h[4]), int(h[6])
    if h[1] == 3:
        flat = np.frombuffer(raw[1024:], dtype=np.float32)
    else:  # bf16: the top half of an fp32
        flat = (np.frombuffer(raw[1024:], dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    return split(flat.astype(np.float64), L, C, maxT), (L, C, maxT)


def split(flat, L, C, maxT):
    out, at = {}, 0
    for name, shape in shapes(L, C, maxT).items():
        n = int(np.prod(shape))
        out[name] = flat[at:at + n]
        at += n
    assert at == flat.size, f"{flat.size} parameters, the header's shapes hold {at}"
    return out


def read_master(path, dims):
    """16-bit builds: the fp32 master weights, the optimizer file's third buffer (after m and v); else None"""
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype=np.int32)
    assert h[0] == 20241123 and h[1] == 1, f"{path}: not an optimizer file"
    buffers, n = int(h[2]), int(h[3]) + (int(h[4]) << 32)
    if buffers < 3:
        return None
    return split(np.frombuffer(raw[1024 + 8 * n:1024 + 12 * n], dtype=np.float32).astype(np.float64), *dims)


def compare_params(out, steps, ref_dir, accum, tol):
    """every tensor's ||ours - ref|| / ||ref - init||; returns the worst (a NaN is the worst)"""
    init, dims = read_model(os.path.join(ref_dir, "model.bin"))
    ours = read_master(os.path.join(out, f"optimizer_{steps:08d}.bin"), dims)
    what = "the fp32 master weights (optimizer file)"
    if ours is None:
        ours, what = read_model(os.path.join(out, f"model_{steps:08d}.bin"))[0], "the model file"
    print(f"parameters after step {steps}: {what} against the float64 reference's")
    ref = split(np.load(os.path.join(ref_dir, f"params_{accum}.npy")), *dims)
    bound = steps * TRAJECTORY["lr"]
    worst, worst_name = 0.0, ""
    for name in NAMES:
        # elements the float64 run did not move (the key bias, wte's padded rows): bounded elementwise
        still = np.abs(ref[name] - init[name]) < 1e-12
        diff = ours[name] - ref[name]
        err = np.linalg.norm(diff[~still]) / np.linalg.norm((ref[name] - init[name])[~still])
        of_ref = np.linalg.norm(diff) / np.linalg.norm(ref[name])
        still_max = np.abs(diff[still]).max() if still.any() else 0.0
        if not still_max < bound:
            err = float("inf")
        if err != err or err > worst:  # a NaN is the worst and stays
            worst, worst_name = err, name
        note = f"   ({still.sum()} unmoved in float64: max |ours - ref| {still_max:.1e}, bound {bound:g})" \
            if still.any() else ""
        print(f"{name:>9}: ||ours - ref|| / ||ref - init|| {err:.2e}   / ||ref|| {of_ref:.2e}{note}")
    print(f"parameters: worst {worst:.2e} ({worst_name}) (tolerance {tol:g})")
    if not worst < tol:  # (a NaN fails too)
        print(f"FAIL: parameter tensor {worst_name}: ||ours - ref|| / ||ref - init|| {worst:.2e} over the tolerance {tol:g}")
    return worst


def check_losses(cmd, log, a):
    """runs the trainer; True when every step's loss is within --tol of the reference's"""
    subprocess.run(cmd, check=True)
    rows = [json.loads(line) for line in open(log)]
    ref = [float(x) for x in open(os.path.join(a.ref, f"trajectory_{a.accum}.txt"))][:a.steps]
    assert [r["step"] for r in rows] == list(range(1, len(ref) + 1)), "log rows must be steps 1..N"
    worst = 0.0
    for r, want in zip(rows, ref):
        diff = abs(r["loss"] - want)
        if diff != diff or diff > worst:  # a NaN is the worst and stays (max(0.0, nan) is 0.0)
            worst = diff
        print(f"step {r['step']}: loss {r['loss']:.7f} reference {want:.7f} |diff| {diff:.2e}")
    print(f"max |diff| {worst:.2e} (tolerance {a.tol:g})")
    if not worst < a.tol:  # (a NaN fails too)
        print(f"FAIL: losses: max |diff| {worst:.2e} from the float64 trajectory, over the tolerance {a.tol:g}")
    return worst < a.tol


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--accum", type=int, required=True)
    ap.add_argument("--tol", type=float, required=True)
    ap.add_argument("--launcher", default="")
    ap.add_argument("--extra", default="", help="more trainer flags")
    ap.add_argument("--steps", type=int, default=None, help="run and compare only the first N steps")
    ap.add_argument("--log", default=None, help="keep the run's JSON log here (default: a temporary file)")
    ap.add_argument("--params", type=float, default=None,
                    help="also compare every tensor of the final model with the reference's: relative L2 bar")
    a = ap.parse_args()
    t = TRAJECTORY
    extra = shlex.split(a.extra)
    out, own_out = None, False
    if a.params is not None:
        assert a.steps in (None, t["steps"]), "--params needs all of the reference's steps (the schedule ends there)"
        if "-o" in extra:
            out = extra[extra.index("-o") + 1]
        else:
            out, own_out = tempfile.mkdtemp(prefix=f"params_accum{a.accum}_", dir=a.ref), True
            extra += ["-o", out]
        if "-n" not in extra:
            extra += ["-n", str(t["steps"])]  # a checkpoint: 16-bit builds' fp32 masters are in its optimizer file
    own_log = a.log is None  # a file of this run's own: checks running side by side share --ref
    log = a.log or tempfile.mkstemp(prefix=f"run_accum{a.accum}_", suffix=".jsonl", dir=a.ref)[1]
    if os.path.exists(log):
        os.remove(log)
    cmd = shlex.split(a.launcher) + [a.trainer, "-e", os.path.join(a.ref, "model.bin"), "-i", os.path.join(a.ref, "train.bin"),
           "-b", str(t["B"]), "-t", str(t["T"]), "-d", str(t["B"] * t["T"] * a.accum), "-l", str(t["lr"]),
           "-u", str(t["warmup"]), "-q", str(t["final_frac"]), "-c", str(t["wd"]), "-gc", str(t["clip"]),
           "-x", str(a.steps or t["steps"]), "-shuffle", "0", "-v", "0", "-s", "0", "-log", log] + extra
    print(" ".join(cmd))
    try:
        ok = check_losses(cmd, log, a)
        if a.params is not None:
            ok = compare_params(out, t["steps"], a.ref, a.accum, a.params) < a.params and ok
    finally:
        if own_out:
            shutil.rmtree(out, ignore_errors=True)
        if own_log and os.path.exists(log):
            os.remove(log)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""scripts/bench_gpu.sh's arithmetic: each program's step times read from its own output, the median
over steps 3 to STEPS, tokens/s, MFU, the ratios, the table, and one JSON record per B.

Reads, in --dir, for each B: ours_bB.jsonl (our -log: a row per step, "ms" its own time),
llmc_cudnn_bB.out, llmc_bB.out (llm.c's step lines: "step S/N | loss ... | lr ... | X ms | ...% bf16
MFU | ... tok/s", whose tok/s is a running average and is not read) and torch_bB.out
(scripts/bench_torch_gpu.py's "step S/N | loss L | X ms | ..."). A missing file is a program that
did not run: null. Writes --records/bench_DATE_COMMIT_BB.json with the keys docs/gpu.md tabulates
(scripts/gpu_runs_table.py).
"""
import argparse
import datetime
import json
import os
import re
import statistics

PROGRAMS = ["ours", "llmc_cudnn", "llmc", "torch"]
STEP_LINE = re.compile(r"^step +(\d+)/\d+ .*?\| ([0-9.]+) ms \|", re.M)  # llm.c's and bench_torch_gpu.py's


def log_rows(path):
    """our -log's rows"""
    return [json.loads(l) for l in open(path) if l.strip()]


def step_ms(path, first):
    """{step: ms} of the steps from `first` on, or None where the file is missing"""
    if not os.path.exists(path):
        return None
    if path.endswith(".jsonl"):
        ms = {r["step"]: r["ms"] for r in log_rows(path)}
    else:
        ms = {int(s): float(m) for s, m in STEP_LINE.findall(open(path).read())}
    return {s: m for s, m in ms.items() if s >= first}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--batches", required=True, help="the B values, space separated")
    ap.add_argument("--T", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True, help="steps each program ran; median over 3..steps")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--records", required=True, help="folder of the JSON records")
    ap.add_argument("--flags", nargs="*", default=[], help="NAME=FLAGS of each program (empty: it did not run)")
    ap.add_argument("--date", default=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))
    a = ap.parse_args()
    flags = dict(f.split("=", 1) for f in a.flags)
    first = 3
    print(f"GPT-2 124M, bf16, T {a.T}, {a.gpu}, commit {a.commit}: median step time over steps {first} to {a.steps}")
    print(f"{'B':>4} " + " ".join(f"{p + ' tok/s':>17}" for p in PROGRAMS) +
          f" {'ours/cuDNN':>10} {'ours/llm.c':>10} {'ours/torch':>10} {'our MFU':>8}")
    for B in a.batches.split():
        B = int(B)
        rec = {"kind": "bench_gpu", "commit": a.commit, "gpu": a.gpu, "date": a.date, "B": B, "T": a.T,
               "median_of_steps": f"{first}-{a.steps}"}
        ours_mfu = None
        for p in PROGRAMS:
            ext = ".jsonl" if p == "ours" else ".out"
            ms = step_ms(os.path.join(a.dir, f"{p}_b{B}{ext}"), first)
            if ms is not None and len(ms) < a.steps - first + 1:
                print(f"  {p} at B {B}: {len(ms)} step lines from step {first} on, {a.steps - first + 1} wanted: left out")
                ms = None
            med = statistics.median(ms.values()) if ms else None
            rec[f"{p}_ms"] = round(med, 3) if med else None
            rec[f"{p}_tok_s"] = round(B * a.T / (med / 1e3), 1) if med else None
            rec[f"{p}_flags"] = flags.get(p) or None
            if p == "ours" and med:
                rows = log_rows(os.path.join(a.dir, f"ours_b{B}.jsonl"))
                mfus = [r["mfu"] for r in rows if r["step"] >= first and r.get("mfu") is not None]
                ours_mfu = statistics.median(mfus) if mfus else None
        for p in PROGRAMS:  # the same FLOPs a step for all: MFU scales with the inverse of the step time
            rec[f"{p}_mfu"] = round(ours_mfu * rec["ours_ms"] / rec[f"{p}_ms"], 4) \
                if ours_mfu is not None and rec[f"{p}_ms"] else None
        for p in PROGRAMS[1:]:
            rec[f"ours_over_{p}"] = round(rec["ours_tok_s"] / rec[f"{p}_tok_s"], 3) \
                if rec["ours_tok_s"] and rec[f"{p}_tok_s"] else None
        path = os.path.join(a.records, f"bench_{a.date}_{a.commit}_B{B}.json")
        with open(path, "w") as f:
            json.dump(rec, f, indent=1)
            f.write("\n")
        cell = lambda v, w, fmt, unit="": f"{format(v, fmt) + unit:>{w}}" if v is not None else f"{'-':>{w}}"
        print(f"{B:>4} " + " ".join(cell(rec[p + "_tok_s"], 17, ",.0f") for p in PROGRAMS) +
              "".join(" " + cell(rec["ours_over_" + p], 10, ".2f", "x") for p in PROGRAMS[1:]) +
              " " + cell(100 * ours_mfu if ours_mfu is not None else None, 8, ".1f", "%") + f"   -> {path}")


if __name__ == "__main__":
    main()

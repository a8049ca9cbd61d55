#!/usr/bin/env python3
"""
scripts/ncu_table.py: where a step's GPU time goes, from Nsight Compute's CSV of one metric,
gpu__time_duration.sum, over every kernel of a run (scripts/gpu_session.sh writes it):

    ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file ncu.txt \\
        ./train_gpt -e d12 -b 8 -t 1024 -x 1 -v 0 -s 0
    python3 scripts/ncu_table.py ncu.txt [--top 30]

Prints, per kernel name (template arguments kept, cuBLAS's own kernels summed as one row), the
launches, the milliseconds and the share of the sum, largest first. ncu runs the kernels one at a
time, so the sum is GPU time without overlap and without the host's waits (docs/gpu.md).

With --record FILE (and --commit, --gpu, --B, --T) it also writes the run's record for
docs/gpu-runs/ (ncu_DATE_COMMIT_BB.json): every kernel's milliseconds and their sums by the kernel
classes of ledger.h (kernel_classes, read from the header: a kernel whose name starts with one of a
class's prefixes), from which ledger.h's slowdowns are refit (tests/test_ledger_calibration.sh checks them).
"""
import argparse
import collections
import csv
import datetime
import json
import os
import re


def kernel_rows(path):
    """(kernel name, nanoseconds) for each profiled launch in the CSV (other lines are ncu's log)."""
    with open(path) as f:
        lines = [line for line in f if line.startswith('"')]
    reader = csv.reader(lines)
    header = next(reader)
    name_at, metric_at, value_at = header.index("Kernel Name"), header.index("Metric Name"), header.index("Metric Value")
    for row in reader:
        if row[metric_at] == "gpu__time_duration.sum":
            yield row[name_at], float(row[value_at].replace(",", ""))


def short_name(name):
    """The kernel's name without its parameter list; cuBLAS's kernels (nvjet, gemm, cutlass) as one."""
    name = re.sub(r"^void ", "", re.sub(r"\(.*$", "", name).strip())  # ncu names template kernels "void k<...>"
    if re.search(r"nvjet|gemm|cutlass|cublas", name, re.I):
        return "cuBLAS GEMMs"
    return name


def ledger_classes():
    """[(class, [prefixes])] of ledger.h's kernel_classes table"""
    src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ledger.h")).read()
    table = src.split("kernel_classes[] = {", 1)[1].split("};", 1)[0]
    return [(c, p.split("|")) for c, p in re.findall(r'\{"(\w+)", "([^"]*)", [0-9.]+\}', table)]


def write_record(path, total, a):
    classes = collections.defaultdict(float)
    for name, (_, t) in total.items():
        for c, prefixes in ledger_classes():
            if any(name.lower().startswith(p.lower()) for p in prefixes):
                classes[c] += t
                break
    rec = {"kind": "ncu_step", "commit": a.commit, "gpu": a.gpu,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), "B": a.B, "T": a.T,
           "command": a.command, "total_ms": round(sum(t for _, t in total.values()), 3),
           "launches": sum(n for n, _ in total.values()),
           "classes_ms": {c: round(t, 4) for c, t in classes.items()},
           "kernels_ms": {name: round(t, 4) for name, (_, t) in sorted(total.items(), key=lambda kv: -kv[1][1])}}
    with open(path, "w") as f:
        json.dump(rec, f, indent=1)
        f.write("\n")
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu's --csv --log-file output")
    ap.add_argument("--top", type=int, default=30, help="rows to print (the rest summed in one)")
    ap.add_argument("--record", help="write the docs/gpu-runs record here")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--gpu", default="unknown")
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--command", default="", help="the profiled command, for the record")
    a = ap.parse_args()
    total = collections.defaultdict(lambda: [0, 0.0])
    for name, ns in kernel_rows(a.csv):
        t = total[short_name(name)]
        t[0] += 1
        t[1] += ns / 1e6
    ms = sum(t[1] for t in total.values())
    rows = sorted(total.items(), key=lambda kv: -kv[1][1])
    print(f"{sum(t[0] for t in total.values())} launches, {ms:.2f} ms of GPU time")
    print(f"{'ms':>9} {'share':>6} {'launches':>8}  kernel")
    for name, (n, t) in rows[:a.top]:
        print(f"{t:9.3f} {100 * t / ms:5.1f}% {n:8d}  {name}")
    rest = rows[a.top:]
    if rest:
        t = sum(r[1][1] for r in rest)
        print(f"{t:9.3f} {100 * t / ms:5.1f}% {sum(r[1][0] for r in rest):8d}  ({len(rest)} other kernels)")
    if a.record:
        write_record(a.record, total, a)


if __name__ == "__main__":
    main()

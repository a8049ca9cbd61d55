#!/usr/bin/env python3
"""The table of docs/gpu-runs/bench_*.json (scripts/bench_gpu.sh's records), as docs/gpu.md shows it.

    python3 scripts/gpu_runs_table.py                 # prints the Markdown table
    python3 scripts/gpu_runs_table.py --check docs/gpu.md
--check: docs/gpu.md holds exactly this table between its two "gpu-runs table" comment lines (make
test runs it, so a record committed without its row, or a row edited by hand, fails).
"""
import glob
import json
import os
import sys

BEGIN, END = "<!-- gpu-runs table: scripts/gpu_runs_table.py writes it -->", "<!-- end of the gpu-runs table -->"


def table(folder):
    recs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(folder, "bench_*.json")))]
    recs.sort(key=lambda r: (r["date"], r["commit"], r["B"]))
    tok = lambda v: f"{v:,.0f}" if v is not None else "-"
    x = lambda v: f"{v:.2f}x" if v is not None else "-"
    rows = ["| date | commit | GPU | B | ours tok/s | llm.c cuDNN | llm.c | PyTorch | ours / cuDNN | ours / llm.c "
            "| ours / PyTorch | our MFU |", "|" + "---|" * 12]
    for r in recs:
        mfu = f"{100 * r['ours_mfu']:.1f}%" if r.get("ours_mfu") is not None else "-"
        rows.append(f"| {r['date']} | {r['commit']} | {r['gpu']} | {r['B']} | {tok(r['ours_tok_s'])} | "
                    f"{tok(r['llmc_cudnn_tok_s'])} | {tok(r['llmc_tok_s'])} | {tok(r['torch_tok_s'])} | "
                    f"{x(r['ours_over_llmc_cudnn'])} | {x(r['ours_over_llmc'])} | {x(r['ours_over_torch'])} | {mfu} |")
    return "\n".join(rows)


def main():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "gpu-runs")
    t = table(here)
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        doc = open(sys.argv[2]).read()
        if BEGIN not in doc or END not in doc:
            sys.exit(f"FAIL: {sys.argv[2]} has no gpu-runs table (the lines {BEGIN} and {END})")
        have = doc.split(BEGIN, 1)[1].split(END, 1)[0].strip()
        if have != t:
            print(f"FAIL: {sys.argv[2]}'s gpu-runs table is not that of docs/gpu-runs/ (scripts/gpu_runs_table.py "
                  f"prints it); wanted:\n{t}")
            sys.exit(1)
        print(f"{sys.argv[2]}: the gpu-runs table matches its {t.count(chr(10)) - 1} records")
    else:
        print(t)


if __name__ == "__main__":
    main()

"""scripts/plot_log.py: curves of one or more training logs (-log FILE.jsonl) against the step.

    python3 scripts/plot_log.py LOG.jsonl [LOG2.jsonl ...] [-o OUT.png]

Panels: training and validation loss, learning rate, gradient norm, tokens/s, and when a log
has them the loss scale (fp16), the pipeline bubble and where the step's time goes (the CPU
build's "time_ms", step_time.h: compute, comm_exposed, bubble, optimizer, data and, dotted,
comm_in_flight; a colour per part, a line style per log). Several logs share each panel, one
colour per log, named by file, to compare runs. Without -o it writes LOG.png beside the first
log. Matplotlib from Debian (python3-matplotlib); no display needed."""
import argparse, json, os, sys
import matplotlib
matplotlib.use("Agg")  # files only
import matplotlib.pyplot as plt

parser = argparse.ArgumentParser(description="plot train_gpt JSON-lines logs")
parser.add_argument("logs", nargs="+", help="logs written with -log")
parser.add_argument("-o", "--out", help="output image (default: the first log with .png)")
args = parser.parse_args()

def read_log(path):
    rows = []
    for n, line in enumerate(open(path), 1):
        if not line.strip(): continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            sys.exit(f"{path}:{n}: not a JSON log row ({e})")
        if "step" in row: rows.append(row)  # scripts/supervise.sh's restart rows carry no step
    if not rows: sys.exit(f"{path}: no log rows")
    return rows

logs = {path: read_log(path) for path in args.logs}
# (title, key, log scale): a panel is drawn when some log has its key
panels = [("loss", "loss", False), ("learning rate", "lr", False), ("gradient norm", "norm", True),
          ("tokens/s", "tok_per_s", False), ("loss scale", "scale", True), ("pipeline bubble", "bubble", False),
          ("step split (ms)", "time_ms", False)]
SPLIT = ["compute", "comm_exposed", "bubble", "optimizer", "data", "comm_in_flight"]
STYLES = ["-", "--", "-.", ":"]
panels = [p for p in panels if any(p[1] in r for rows in logs.values() for r in rows)]
fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.4 * len(panels)), sharex=True, squeeze=False)
for (title, key, log_scale), ax in zip(panels, axes[:, 0]):
    for k, (path, rows) in enumerate(logs.items()):
        color, name = f"C{k}", os.path.basename(path)
        if key == "time_ms":  # a line per part, a style per log
            for j, part in enumerate(SPLIT):
                points = [(r["step"], r[key][part]) for r in rows if key in r]
                style = ":" if part == "comm_in_flight" else STYLES[k % len(STYLES)]
                if points: ax.plot(*zip(*points), style, color=f"C{j}", lw=1.2, label=f"{name} {part}")
            continue
        points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if points:
            ax.plot(*zip(*points), color=color, lw=1.2, label=f"{name} train" if key == "loss" else name)
        if key == "loss":
            val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
            if val: ax.plot(*zip(*val), "o--", color=color, ms=4, lw=1, label=f"{name} val")
    ax.set_ylabel(title)
    if log_scale: ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if key in ("loss", "time_ms") or len(logs) > 1: ax.legend(fontsize=7 if key == "time_ms" else 8)
axes[-1, 0].set_xlabel("step")
fig.tight_layout()
out = args.out or os.path.splitext(args.logs[0])[0] + ".png"
fig.savefig(out, dpi=90)
print(f"wrote {out}")

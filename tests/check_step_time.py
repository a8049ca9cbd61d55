"""tests/check_step_time.py: the split of the step in train_gpt's log rows (step_time.h, "time_ms",
averaged over the ranks), against what the run's collectives must give:
  --blocking LOG...    -overlap 0: every collective blocks, so the ranks wait for most of the time one
                       is in flight (all of it but posting it)
  --overlapped LOG...  -overlap 1: a unit's reduction stays in flight while the next unit's backward
                       runs, time the ranks do not wait for it: in flight exceeds exposed by more than
                       1 ms a step, on the mean over the log's steps (measured at ZeRO-0, dp 4 on 4
                       layers, idle machine: 1.2-5.2 ms a step, means over 3 steps 2.1-3.3 ms; 0.17-0.33
                       ms a step when each reduction is waited for as soon as it is posted). The bar
                       was 1.5 ms on every step, set when OpenBLAS ran its SSE3 kernels here (tests/
                       blas_kernels.sh): with the compute 2-5x faster there is less backward behind
                       each reduction, and single steps came out at 1.2-1.4 ms
and in every row every part >= 0. Prints one line per log; FAIL: ... and exit 1 at the first miss."""
import argparse, json, sys

parser = argparse.ArgumentParser()
parser.add_argument("--blocking", nargs="*", default=[])
parser.add_argument("--overlapped", nargs="*", default=[])
args = parser.parse_args()
for path, overlapped in [(p, False) for p in args.blocking] + [(p, True) for p in args.overlapped]:
    rows = [json.loads(line) for line in open(path)]
    for r in rows:
        t = r["time_ms"]
        where = f"{path}, step {r['step']}: {t}"
        if min(t.values()) < 0:
            sys.exit(f"FAIL: a negative part of the step: {where}")
        if not overlapped and not 0.5 * t["comm_in_flight"] <= t["comm_exposed"] <= t["comm_in_flight"] + 0.002:
            sys.exit(f"FAIL: blocking collectives: the wait is not most of their flight: {where}")
    hidden = [r["time_ms"]["comm_in_flight"] - r["time_ms"]["comm_exposed"] for r in rows]
    if overlapped and not sum(hidden) / len(hidden) > 1.0:
        sys.exit(f"FAIL: -overlap 1: no collective in flight while the backward went on: {path}: in flight less "
                 f"exposed {', '.join(f'{h:.2f}' for h in hidden)} ms a step, mean not above 1 ms")
    t = rows[-1]["time_ms"]
    print(f"ok: {path}: exposed/in flight {t['comm_exposed']:.1f}/{t['comm_in_flight']:.1f} ms (last step)")

#!/usr/bin/env bash
# Sequence parallelism (-sp 1 with -tp, tp.h) on the CPU build under mpirun.
# Usage: test_sp.sh REFERENCE_DIR [REFERENCE_DIR_4_LAYERS (interleaved 1F1B)]
#  - tp 2 with -sp 0 and -sp 1, tp 4 -sp 1, dp 2 x tp 2 -sp 1 under ZeRO-3, and at np 8
#    dp 2 x tp 2 x pp 2 -sp 1 (1F1B) under ZeRO-3; tp 2 x pp 2 ZeRO-2 under ZB-H1 at -r 3 (its W
#    gathers the LayerNorm outputs again); with the 4-layer model, tp 2 x pp 2 interleaved: every step's
#    loss within 1e-4 of tests/reference.py's float64 trajectory (fp32 round-off measures ~1e-7; 3 steps,
#    as np 8 on 2 cores is slow), every step's gradient norm within 1e-5 of the single-rank run's
#    (tests/same_norms.py: a LayerNorm gradient left unsummed over TP shows there), the final models the
#    single-rank run's (tests/compare_models.py);
#  - every rank's memory and traffic = -plan = tests/accounting.py's formulas (the all-gathers and
#    reduce-scatters in place of all-reduces, the LayerNorm gradients' all-reduce, the halved pipeline
#    messages, each layer's kept bytes from recompute.h's table);
#  - memory: the LayerNorms' and residual stream's activations per layer are 1/tp of TP's without
#    -sp, in the plan; the first step's measured activations differ from TP's by exactly those
#    tensors' (tp-1)/tp (a layer's four (N,C) tensors and four statistics, the stage's input, the
#    final LayerNorm's output and statistics);
#  - -r 0..3 bit-identical under tp 2 -sp 1, each rank's first-step activations shrinking at every level; validation and samples equal one rank's;
#  - bad flags: -sp 1 without -tp, -t not a multiple of -tp: one line on every rank, exit 1.
# Re-layout between -sp on and off: tests/test_resume.sh.
set -euo pipefail
REF=$1 REF4=${2:-}; PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/sp; rm -rf $D; mkdir -p $D
source tests/layout_checks.sh  # MPIRUN, MODEL, $D/single; layout_checked, final_models_compared, recompute_identical, evaluation_equal, bad
layout_checked 2 "-b 4 -tp 2 -sp 0"
layout_checked 2 "-b 4 -tp 2 -sp 1"
layout_checked 4 "-b 4 -tp 4 -sp 1"
layout_checked 4 "-b 2 -tp 2 -sp 1 -z 3"
layout_checked 8 "-b 2 -tp 2 -pp 2 -sp 1 -z 3"
layout_checked 4 "-b 4 -tp 2 -pp 2 -sp 1 -z 2 -ps zb -r 3"
final_models_compared  # every layout above, by name

if [ -n "$REF4" ]; then  # two chunks of one layer a stage
    $PYTHON tests/check_trajectory.py --trainer ./train_gpt_cpu --ref $REF4 --accum 4 --tol 1e-4 --steps 3 \
        --launcher "$MPIRUN -np 4" --extra "-b 4 -tp 2 -pp 2 -sp 1 -ps interleaved -vp 2 -z 3" > $D/interleaved.txt
    echo "tp 2 pp 2 -sp 1, interleaved (V 2), ZeRO-3, 4 layers: $(tail -n 1 $D/interleaved.txt)"
fi

# memory: the LayerNorm/residual activations under -sp are 1/tp of TP's, planned and measured
$PYTHON - $D/np2b4tp2sp0 $D/np2b4tp2sp1 <<'PY'
import json, sys
N, C, L, X, tp = 4 * 32, 64, 2, 4, 2
plan = [json.loads(open(p + ".plan.jsonl").readline()) for p in sys.argv[1:]]
kept = [json.loads(open(p + ".jsonl").readline())["measured"][0]["memory"]["activations"] for p in sys.argv[1:]]
region = 4 * N * C * X + 4 * N * 4                  # ln1, residual2, ln2, residual3 and the four statistics
assert plan[0]["activations_per_layer"] - plan[1]["activations_per_layer"] == region - region // tp, plan
saved = L * (region - region // tp) + (N * C * X - N * C * X // tp) + (N * C * X + 2 * N * 4) * (tp - 1) // tp
assert kept[0] - kept[1] == saved, (kept, saved)     # + the stage's input, the final LayerNorm's output and statistics
print(f"LayerNorms and residual stream per layer: {region} bytes under tp 2, {region // tp} under tp 2 -sp 1; "
      f"kept activations measured {kept[0]} -> {kept[1]} bytes (-{saved})")
PY

recompute_identical 2 "tp 2 -sp 1" -tp 2 -sp 1
evaluation_equal 2 "tp 2 -sp 1" -tp 2 -sp 1  # sampling's windows padded to a multiple of tp
bad 2 "-sp 1 splits the tokens over the TP ranks; it needs -tp > 1" -t 32 -b 4 -sp 1
bad 4 "-sp 1: -t 30 must be a multiple of -tp 4" -t 30 -b 4 -d 480 -tp 4 -sp 1

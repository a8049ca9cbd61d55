#!/usr/bin/env bash
# Interleaved 1F1B (-ps interleaved -vp V, pipeline.h) on the CPU build under mpirun.
# Usage: test_interleaved.sh REFERENCE_DIR (tests/reference.py --layers 4 --accum 4,8, as test_pp.sh's)
#  - pp 2 with V = 2 (4 chunks of one layer), and dp 2 x tp 2 x pp 2 with V = 2 under ZeRO-1 and
#    ZeRO-3: every step's loss within 1e-4 of the 4-layer float64 trajectory (as 1F1B's; 3 steps), the
#    final model the single-rank run's (tests/compare_models.py);
#  - pp 4 with V = 2 and pp 2 with V = 4 (8 chunks) on an 8-layer reference (a 384-token vocabulary,
#    made here by tests/reference.py in a few seconds): the float64 trajectory;
#  - every rank's memory and traffic = -plan = tests/accounting.py's formulas (chunk-sets counted from
#    the schedule's rule in Python, V times the messages);
#  - -r 0..3 bit-identical under it (dp 2 x pp 2, ZeRO-3), each rank's first-step activations shrinking
#    at every level (identical losses alone would pass if -r did nothing); validation and samples equal one rank's;
#  - the trace's compute order on each stage is the schedule's, with the chunk in each span's name.
# Measured idle against the simulator, and the bad flags: tests/test_pp.sh, beside the other schedules.
set -euo pipefail
REF=$1; PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/interleaved; rm -rf $D; mkdir -p $D
source tests/pipeline_runs.sh  # MPIRUN, MODEL, FLAGS, and the single-rank runs $D/single8, $D/single4

FINAL8=() FINAL4=()  # $REF's layouts' final models, by the single-rank run each follows (named: a glob drops absent ones)
layout() {  # layout REF MODEL_ARGS NP DP TP PP V ZERO MICRO_BATCHES: trajectory, plan, accounting
    local ref=$1 model=$2 np=$3 dp=$4 tp=$5 pp=$6 V=$7 z=$8 m=$9 B=$((4 / $4)) tag=dp$4-tp$5-pp$6-vp$7-z$8-$(basename $1)
    local flags="-b $B -tp $tp -pp $pp -ps interleaved -vp $V -z $z"
    $PYTHON tests/check_trajectory.py --trainer ./train_gpt_cpu --ref $ref --accum $m --tol 1e-4 --steps 3 \
        --launcher "$MPIRUN -np $np" --extra "$flags -o $D/$tag" --log $D/$tag.jsonl > $D/$tag.txt
    if [ $ref = $REF ]; then  # (the 8-layer reference's have no single-rank run)
        case $((B * dp * m)) in 32) FINAL8+=($D/$tag/model_00000003.bin) ;; 16) FINAL4+=($D/$tag/model_00000003.bin) ;; *) echo "FAIL: $tag: no single-rank run to compare with"; exit 1 ;; esac
    fi
    $MPIRUN -np $np ./train_gpt_cpu -e $ref/model.bin -i $ref/train.bin -t 32 -d $((B * 32 * dp * m)) $flags -plan 1 \
        | grep '^{' > $D/$tag.plan.jsonl
    echo "dp $dp tp $tp pp $pp, $V chunks a stage, ZeRO-$z: $(tail -n 1 $D/$tag.txt)"
    $PYTHON tests/accounting.py $D/$tag.plan.jsonl $D/$tag.jsonl $model --B $B --accum $m --dp $dp --tp $tp --pp $pp \
        --schedule interleaved --chunks $V --zero $z
}
layout $REF "$MODEL" 2 1 1 2 2 0 8
layout $REF "$MODEL" 8 2 2 2 2 1 4
layout $REF "$MODEL" 8 2 2 2 2 3 4
$PYTHON tests/compare_models.py $D/single8/model_00000003.bin $REF/model.bin "${FINAL8[@]}"  # 8 micro-batches of 4
$PYTHON tests/compare_models.py $D/single4/model_00000003.bin $REF/model.bin "${FINAL4[@]}"  # 4 of 4
# deeper: 8 layers, so that pp 4 can hold two chunks a stage and pp 2 four
REF8=$D/ref8; $PYTHON tests/reference.py --out $REF8 --layers 8 --vocab 384 --accum 8 --debug-steps 1 > /dev/null
MODEL8="--layers 8 --channels 64 --max-seq-len 64 --vocab 384 --T 32 --x 4"
layout $REF8 "$MODEL8" 4 1 1 4 2 0 8
layout $REF8 "$MODEL8" 2 1 1 2 4 2 8
$PYTHON - $D <<'PY'
import json, sys
d = sys.argv[1]
plans = [json.loads(l) for l in open(f"{d}/dp1-tp1-pp4-vp2-z0-ref8.plan.jsonl")]
sets = [p["activation_sets"] for p in sorted(plans, key=lambda p: p["rank"])]
rows = [json.loads(l) for l in open(f"{d}/dp1-tp1-pp4-vp2-z0-ref8.jsonl")]
print(f"pp 4, V 2, m 8: chunk-sets by stage {sets} (each half a stage's); bubble formula {rows[0]['bubble_formula']} "
      f"(1F1B's 3/11 = 0.2727)")
assert abs(rows[0]["bubble_formula"] - 3 / 19) < 1e-4, rows[0]["bubble_formula"]
PY

# recompute: the same losses and norms, bit for bit, and each rank's first-step activations shrink at every level
for r in 0 1 2 3; do
    $MPIRUN -np 4 ./train_gpt_cpu $FLAGS -b 2 -d 512 -x 2 -pp 2 -ps interleaved -vp 2 -z 3 -r $r -log $D/r$r.jsonl > /dev/null
done
$PYTHON tests/identical_steps.py --recompute-levels 0,1,2,3 "dp 2 x pp 2 interleaved (V 2) ZeRO-3, -r 0, 1, 2 and 3" $D/r0.jsonl $D/r1.jsonl $D/r2.jsonl $D/r3.jsonl

# validation and sampling go round the ring V times, forward only: one rank's
EVAL="-e $REF/model.bin -i $REF/train.bin -j $REF/train.bin -b 2 -t 32 -d 128 -x 2 -v 2 -m 3 -s 2 -g 12"
./train_gpt_cpu $EVAL -log $D/eval1.jsonl > /dev/null
$MPIRUN -np 2 ./train_gpt_cpu $EVAL -pp 2 -ps interleaved -vp 2 -log $D/eval2.jsonl > /dev/null
$PYTHON tests/same_evaluation.py $D/eval1.jsonl $D/eval2.jsonl "pp 2, V 2"

# the timeline at p = 2, m = 4, V = 2: each stage's forwards and backwards in the schedule's order
$MPIRUN -np 2 ./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -b 1 -t 32 -d 128 -x 1 -pp 2 -ps interleaved -vp 2 -v 0 -s 0 \
    -trace $D/trace.json > /dev/null
$PYTHON - $D/trace.json <<'PY'
import json, re, sys
spans = sorted((e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X" and e["cat"] == "compute"), key=lambda e: e["ts"])
def order(tid):  # "forward 3 (chunk 1)" -> "f3", "backward 0" -> "B0": chunk 1 in lower case, as pipeline.h draws it
    out = []
    for e in spans:
        if e["tid"] != tid: continue
        kind, k, chunk = re.fullmatch(r"(forward|backward) (\d+)(?: \(chunk (\d)\))?", e["name"]).groups()
        out.append((kind[0].upper() if chunk is None else kind[0]) + k)
    return " ".join(out)
# the same lists as tests/test_pipeline.cpp's timeline renders from interleaved_schedule(s, 2, 4, 2)
assert order(0) == "F0 F1 f0 f1 F2 b0 F3 b1 f2 B0 f3 B1 b2 b3 B2 B3", order(0)
assert order(1) == "F0 F1 f0 b0 f1 b1 F2 B0 F3 B1 f2 b2 f3 b3 B2 B3", order(1)
print(f"trace, interleaved at p 2, m 4, V 2: stage 0 {order(0)}; stage 1 {order(1)}")
PY

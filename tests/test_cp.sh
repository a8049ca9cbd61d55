#!/usr/bin/env bash
# Context parallelism (-cp, cp.h) on the CPU build under mpirun. Usage: test_cp.sh REFERENCE_DIR
#  - cp 2, cp 4, dp 2 x cp 2 (ZeRO-1), and at np 8 dp 2 x cp 2 x tp 2 (ZeRO-1, 3) and cp 2 x tp 2 x pp 2
#    (1F1B) under ZeRO-1 and, with -sp 1, ZeRO-3; cp 2 x pp 2 under ZB-H1 (-r 2): every step's loss
#    within 1e-4 of tests/reference.py's float64 trajectory (fp32 round-off measures ~1e-7; 3 steps,
#    as np 8 on 2 cores is slow), every step's gradient norm within 1e-5 of the single-rank run's
#    (tests/same_norms.py) and the final model the single-rank run's (tests/compare_models.py);
#  - every rank's memory and traffic = -plan = tests/accounting.py's formulas (the ring's sends per
#    layer, ZeRO over dp x cp, the kept log-sum-exp in place of the attention probabilities);
#  - memory: a layer's activations under cp 2 are half of one rank's but for the attention
#    probabilities, (B, NH, T, T), which ring attention replaces by a log-sum-exp per token and head,
#    in the plan and in the first step's measured ledger; -e d4 under cp 2 x tp 2 -sp 1 writes one
#    rank's model file, byte for byte;
#  - -r 0..3 bit-identical under cp 2, each rank's first-step activations shrinking at every level; validation loss and samples under cp 2 and cp 2 x tp 2 -sp 1
#    equal one rank's;
#  - bad flags: -t not a multiple of 2 cp (and of 2 cp tp with -sp), -cp not dividing the world.
# Re-layout between cp on and off: tests/test_resume.sh. The ring alone: tests/test_cp.cpp.
set -euo pipefail
REF=$1; PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/cp; rm -rf $D; mkdir -p $D
source tests/layout_checks.sh  # MPIRUN, MODEL, $D/single; layout_checked, final_models_compared, recompute_identical, evaluation_equal, bad
layout_checked 2 "-b 4 -cp 2"
layout_checked 4 "-b 4 -cp 4"
layout_checked 4 "-b 2 -cp 2 -z 1"
layout_checked 8 "-b 2 -cp 2 -tp 2 -z 1"
layout_checked 8 "-b 2 -cp 2 -tp 2 -z 3"
layout_checked 8 "-b 4 -cp 2 -tp 2 -pp 2 -z 1"
layout_checked 8 "-b 4 -cp 2 -tp 2 -pp 2 -sp 1 -z 3"
layout_checked 4 "-b 4 -cp 2 -pp 2 -z 2 -ps zb -r 2"
final_models_compared  # every layout above, by name

# memory: everything a layer keeps is per token (flash attention keeps a log-sum-exp per token and
# head, never the (B, NH, T, T) probabilities), so exactly half under cp 2; planned per layer, and
# measured by the first step for the whole stage (the embedding's output, lnf)
./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -b 4 -t 32 -d 256 -v 0 -plan 1 | grep '^{' > $D/one.plan.jsonl
$PYTHON - $D/one.plan.jsonl $D/np2b4cp2.plan.jsonl $D/single.jsonl $D/np2b4cp2.jsonl <<'PY'
import json, sys
one, two = (json.loads(open(p).readline())["activations_per_layer"] for p in sys.argv[1:3])
kept = [json.loads(open(p).readline())["measured"][0]["memory"]["activations"] for p in sys.argv[3:5]]
B, T, NH, c = 4, 32, 4, 2
lse = B * T * NH * 4
assert two * c == one, (one, two)
assert kept[1] * c == kept[0], kept
print(f"kept per layer: one rank {one} bytes ({lse} of them log-sum-exp), cp 2 {two} bytes = {one} / 2; "
      f"the stage's, measured: {kept[0]} and {kept[1]}")
PY

# one model whatever the layout: GPT-2 d4 from the seed, a step at lr 0, the files written
INIT="-e d4 -i $REF/train.bin -b 1 -t 16 -x 1 -l 0 -v 0 -s 0 -seed 7"
./train_gpt_cpu $INIT -o $D/d4_one > /dev/null
$MPIRUN -np 4 ./train_gpt_cpu $INIT -cp 2 -tp 2 -sp 1 -o $D/d4_cp2 > /dev/null
cmp $D/d4_one/model_00000001.bin $D/d4_cp2/model_00000001.bin
echo "ok: -e d4 under cp 2 x tp 2 -sp 1 writes the file one rank writes, byte for byte"

recompute_identical 2 "cp 2" -cp 2  # -r 3 reruns the ring
# validation and sampling: each window padded to a multiple of 2 cp, the last position's logits
# sent round the ring by the rank that holds it
evaluation_equal 2 "cp 2" -cp 2
evaluation_equal 4 "cp 2 x tp 2 -sp 1" -cp 2 -tp 2 -sp 1
bad 2 "-cp 2: -t 30 must be a multiple of 2\*cp = 4" -t 30 -b 4 -d 240 -cp 2
bad 4 "-cp 2: -t 36 must be a multiple of 2\*cp\*tp = 8" -t 36 -b 2 -d 144 -cp 2 -tp 2 -sp 1
bad 2 "the grid does not fit the world: 2 ranks is not a multiple of tp \* pp \* cp = 1 \* 1 \* 4" -t 32 -cp 4

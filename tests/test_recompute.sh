#!/usr/bin/env bash
# Recompute levels 0..3 give bit-identical losses and gradient norms in every precision,
# and the memory allocated (measured in the first step's log row) equals -plan's formulas
# and the formula computed here independently (recompute.h's header comment; 16 bytes per
# parameter). The log's "measured" is the model's ledger, summed from the buffer lists -plan sums,
# so the memory is also measured apart: each level's peak resident memory (the kernel's count of
# the pages the process touched) falls from -r 0's by what the formula here says.
# Usage: test_recompute.sh REFERENCE_DIR
set -euo pipefail
REF=$1; PYTHON=${PYTHON:-/usr/bin/python3}
# The trainers: the CPU builds unless TRAINER_FP32, TRAINER_BF16, TRAINER_FP16 name others (make
# test-gpu: the CUDA builds); TRAINER_FLAGS is added to every run (-comm mpi: ranks sharing a GPU)
TRAINER_FP32=${TRAINER_FP32:-./train_gpt_cpu} TRAINER_BF16=${TRAINER_BF16:-./train_gpt_cpu_bf16}
TRAINER_FP16=${TRAINER_FP16:-./train_gpt_cpu_fp16} TRAINER_FLAGS=${TRAINER_FLAGS:-}
D=tests/build/recompute; rm -rf $D; mkdir -p $D
FLAGS="-e $REF/model.bin -i $REF/train.bin -b 4 -t 32 -d 256 -x 3 -l 1e-3 -c 0.1 -shuffle 0 -v 0 -s 0 $TRAINER_FLAGS"
for build in fp32:$TRAINER_FP32 bf16:$TRAINER_BF16 fp16:$TRAINER_FP16; do
    name=${build%%:*} trainer=${build#*:}
    for r in 0 1 2 3; do
        $trainer $FLAGS -r $r -log $D/$name-r$r.jsonl > /dev/null
        $trainer $FLAGS -r $r -plan 1 | tail -n 1 > $D/$name-r$r.plan.json
    done
    $trainer $FLAGS -ga fp32 -plan 1 | tail -n 1 > $D/$name-ga-fp32.plan.json
    $trainer $FLAGS -ga fp32 -x 1 -log $D/$name-ga-fp32.jsonl > /dev/null
done
$PYTHON - $D <<'PY'
import json, sys
sys.path.insert(0, "tests")
from identical_steps import assert_shrinking  # what the layouts' recompute checks assert too
d = sys.argv[1]
L, C, NH, B, T, V, Vp = 2, 64, 4, 4, 32, 50257, 50304   # tests/reference.py's model, this run's batch
N = B * T
for build, X in (("fp32", 4), ("bf16", 2), ("fp16", 2)):
    rows = {r: [(x["loss"], x["norm"]) for x in map(json.loads, open(f"{d}/{build}-r{r}.jsonl"))] for r in range(4)}
    assert len(rows[0]) == 3
    for r in (1, 2, 3):
        assert rows[r] == rows[0], f"{build}: -r {r} differs from -r 0: {rows[r]} vs {rows[0]}"
    per_layer = {0: X * (4 * N * C + 12 * N * C) + 16 * N + 4 * N * NH,   # 4 N NH: attention's log-sum-exp
                 1: X * (4 * N * C + 8 * N * C) + 16 * N + 4 * N * NH,
                 2: X * (2 * N * C + 8 * N * C) + 16 * N + 4 * N * NH,
                 3: X * N * C}
    fixed = X * 2 * N * C + 4 * 3 * N                  # encoded, lnf; lnf mean, rstd, losses
    acts = []
    for r in range(4):
        plan = json.load(open(f"{d}/{build}-r{r}.plan.json"))["memory"]        # -plan: the formulas, nothing allocated
        measured = json.loads(open(f"{d}/{build}-r{r}.jsonl").readline())["measured"][0]["memory"]  # first step: allocated
        want = L * per_layer[r] + fixed
        assert plan["activations"] == measured["activations"] == want, f"{build} -r {r}: plan {plan['activations']}, measured {measured['activations']}, formula {want}"
        assert plan == measured, (build, r, plan, measured)
        assert measured["logits"] == X * N * Vp, measured["logits"]
        acts.append(measured["activations"])
        n = json.load(open(f"{d}/{build}-r{r}.plan.json"))["num_parameters"]
        state = sum(measured[k] for k in ("parameters", "gradients", "optimizer"))
        assert state == 16 * n, f"{build}: {state / n} bytes per parameter, expected 16"
    assert_shrinking(build, [0, 1, 2, 3], [f"{d}/{build}-r{r}.jsonl" for r in range(4)])  # = acts[0] > acts[1] > ...
    ga_plan = json.load(open(f"{d}/{build}-ga-fp32.plan.json"))["memory"]
    ga_measured = json.loads(open(f"{d}/{build}-ga-fp32.jsonl").readline())["measured"][0]["memory"]
    assert ga_plan == ga_measured and sum(ga_measured[k] for k in ("parameters", "gradients", "optimizer")) == 20 * n  # + fp32 sum
    print(f"{build}: -r 0..3 identical {rows[0][-1]}, activation bytes {acts}, 16 bytes/parameter")
PY

# Memory measured apart from the plan: the process's peak resident set (ru_maxrss, tests/
# identical_steps.py: peak_rss_bytes), which counts pages, not the ledger's arithmetic. The CPU build's
# device_malloc is aligned_alloc then device_zero's memset (base.h), so every allocated byte is a
# touched page; the buffers live from start to exit, so the peak holds them all. A d4 model (C 256,
# NH 4) at B*T = 1024 makes the levels' differences 12.6 to 47 MB; everything else (the logits, the
# parameters, the libraries) is the same at every level and cancels in the difference. Expected drop
# from -r 0 at level r: the L - 1 layers' tensors -r r no longer keeps (the Lth is allocated once as
# scratch). The bar, 4 MiB, is ~10x the measured |RSS drop - formula| (<= 0.38 MB, 2026-11-27, two
# runs), and below the least a wrong level moves it: -r 2 keeping the LayerNorm outputs, 6.3 MB.
if [ "$(basename $TRAINER_FP32)" = train_gpt_cpu ]; then  # the CPU build only: a GPU's memory is not resident
$PYTHON - $D $TRAINER_FP32 $REF/train.bin <<'PY'
import json, sys
sys.path.insert(0, "tests")
from identical_steps import peak_rss_bytes
d, trainer, data = sys.argv[1:]
L, C, NH, B, T, X = 4, 256, 4, 4, 256, 4   # -e d4: GPT-2 of depth 4, C = 64 * 4, NH = 4; fp32
N = B * T
per_layer = {0: X * (4 * N * C + 12 * N * C) + 16 * N + 4 * N * NH,   # recompute.h's table, written out
             1: X * (4 * N * C + 8 * N * C) + 16 * N + 4 * N * NH,
             2: X * (2 * N * C + 8 * N * C) + 16 * N + 4 * N * NH,
             3: X * N * C}
rss = {}
for r in range(4):
    rss[r] = peak_rss_bytes([trainer, "-e", "d4", "-i", data, "-b", str(B), "-t", str(T), "-x", "1", "-v", "0", "-s", "0",
                             "-r", str(r), "-log", f"{d}/rss-r{r}.jsonl"])
for r in (1, 2, 3):
    want = (L - 1) * (per_layer[0] - per_layer[r])
    got = rss[0] - rss[r]
    print(f"-r {r}: peak resident memory {rss[r]} bytes, {got} below -r 0's; the formula: {want}")
    assert abs(got - want) <= 4 << 20, f"FAIL: resident memory at -r {r} is {got} bytes below -r 0's, the formula says {want}"
PY
fi

#!/usr/bin/env bash
# TRAIN_GPT_INJECT_NONFINITE=3: under FP16 step 3 is skipped, the scale halves, training goes
# on and the loss keeps falling; under BF16 (scaling off) the step is skipped with a warning.
# Usage: test_loss_scaling.sh REFERENCE_DIR
set -euo pipefail
REF=$1; PYTHON=${PYTHON:-/usr/bin/python3}
# The trainers: the CPU builds unless TRAINER_FP32, TRAINER_BF16, TRAINER_FP16 name others (make
# test-gpu: the CUDA builds); TRAINER_FLAGS is added to every run (-comm mpi: ranks sharing a GPU)
TRAINER_FP32=${TRAINER_FP32:-./train_gpt_cpu} TRAINER_BF16=${TRAINER_BF16:-./train_gpt_cpu_bf16}
TRAINER_FP16=${TRAINER_FP16:-./train_gpt_cpu_fp16} TRAINER_FLAGS=${TRAINER_FLAGS:-}
D=tests/build/scaling; rm -rf $D; mkdir -p $D
FLAGS="-e $REF/model.bin -i data/tinyshakespeare_train.bin -b 4 -t 32 -x 14 -l 3e-3 -v 0 -s 0 $TRAINER_FLAGS"  # shards of `make data`
TRAIN_GPT_INJECT_NONFINITE=3 $TRAINER_FP16 $FLAGS -log $D/fp16.jsonl
TRAIN_GPT_INJECT_NONFINITE=3 $TRAINER_BF16 $FLAGS -log $D/bf16.jsonl 2> $D/bf16.err
grep -q "warning: step 3 had non-finite gradients and was skipped" $D/bf16.err
$PYTHON - $D <<'PY'
import json, sys
d = sys.argv[1]
fp16 = [json.loads(l) for l in open(f"{d}/fp16.jsonl")]
bf16 = [json.loads(l) for l in open(f"{d}/bf16.jsonl")]
for name, rows in (("fp16", fp16), ("bf16", bf16)):
    skipped = [r["step"] for r in rows if r.get("skipped")]
    assert skipped == [3], f"{name}: skipped steps {skipped}"
    first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-3:]) / 3
    assert last < first - 1.0 and last < rows[2]["loss"] - 0.3, f"{name}: loss did not keep falling"
    print(f"{name}: step 3 skipped; loss {first:.3f} -> {last:.3f}")
assert all("scale" in r for r in fp16) and all("scale" not in r for r in bf16)
assert fp16[3]["scale"] < fp16[1]["scale"], "the scale after the skip must be lower than before it"
assert fp16[3]["scale"] == fp16[2]["scale"] / 2
print("fp16 scales:", [r["scale"] for r in fp16])
PY

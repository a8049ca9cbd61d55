#!/usr/bin/env bash
# make shakespeare: a learner's first result. Trains a small GPT-2 from scratch on tinyshakespeare
# with the CPU build (about 4 to 6 minutes on 2 cores: docs/shakespeare.md), and shows that it learns:
# a sample of the untrained model, one halfway and one at the end; the loss curves (train and
# validation) as a PNG; the validation loss at the end beside what a bigram model gets on the same tokens
# (scripts/bigram_loss.py, counted apart from the trainer): under it, the model has learnt more
# than which token follows which. The model and its settings are the sweep's choice
# (docs/shakespeare.md); each can be changed from the environment:
#
#     make shakespeare                         (= bash scripts/shakespeare.sh)
#     STEPS=50 OUT=/tmp/s bash scripts/shakespeare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-d2} B=${B:-8} T=${T:-128} STEPS=${STEPS:-420} LR=${LR:-8e-3}  # the sweep's choice (docs/shakespeare.md)
WARMUP=${WARMUP:-$((STEPS / 4))}  # long: a short warmup at this rate spikes the loss (the sweep)
OUT=${OUT:-runs/shakespeare} PYTHON=${PYTHON:-/usr/bin/python3}
VAL_TOKENS=${VAL_TOKENS:-30720}  # of the validation shard's 32768: the same tokens for every B and T that divide it
VAL_BATCHES=$((VAL_TOKENS / (B * T)))
[ $VAL_BATCHES -ge 1 ] || VAL_BATCHES=1
[ -x ./train_gpt_cpu ] || make train_gpt_cpu
[ -f data/tinyshakespeare_val.bin ] || make data
mkdir -p $OUT
rm -f $OUT/log.jsonl  # -log appends: this run's rows only
RUN="./train_gpt_cpu -e $MODEL -i data/tinyshakespeare_train.bin -j data/tinyshakespeare_val.bin -b $B -t $T -d $((B * T))"
samples() { awk '/^---$/ {inside = !inside; if (inside) print "---"; next} inside'; }  # each sample's text after a ---

echo "== a GPT-2 $MODEL on tinyshakespeare: B $B, T $T, $STEPS steps, learning rate $LR (warmup $WARMUP, cosine to 0.1 of it)"
SECONDS=0
# the untrained model: one step at learning rate 0 changes nothing, then its sample
$RUN -x 1 -l 0 -v 0 -s 1 -g 64 > $OUT/untrained.txt
echo "-- the untrained model says:"
samples < $OUT/untrained.txt
echo "-- training (the step lines: loss, time; a validation loss every $((STEPS / 4)) steps)"
$RUN -x $STEPS -l $LR -u $WARMUP -q 0.1 -v $((STEPS / 4)) -m $VAL_BATCHES -s $((STEPS / 2)) -g 64 \
    -log $OUT/log.jsonl > $OUT/train.txt
grep -E "^step|^val loss" $OUT/train.txt | awk '/^val/ || n++ % 20 == 0'
echo "-- halfway ($((STEPS / 2)) steps), then at the end ($STEPS steps), it says:"
samples < $OUT/train.txt
$PYTHON scripts/plot_log.py $OUT/log.jsonl -o $OUT/loss.png > /dev/null
val=$(grep '^val loss' $OUT/train.txt | tail -n 1 | awk '{print $3}')
bigram=$($PYTHON scripts/bigram_loss.py data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin \
    --targets $((VAL_BATCHES * B * T)) | awk '/^bigram/ {print $2}')
echo "== $SECONDS s. Validation loss $val; a bigram model's on the same $((VAL_BATCHES * B * T)) tokens: $bigram" \
    "($($PYTHON -c "print('beaten' if $val < $bigram else 'not beaten')")). The loss curves: $OUT/loss.png"

# tests/layout_checks.sh: what tests/test_sp.sh and tests/test_cp.sh share, sourced after they set
# REF (tests/reference.py's 2-layer model), D (a scratch directory) and PYTHON: the launcher, the
# model's dimensions for tests/accounting.py, the single-rank run of 3 steps ($D/single, its log
# $D/single.jsonl) that the layouts are compared with, and the checks each makes the same way. Each
# runs train_gpt_cpu with $REF's model and data.
export OMP_NUM_THREADS=1
MPIRUN="timeout 300 mpirun"
MODEL="--layers 2 --channels 64 --max-seq-len 64 --vocab 50304 --T 32 --heads 4"
./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -b 4 -t 32 -d 256 -x 3 -l 1e-3 -u 2 -q 0.1 -c 0.1 -gc 1.0 \
    -shuffle 0 -v 0 -s 0 -o $D/single -log $D/single.jsonl > /dev/null

# flag_value "FLAGS" NAME DEFAULT: the value FLAGS give -NAME, or DEFAULT
flag_value() { local v=$(echo " $1 " | sed -nE "s/.* -$2 ([^ ]+) .*/\1/p"); echo ${v:-$3}; }

# layout_checked NP "FLAGS": 3 steps under FLAGS (-b -cp -tp -sp -pp -ps -z -r) against the float64
# trajectory (1e-4; fp32 round-off measures ~1e-7), their gradient norms against the single rank's
# $D/single.jsonl (tests/same_norms.py), the final model's path added to FINAL (compared by
# final_models_compared); every rank's memory and traffic = -plan = tests/accounting.py's formulas
FINAL=()
layout_checked() {
    local np=$1 flags=$2
    local cp=$(flag_value "$flags" cp 1) tp=$(flag_value "$flags" tp 1) pp=$(flag_value "$flags" pp 1) B=$(flag_value "$flags" b 4)
    local dp=$((np / cp / tp / pp)) tag=np$np$(echo "$flags" | tr -d ' -')
    $PYTHON tests/check_trajectory.py --trainer ./train_gpt_cpu --ref $REF --accum 2 --tol 1e-4 --steps 3 \
        --launcher "$MPIRUN -np $np" --extra "$flags -o $D/$tag" --log $D/$tag.jsonl > $D/$tag.txt
    FINAL+=($D/$tag/model_00000003.bin)
    $MPIRUN -np $np ./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -t 32 -d 256 $flags -v 0 -plan 1 | grep '^{' > $D/$tag.plan.jsonl
    echo "np $np $flags: $(tail -n 1 $D/$tag.txt)"
    $PYTHON tests/same_norms.py $D/single.jsonl $D/$tag.jsonl "np $np $flags"
    $PYTHON tests/accounting.py $D/$tag.plan.jsonl $D/$tag.jsonl $MODEL --B $B --accum 2 --dp $dp --cp $cp --tp $tp --pp $pp \
        --zero $(flag_value "$flags" z 0) --x 4 --sp $(flag_value "$flags" sp 0) --schedule $(flag_value "$flags" ps 1f1b) \
        --recompute $(flag_value "$flags" r 0)
}

# final_models_compared: every layout_checked run's final model (each named: a glob would drop a
# layout that never wrote one) follows the single-rank run's (tests/compare_models.py)
final_models_compared() {
    $PYTHON tests/compare_models.py $D/single/model_00000003.bin $REF/model.bin "${FINAL[@]}"
}

# recompute_identical NP LABEL FLAGS...: -r 0..3 give the same losses and norms, bit for bit, and
# each rank's first-step activations shrink at every level (tests/identical_steps.py)
recompute_identical() {
    local np=$1 label=$2; shift 2
    local flags="-e $REF/model.bin -i $REF/train.bin -b 4 -t 32 -d 256 -x 2 -l 1e-3 -c 0.1 -shuffle 0 -v 0 -s 0 $*"
    rm -f $D/r[0-3].jsonl  # -log appends
    for r in 0 1 2 3; do $MPIRUN -np $np ./train_gpt_cpu $flags -r $r -log $D/r$r.jsonl > /dev/null; done
    $PYTHON tests/identical_steps.py --recompute-levels 0,1,2,3 "$label, -r 0..3" $D/r0.jsonl $D/r1.jsonl $D/r2.jsonl $D/r3.jsonl
}

# evaluation_equal NP LABEL FLAGS...: validation loss and samples equal one rank's (made once)
evaluation_equal() {
    local np=$1 label=$2; shift 2
    local eval="-e $REF/model.bin -i $REF/train.bin -j $REF/train.bin -b 2 -t 32 -x 2 -v 2 -m 3 -s 2 -g 12"
    [ -f $D/eval_one.jsonl ] || ./train_gpt_cpu $eval -log $D/eval_one.jsonl > /dev/null
    rm -f $D/eval.jsonl
    $MPIRUN -np $np ./train_gpt_cpu $eval "$@" -log $D/eval.jsonl > /dev/null
    $PYTHON tests/same_evaluation.py $D/eval_one.jsonl $D/eval.jsonl "$label"
}

# bad NP EXPECTED ARGS...: the run ends with the line EXPECTED on every one of NP ranks and a
# non-zero exit (not a timeout)
bad() {
    local np=$1 want=$2; shift 2
    local code=0
    $MPIRUN -np $np ./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -v 0 -s 0 "$@" > $D/bad.out 2> $D/bad.err || code=$?
    [ $code -ne 0 ] && [ $code -ne 124 ] || { echo "FAIL: $* exit $code"; exit 1; }
    local count=$(grep -c -- "$want" $D/bad.err || true)
    [ "$count" -eq "$np" ] || { echo "FAIL: '$want' reported by $count of $np ranks"; cat $D/bad.err; exit 1; }
    echo "ok ($np ranks): $(grep -m1 -- "$want" $D/bad.err)"
}

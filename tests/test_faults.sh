#!/usr/bin/env bash
# Faults a long run meets, on the CPU build at 2 ranks (tests/reference.py's model, 8 steps, a
# checkpoint every 2). Usage: test_faults.sh REFERENCE_DIR
#  - the watchdog (-timeout, watchdog.h): a rank stopped with SIGSTOP as step 3 begins; the other
#    rank, waiting in its next collective, ends the job within the timeout and a few seconds more,
#    with its line (naming the operation, group and step) and exit code 3;
#  - scripts/supervise.sh: a run that meets three faults, one per attempt (a rank killed as step 3
#    begins, a rank killed while writing step 6's checkpoint, a rank stopped at step 7 and ended by
#    the watchdog), resumes each time from its newest complete checkpoint and finishes: its final
#    model equals the unbroken run's byte for byte, its log holds the three restarts;
#  - under the supervisor, bad flags (exit 1) are not retried, and a command without -o and -n is
#    refused in one line.
set -euo pipefail
REF=$1
D=tests/build/faults; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=1
RUN="timeout 300 mpirun -np 2 ./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -b 2 -t 32 -x 8 -l 1e-3 -v 0 -s 0 -n 2 -timeout 10"

# the watchdog alone
start=$(date +%s)
code=0; TRAIN_GPT_STOP_AT_STEP=3 $RUN -o $D/stopped > $D/stopped.txt 2>&1 || code=$?
took=$(( $(date +%s) - start ))
grep -q "error: watchdog: rank 0 made no progress for 1[0-9] s, since it began .* at step 3 (-timeout 10)" $D/stopped.txt \
    || { tail -5 $D/stopped.txt; echo "FAIL: no watchdog line"; exit 1; }
[ $code -eq 3 ] || { echo "FAIL: exit code $code after the watchdog, not 3"; exit 1; }
[ $took -le 25 ] || { echo "FAIL: the stopped job ended after $took s (-timeout 10)"; exit 1; }
echo "ok: a stopped rank: the job ended in $took s with exit code 3: $(grep -m1 'error: watchdog' $D/stopped.txt | cut -c1-150)"

# the supervisor through three faults, one per attempt: a wrapper counts the attempts
$RUN -o $D/whole > /dev/null
cat > $D/faulty.sh <<'SH'
#!/usr/bin/env bash
n=$(( $(cat "$FAULTS_DIR/attempts" 2>/dev/null || echo 0) + 1 )); echo $n > "$FAULTS_DIR/attempts"
case $n in
    1) export TRAIN_GPT_KILL_AT_STEP=3 ;;       # a rank dies mid-run: resume from step 2
    2) export TRAIN_GPT_DIE_IN_CHECKPOINT=6 ;;  # a rank dies writing step 6's state: resume from step 4
    3) export TRAIN_GPT_STOP_AT_STEP=7 ;;       # a rank stops: the watchdog, resume from step 6
esac
exec "$@"
SH
FAULTS_DIR=$D bash scripts/supervise.sh --max-restarts 3 -- bash $D/faulty.sh $RUN -o $D/supervised -log $D/supervised.jsonl \
    > $D/supervised.txt 2>&1 || { tail -n 20 $D/supervised.txt; echo "FAIL: the supervised run did not finish"; exit 1; }
grep "^supervise.sh" $D/supervised.txt
[ "$(grep -c '^supervise.sh: .* restart [0-9] of 3' $D/supervised.txt)" = 3 ] || { echo "FAIL: 3 restarts expected"; exit 1; }
grep -q "restart 1 of 3: a crash or a killed rank (exit 9); resuming from step 2" $D/supervised.txt
grep -q "restart 2 of 3: a crash or a killed rank (exit 9); resuming from step 4" $D/supervised.txt
grep -q "restart 3 of 3: the watchdog (a rank made no progress; exit 3); resuming from step 6" $D/supervised.txt
[ "$(grep -c '"restart"' $D/supervised.jsonl)" = 3 ] || { echo "FAIL: the log should hold the 3 restarts"; exit 1; }
cmp $D/whole/model_00000008.bin $D/supervised/model_00000008.bin || { echo "FAIL: the supervised run's final model differs"; exit 1; }
echo "ok: killed at step 3, killed writing step 6's checkpoint, stopped at step 7: 3 restarts, final model identical"

# what the supervisor does not retry
code=0; bash scripts/supervise.sh -- $RUN -o $D/bad -b 0 > $D/bad.txt 2>&1 || code=$?
[ $code -eq 1 ] && grep -q "not restarted" $D/bad.txt && ! grep -q "restart 1" $D/bad.txt \
    || { cat $D/bad.txt; echo "FAIL: bad flags under the supervisor"; exit 1; }
echo "ok: bad flags: $(grep -m1 'error' $D/bad.txt | cut -c1-100); not restarted"
code=0; bash scripts/supervise.sh -- ./train_gpt_cpu -e $REF/model.bin -x 2 > $D/none.txt 2>&1 || code=$?
[ $code -eq 1 ] && grep -q "writes no checkpoints" $D/none.txt || { cat $D/none.txt; echo "FAIL: a command without -o, -n"; exit 1; }
echo "ok: $(cat $D/none.txt)"

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

# damaged checkpoints: the newest (step 8) with a flipped byte in a state file, the one before (6)
# with a truncated model file; -y 1 passes over both, saying why, resumes from step 4 and ends with
# the unbroken run's final model. With every checkpoint damaged: one line on every rank, exit 1
cp -r $D/whole $D/damaged
printf '\xff' | dd of=$D/damaged/state_00000008_00001.bin bs=1 seek=5000 conv=notrunc 2> /dev/null
truncate -s 1000 $D/damaged/model_00000006.bin
$RUN -o $D/damaged -y 1 > $D/damaged.txt 2>&1 || { tail -n 5 $D/damaged.txt; echo "FAIL: resuming past damaged checkpoints"; exit 1; }
grep -q "checkpoint step 8 passed over: .*state_00000008_00001.bin does not match its hash" $D/damaged.txt
grep -q "checkpoint step 6 passed over: .*model_00000006.bin is truncated: 1000 bytes" $D/damaged.txt
grep -q "resuming from step 4" $D/damaged.txt
cmp $D/whole/model_00000008.bin $D/damaged/model_00000008.bin || { echo "FAIL: resumed past damage, the final model differs"; exit 1; }
echo "ok: a flipped byte (step 8) and a truncated file (step 6) passed over, resumed from step 4, final model identical"
for s in 2 4; do truncate -s 100 $D/damaged/optimizer_0000000$s.bin; done
rm -f $D/damaged/complete_0000000[68]
code=0; $RUN -o $D/damaged -y 1 > $D/none_verify.txt 2>&1 || code=$?
[ $code -ne 0 ] && [ "$(grep -c 'error: -y 1: no checkpoint in .* verifies' $D/none_verify.txt)" = 2 ] \
    || { cat $D/none_verify.txt; echo "FAIL: no checkpoint verifies, yet (exit $code)"; exit 1; }
echo "ok: $(grep -m1 'error: -y 1' $D/none_verify.txt | cut -c1-140), on both ranks"

# a full disk while a checkpoint is written: a 150 MB tmpfs holds step 2's checkpoint (about 92 MB:
# the model, the optimizer file, 2 state files) but not step 4's; the run ends with one line, step 2's
# checkpoint verifies, and a resume from it (moved to a disk with room) ends as the unbroken run
mkdir -p $D/full
mount -t tmpfs -o size=150m tmpfs $D/full || { echo "FAIL: cannot mount a tmpfs (root is needed) for the full-disk case"; exit 1; }
code=0; $RUN -o $D/full/run > $D/full.txt 2>&1 || code=$?
cp -r $D/full/run $D/after_full
umount $D/full
[ $code -ne 0 ] && grep -q "error: writing .* failed (disk full?)" $D/full.txt \
    || { tail -n 5 $D/full.txt; echo "FAIL: a full disk mid-checkpoint (exit $code)"; exit 1; }
[ -f $D/after_full/complete_00000002 ] && [ ! -f $D/after_full/complete_00000004 ] || { ls $D/after_full; echo "FAIL: markers"; exit 1; }
$RUN -o $D/after_full -y 1 > $D/after_full.txt 2>&1
grep -q "resuming from step 2" $D/after_full.txt
cmp $D/whole/model_00000008.bin $D/after_full/model_00000008.bin || { echo "FAIL: resumed after the full disk, final model differs"; exit 1; }
echo "ok: the disk filled writing step 4: $(grep -m1 'error: writing' $D/full.txt | cut -c1-110); step 2 resumed, final model identical"

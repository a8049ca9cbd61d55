#!/usr/bin/env bash
# Faults a long run meets, on the CPU build at 2 ranks (tests/reference.py's model, 8 steps, a
# checkpoint every 2). Usage: test_faults.sh REFERENCE_DIR
#  - the watchdog (-timeout, watchdog.h): a rank stopped with SIGSTOP as step 3 begins; the other
#    rank, waiting in step 3's gradient all-reduce of the dp group, ends the job with its line
#    (that operation, that group, step 3, idle for at least the timeout) and exit code 3;
#  - the watchdog's clock restarts at every operation and step: a healthy run whose steps each last
#    longer than its -timeout (many micro-steps, ZeRO-3's per-unit collectives in between) runs to
#    the end with exit code 0;
#  - scripts/supervise.sh: a run that meets three faults, one per attempt (a rank killed as step 3
#    begins, a rank killed while writing step 6's checkpoint, a rank stopped at step 7 and ended by
#    the watchdog), resumes each time from its newest complete checkpoint and finishes: its final
#    model equals the unbroken run's byte for byte, its log holds the three restarts;
#  - its give-up path: 2 faults under --max-restarts 1: one restart, then one line and the child's
#    exit code;
#  - under the supervisor, bad flags (exit 1) are not retried, and a command without -o and -n is
#    refused in one line, as is a --max-restarts that is not a whole number;
#  - SIGTERM to the supervisor while its run trains ends the run's ranks too (none left), with one
#    line and exit code 143, and nothing restarted; SIGHUP likewise (129);
#  - one run at a time in an -o (run_dir.h's lock): a run started into the -o of a training one is
#    refused on both ranks in one line naming the holder, exit 1; of two started together exactly
#    one is refused; once the holder is killed, the next run takes the directory (no stale lock);
#  - damaged checkpoints passed over (the resumed step and the final model checked first, then the
#    lines that say why), none verifying, a disk filling mid-checkpoint.
# FAULTS_PARTS (default: all) runs only some parts, for the mutants' checks (tests/mutants/*.patch):
# watchdog healthy supervisor giveup bad signal lock damaged full. Every failure prints a line starting FAIL.
set -euo pipefail
REF=$1
D=tests/build/faults; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=1
PARTS=" ${FAULTS_PARTS:-watchdog healthy supervisor giveup bad signal lock damaged full} "
part() { [[ "$PARTS" == *" $1 "* ]]; }
source tests/watchdog_status.sh  # defines: watchdog_status_ok
fail() { echo "FAIL: $*"; exit 1; }
has() {  # has FILE REGEX WHAT: FILE holds a line matching REGEX (grep -E), else a FAIL line naming WHAT
    grep -Eq -- "$2" "$1" || { tail -n 5 "$1"; fail "$3: no line /$2/ in $1"; }
}
TRAIN="mpirun -np 2 ./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -b 2 -t 32 -l 1e-3 -v 0 -s 0"
RUN="timeout 300 $TRAIN -x 8 -n 2 -timeout 10"

# the watchdog alone. No bound on how soon the job ends (a busy machine may take long to start the
# ranks): it must end, by the watchdog (exit code 3); `timeout 130` (the -timeout and 120 s) only
# guards against a hang. The idle seconds in the line are at least the timeout (watchdog.h fires
# once idle_ms > 1000 * timeout), however late it fires.
if part watchdog; then
    code=0; TRAIN_GPT_STOP_AT_STEP=3 timeout 130 $TRAIN -x 8 -n 2 -timeout 10 -o $D/stopped > $D/stopped.txt 2>&1 || code=$?
    # rank 1 (the last) stops as step 3 begins; rank 0 computes its step and waits in the gradient
    # all-reduce (ZeRO-0: zero_reduce_step, comm.h's "an all-reduce" of the dp group)
    want="^error: watchdog: rank 0 made no progress for ([0-9]+) s, since it began an all-reduce of the dp group at step 3 \(-timeout 10\): a rank has stopped or a link has failed; ending the job \(exit code 3\)$"
    has $D/stopped.txt "$want" "the watchdog's line (rank 0, an all-reduce of the dp group, step 3)"
    [ "$(grep -Ec "^error: watchdog" $D/stopped.txt)" = 1 ] || fail "the watchdog: $(grep -Ec "^error: watchdog" $D/stopped.txt) watchdog lines, not 1"
    idle=$(grep -E "$want" $D/stopped.txt | sed -E "s/$want/\1/")
    [ "$idle" -ge 10 ] || fail "the watchdog's line says $idle s idle, under its -timeout 10"
    watchdog_status_ok $code $D/stopped.txt || fail "the watchdog: exit code $code after a rank stopped, not 3 (124: still running after 130 s)"
    echo "ok: a stopped rank: exit code $code: $(grep -m1 'error: watchdog' $D/stopped.txt | cut -c1-150)"
fi

# a healthy run whose steps each last longer than -timeout 2: K micro-steps a step (-d), ZeRO-3, so
# that every unit's forward begins an all-gather and its backward a reduce-scatter: the longest stretch
# without progress is one unit's forward or backward (~0.1 s here), well under 2 s; the step, > 3 s.
# The run must end with exit code 0: the watchdog's clock restarts at each operation, not only at
# each step. The steps must really be longer than the timeout, or this proves nothing: measured from
# the log, K doubled (up to four times) on a machine fast enough to do 16 micro-steps in under 3 s
# (2026-11-29, this 2-core machine idle: 64 micro-steps took 2999.99 ms, the third attempt's).
if part healthy; then
    K=16 ok=0
    for attempt in 1 2 3 4 5; do
        rm -f $D/healthy.jsonl  # -log appends: each attempt's own rows
        code=0; timeout 300 $TRAIN -z 3 -d $((2 * 32 * 2 * K)) -x 2 -timeout 2 -log $D/healthy.jsonl > $D/healthy.txt 2>&1 || code=$?
        [ $code -eq 0 ] || { tail -n 3 $D/healthy.txt
            fail "a healthy run, steps of $K micro-steps under -timeout 2, ended with exit code $code: $(grep -m1 'error' $D/healthy.txt | cut -c1-160)"; }
        [ "$(grep -c '"step"' $D/healthy.jsonl)" = 2 ] || fail "the healthy run logged $(grep -c '"step"' $D/healthy.jsonl) steps, not 2"
        shortest=$( (grep -o '"ms": [0-9.]*' $D/healthy.jsonl || true) | awk '{print int($2)}' | sort -n | head -n 1)
        if [ "$shortest" -gt 3000 ]; then ok=1; break; fi
        K=$((K * 2))
    done
    [ $ok = 1 ] || fail "the healthy run's steps lasted only $shortest ms, not over 3000 (-timeout 2): the watchdog's resets are not exercised"
    echo "ok: a healthy run, 2 steps of $K micro-steps (the shortest $shortest ms) under -timeout 2: ran to the end, exit code 0"
fi

# the unbroken run, for the final models
if part supervisor || part damaged || part full; then $RUN -o $D/whole > $D/whole.txt 2>&1 || { tail -n 5 $D/whole.txt; fail "the unbroken run"; }; fi

# the supervisor through three faults, one per attempt: a wrapper counts the attempts
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
if part supervisor; then
    FAULTS_DIR=$D bash scripts/supervise.sh --max-restarts 3 -- bash $D/faulty.sh $RUN -o $D/supervised -log $D/supervised.jsonl \
        > $D/supervised.txt 2>&1 || { tail -n 20 $D/supervised.txt; fail "the supervised run did not finish"; }
    grep "^supervise.sh" $D/supervised.txt || true
    [ "$(grep -c '^supervise.sh: .* restart [0-9] of 3' $D/supervised.txt)" = 3 ] || fail "the supervisor: 3 restarts expected"
    cmp $D/whole/model_00000008.bin $D/supervised/model_00000008.bin || fail "the supervised run's final model differs from the unbroken run's"
    has $D/supervised.txt "restart 1 of 3: a crash or a killed rank \(exit 9\); resuming from step 2$" "the supervisor's first restart"
    has $D/supervised.txt "restart 2 of 3: a crash or a killed rank \(exit 9\); resuming from step 4$" "the supervisor's second restart"
    has $D/supervised.txt "restart 3 of 3: the watchdog \(a rank made no progress; exit 3\); resuming from step 6$" "the supervisor's third restart"
    [ "$(grep -c '"restart"' $D/supervised.jsonl)" = 3 ] || fail "the log should hold the 3 restarts"
    echo "ok: killed at step 3, killed writing step 6's checkpoint, stopped at step 7: 3 restarts, final model identical"
fi

# the supervisor's give-up path: a rank killed at step 3 on the first 2 attempts (a third would run
# clean) under --max-restarts 1: one restart, then one line saying it gives up, and the child's exit
# code (recorded by the wrapper, not read from the supervisor's lines)
if part giveup; then
    mkdir -p $D/giveup
    cat > $D/giveup/twice.sh <<'SH'
#!/usr/bin/env bash
n=$(( $(cat "$FAULTS_DIR/attempts" 2>/dev/null || echo 0) + 1 )); echo $n > "$FAULTS_DIR/attempts"
[ $n -le 2 ] && export TRAIN_GPT_KILL_AT_STEP=3
"$@"; code=$?; echo $code >> "$FAULTS_DIR/codes"; exit $code
SH
    code=0; FAULTS_DIR=$D/giveup bash scripts/supervise.sh --max-restarts 1 -- bash $D/giveup/twice.sh \
        timeout 300 $TRAIN -x 4 -n 2 -o $D/giveup/run > $D/giveup.txt 2>&1 || code=$?
    attempts=$(cat $D/giveup/attempts 2> /dev/null || echo 0) child=$(sed -n 2p $D/giveup/codes 2> /dev/null || true)  # the second attempt's: the last fault
    restarts=$(grep -c '^supervise.sh: .* restart [0-9]* of 1: ' $D/giveup.txt || true)
    gave_up=$(grep -Ec "^supervise.sh: a crash or a killed rank \(exit $child\) after 1 restarts, the most --max-restarts allows: giving up$" $D/giveup.txt || true)
    if [ "$attempts" != 2 ] || [ "$restarts" != 1 ] || [ "$gave_up" != 1 ] || [ $code -ne "${child:-0}" ] || [ "${child:-0}" -le 3 ]; then
        cat $D/giveup.txt | grep -v '^step' | tail -n 8
        fail "supervisor give-up under --max-restarts 1 with 2 faults: $attempts attempts (want 2), $restarts restarts (want 1), $gave_up 'giving up' lines (want 1), exit $code (want the second attempt's, ${child:-none}, a crash's)"
    fi
    echo "ok: 2 faults under --max-restarts 1: $(grep 'giving up' $D/giveup.txt); exit $code, the child's"
fi

# what the supervisor does not retry
if part bad; then
    code=0; bash scripts/supervise.sh -- $RUN -o $D/bad -b 0 > $D/bad.txt 2>&1 || code=$?
    [ $code -eq 1 ] && grep -q "not restarted" $D/bad.txt && ! grep -q "restart 1" $D/bad.txt \
        || { cat $D/bad.txt; fail "bad flags under the supervisor: exit $code, or restarted"; }
    echo "ok: bad flags: $(grep -m1 'error' $D/bad.txt | cut -c1-100); not restarted"
    code=0; bash scripts/supervise.sh -- ./train_gpt_cpu -e $REF/model.bin -x 2 > $D/none.txt 2>&1 || code=$?
    [ $code -eq 1 ] && [ "$(wc -l < $D/none.txt)" = 1 ] && grep -q "writes no checkpoints" $D/none.txt \
        || { cat $D/none.txt; fail "a command without -o, -n under the supervisor: exit $code, not one line"; }
    echo "ok: $(cat $D/none.txt)"
fi

# damaged checkpoints: the newest (step 8) with its model file truncated, the one before (6) with a
# byte of the last rank's state file flipped far into the file (its last byte, past the first MiB:
# the top byte of v's last element); -y 1 passes over both, saying why, resumes from step 4 and ends
# with the unbroken run's final model. Checked first: the step it resumed from and the final model
# (a damaged checkpoint trusted shows there), then the lines. With every checkpoint damaged: one
# line on every rank, exit 1
# a signal to the supervisor (a scheduler ending the job) ends the run it started, every rank of it
if part signal; then
    code=0; bash scripts/supervise.sh --max-restarts 2.5 -- $RUN -o $D/restarts > $D/restarts.txt 2>&1 || code=$?
    [ $code -eq 1 ] && [ "$(wc -l < $D/restarts.txt)" = 1 ] || { cat $D/restarts.txt; fail "--max-restarts 2.5: exit $code"; }
    has $D/restarts.txt "^supervise.sh: --max-restarts expects a whole number, got '2.5'$" "--max-restarts 2.5"
    for sig in TERM HUP; do  # (SIGINT: a shell starts a background job with it ignored, so it cannot be sent here)
        out=$D/signalled_$sig
        bash scripts/supervise.sh -- $TRAIN -x 1000 -n 500 -o $out > $out.txt 2>&1 &
        supervisor=$!
        for i in $(seq 600); do grep -q "^step" $out.txt && break; sleep 0.1; done
        grep -q "^step" $out.txt || { kill -KILL $supervisor; fail "the supervised run logged no step in 60 s"; }
        code=0; kill -$sig $supervisor; wait $supervisor || code=$?
        for i in $(seq 30); do pgrep -f "train_gpt_cpu.*$out" > /dev/null || break; sleep 0.1; done
        left=$(pgrep -f "train_gpt_cpu.*$out" | wc -l || true)
        [ "$left" = 0 ] || { pkill -KILL -f "train_gpt_cpu.*$out"; fail "SIG$sig to the supervisor left $left ranks training after 3 s"; }
        want=$((128 + $(kill -l $sig)))
        [ $code -eq $want ] || { tail -n 3 $out.txt; fail "SIG$sig to the supervisor: exit code $code, not $want"; }
        has $out.txt "^supervise.sh: SIG$sig: ending the command \(SIGTERM\); not restarting$" "SIG$sig to the supervisor"
        [ "$(grep -c '^supervise.sh' $out.txt)" = 1 ] || fail "SIG$sig to the supervisor: a restart or another line"
        echo "ok: SIG$sig to the supervisor ends its run's ranks (none left), exit code $want: $(grep '^supervise.sh' $out.txt)"
    done
fi

# one run at a time in an -o (run_dir.h): the second is refused on every rank, naming the holder
if part lock; then
    LONG="$TRAIN -x 1000 -n 500"
    $LONG -o $D/locked > $D/lock_a.txt 2>&1 &
    holder=$!
    for i in $(seq 600); do grep -q "^step" $D/lock_a.txt && break; sleep 0.1; done
    code=0; $TRAIN -x 2 -n 1 -o $D/locked > $D/lock_b.txt 2>&1 || code=$?
    kill -TERM $holder; wait $holder || true
    [ $code -eq 1 ] && [ "$(grep -c '^error' $D/lock_b.txt)" = 2 ] || { cat $D/lock_b.txt; fail "a run into a training run's -o: exit $code"; }
    has $D/lock_b.txt "^error: -o $D/locked is in use by another run \(process [0-9]+ on .* holds $D/locked/.lock\); give this run its own -o$" \
        "a run into a training run's -o"
    $TRAIN -x 2 -n 1 -o $D/locked > $D/lock_c.txt 2>&1 || { tail -n 3 $D/lock_c.txt; fail "the -o of a killed run stays locked"; }
    $LONG -o $D/together > $D/together_1.txt 2>&1 & first=$!
    $LONG -o $D/together > $D/together_2.txt 2>&1 & second=$!
    code=0; wait -n $first $second || code=$?
    running=$(for p in $first $second; do kill -0 $p 2> /dev/null && echo $p || true; done)
    kill -TERM $first $second 2> /dev/null || true; wait $first $second || true
    refused=$( (grep -l "^error: -o $D/together is in use by another run" $D/together_[12].txt || true) | wc -l)
    [ $code -eq 1 ] && [ -n "$running" ] && [ $refused = 1 ] || fail "two runs started together into one -o: the first to end exited $code, $refused refused"
    echo "ok: one run at a time in an -o: $(grep -m1 '^error' $D/lock_b.txt); of two started together one refused; a killed run's lock goes with it"
fi

if part damaged; then
    cp -r $D/whole $D/damaged
    truncate -s 1000 $D/damaged/model_00000008.bin
    f=$D/damaged/state_00000006_00001.bin at=$(( $(stat -c %s $D/damaged/state_00000006_00001.bin) - 1 ))
    byte=$(od -An -tu1 -j $at -N 1 $f | tr -d ' ')
    printf "\\x$(printf %02x $((byte ^ 255)))" | dd of=$f bs=1 seek=$at conv=notrunc 2> /dev/null
    code=0; $RUN -o $D/damaged -y 1 > $D/damaged.txt 2>&1 || code=$?
    from=$(sed -n 's/^resuming from step \([0-9]*\):.*/\1/p' $D/damaged.txt); from=${from:-0 (none)}
    same=differs; cmp -s $D/whole/model_00000008.bin $D/damaged/model_00000008.bin && same=identical
    [ "$from" = 4 ] && [ $same = identical ] && [ $code -eq 0 ] \
        || { grep -v '^step' $D/damaged.txt | tail -n 5
             fail "damaged checkpoints (8: a truncated model file, 6: a flipped byte in the last rank's state file): resumed from step $from, not 4; exit $code; the final model $same from the unbroken run's"; }
    has $D/damaged.txt "^checkpoint step 8 passed over: .*model_00000008.bin is truncated: 1000 bytes" "step 8's truncated model file passed over"
    has $D/damaged.txt "^checkpoint step 6 passed over: .*state_00000006_00001.bin does not match its hash" "step 6's damaged state file passed over"
    echo "ok: a truncated file (step 8) and a flipped byte (step 6) passed over, resumed from step 4, final model identical"
    for s in 2 4; do truncate -s 100 $D/damaged/optimizer_0000000$s.bin; done
    rm -f $D/damaged/complete_0000000[68]
    code=0; $RUN -o $D/damaged -y 1 > $D/none_verify.txt 2>&1 || code=$?
    [ $code -ne 0 ] && [ "$(grep -c 'error: -y 1: no checkpoint in .* verifies' $D/none_verify.txt)" = 2 ] \
        || { cat $D/none_verify.txt; fail "no checkpoint verifies, yet exit $code, or not one line on each of 2 ranks"; }
    echo "ok: $(grep -m1 'error: -y 1' $D/none_verify.txt | cut -c1-140), on both ranks"
fi

# a full disk while a checkpoint is written: a 150 MB tmpfs holds step 2's checkpoint (about 92 MB:
# the model, the optimizer file, 2 state files) but not step 4's; the run ends with one line, step 2's
# checkpoint verifies, and a resume from it (moved to a disk with room) ends as the unbroken run
if part full; then
    mkdir -p $D/full
    mount -t tmpfs -o size=150m tmpfs $D/full || fail "cannot mount a tmpfs (root is needed) for the full-disk case"
    code=0; $RUN -o $D/full/run > $D/full.txt 2>&1 || code=$?
    cp -r $D/full/run $D/after_full
    umount $D/full
    [ $code -ne 0 ] && grep -q "error: writing .* failed (disk full?)" $D/full.txt \
        || { tail -n 5 $D/full.txt; fail "a full disk mid-checkpoint: exit $code, or no 'disk full?' line"; }
    [ -f $D/after_full/complete_00000002 ] && [ ! -f $D/after_full/complete_00000004 ] || { ls $D/after_full; fail "markers after the full disk"; }
    $RUN -o $D/after_full -y 1 > $D/after_full.txt 2>&1 || { tail -n 5 $D/after_full.txt; fail "resuming after the full disk"; }
    from=$(sed -n 's/^resuming from step \([0-9]*\):.*/\1/p' $D/after_full.txt)
    [ "$from" = 2 ] || fail "after the full disk: resumed from step ${from:-0 (none)}, not 2"
    cmp $D/whole/model_00000008.bin $D/after_full/model_00000008.bin || fail "resumed after the full disk, the final model differs"
    echo "ok: the disk filled writing step 4: $(grep -m1 'error: writing' $D/full.txt | cut -c1-110); step 2 resumed, final model identical"
fi

#!/usr/bin/env bash
# A run's files are its own (run_dir.h, checkpoint.h, loss_scale.h, dataloader.h), on the CPU build
# at 2 ranks (tests/reference.py's model). Usage: test_run_dir.sh REFERENCE_DIR
#  - identity: a run with -n writes -o/run.json; a fresh start into that -o is refused; a resume (-y 1)
#    with another -e, -t, -d, -seed, -shuffle, global micro-batch (-b), a shard fewer, a shard resized
#    is refused, each naming the flag (or shard) and both values; a directory with checkpoints and no
#    run.json refuses a fresh start; a run.json edited by hand (a value of another type) is one line,
#    not a crash; the same flags resume;
#  - markers: a marker emptied, and a marker cut short (its last file line gone) beside a state file
#    short by 4 bytes, are passed over with a line each: the run resumes from the older checkpoint and
#    ends with the unbroken run's final model, byte for byte;
#  - nonfinite: a model file with NaN parameters: every step non-finite; the run ends after 8 in a row,
#    one line on each rank, exit 1, and no checkpoint (no marker, no run.json) of that state;
#  - files: -n without -o, a missing -tok with samples, an unwritable -log and -trace: one line on each
#    rank, exit 1, before any step;
#  - fsync: every checkpoint file (and the marker) is fsynced before its rename, and its directory
#    after it (strace's record of the system calls, in order);
#  - unfinished: a rank killed writing step 4's state leaves files without a marker; the next start
#    removes them, one line each, and resumes from step 2;
#  - loader (AddressSanitizer build): one epoch (-x -1) is the shards' whole samples, counted apart
#    from the shard headers; a resume whose checkpoint was reading a shard -i no longer matches (its
#    run.json removed, as before run.json existed) is refused on both ranks, with no ASan report;
#  - space: -o on a tmpfs that holds one rank's share of a checkpoint but not all ranks' files is
#    refused before any step, naming both sizes (root mounts it).
# RUN_DIR_PARTS (default: all) runs only some parts, for the mutants' checks. Every failure prints a
# line starting FAIL.
set -euo pipefail
REF=$1 PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/run_dir; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0
PARTS=" ${RUN_DIR_PARTS:-identity markers nonfinite files fsync unfinished loader space} "
part() { [[ "$PARTS" == *" $1 "* ]]; }
fail() { echo "FAIL: $*"; exit 1; }
TRAIN="timeout 300 mpirun -np 2 ./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -b 2 -t 32 -l 1e-3 -v 0 -s 0"
refused() {  # refused NAME WANT COMMAND...: exit 1, one `error:` line on each of 2 ranks matching WANT, no step
    local name=$1 want=$2; shift 2
    local code=0; "$@" > $D/$name.txt 2>&1 || code=$?
    local lines=$(grep -c "^error: " $D/$name.txt || true) matching=$(grep -Ec -- "^error: $want" $D/$name.txt || true)
    [ $code -eq 1 ] && [ "$lines" = 2 ] && [ "$matching" = 2 ] && ! grep -q "^step" $D/$name.txt \
        || { tail -n 4 $D/$name.txt; fail "$name: exit $code, $matching of $lines error lines match /$want/ (want 2 of 2, before any step)"; }
    echo "ok $name: $(grep -m1 '^error' $D/$name.txt | cut -c1-190)"
}

if part identity; then
    $TRAIN -x 4 -n 2 -o $D/run > $D/run.txt 2>&1 || { tail -n 3 $D/run.txt; fail "the run that writes run.json"; }
    [ -f $D/run/run.json ] || fail "a run with -n wrote no run.json"
    refused fresh_into_a_run "-o $D/run holds the run of process [0-9]+ on .*, first checkpoint [0-9: -]+ UTC \(run.json\): resume it with -y 1, or give this run another -o" \
        $TRAIN -x 4 -n 2 -o $D/run
    resumed="-y 1: -o $D/run holds the run of process [0-9]+ on [^,]*, first checkpoint [0-9: -]+ UTC, and"
    refused other_e "$resumed -e is \"d2\" here, \"$REF/model.bin\" in that run" $TRAIN -x 6 -n 2 -o $D/run -y 1 -e d2
    refused other_t "$resumed -t is 16 here, 32 in that run" $TRAIN -x 6 -n 2 -o $D/run -y 1 -t 16
    refused other_d "$resumed -d is 256 here, 128 in that run" $TRAIN -x 6 -n 2 -o $D/run -y 1 -d 256
    refused other_seed "$resumed -seed is 7 here, 1337 in that run" $TRAIN -x 6 -n 2 -o $D/run -y 1 -seed 7
    refused other_shuffle "$resumed -shuffle is 0 here, 1 in that run" $TRAIN -x 6 -n 2 -o $D/run -y 1 -shuffle 0
    refused other_b "$resumed -b 1 x dp 2 = 2 sequences a global micro-batch here, 4 in that run \(-b 2 x dp 2\)" \
        $TRAIN -x 6 -n 2 -o $D/run -y 1 -b 1 -d 128
    mkdir -p $D/shards && cp $REF/train.bin $D/shards/a.bin && cp $REF/train.bin $D/shards/b.bin
    sharded() { $TRAIN -n 2 -o $D/sharded -i "$D/shards/*.bin" "$@"; }  # (the pattern quoted: the trainer globs it)
    sharded -x 4 > $D/sharded.txt 2>&1 || { tail -n 3 $D/sharded.txt; fail "the run on two shards"; }
    mv $D/shards/b.bin $D/b.bin
    refused a_shard_fewer "-y 1: -o $D/sharded holds the run .*, and its shard b.bin is not among those -i matches now" sharded -x 6 -y 1
    head -c 8192 $D/b.bin > $D/shards/b.bin
    refused a_shard_resized "-y 1: -o $D/sharded holds the run .*, and its shard b.bin had 9170 bytes, now 8192" sharded -x 6 -y 1
    cp -r $D/run $D/older && rm $D/older/run.json  # as a run before run.json wrote its -o
    refused fresh_beside_checkpoints "-o $D/older holds another run's checkpoints \(the newest: step 4\): resume it with -y 1" \
        $TRAIN -x 4 -n 2 -o $D/older
    cp -r $D/run $D/edited && sed -i -z 's/"shards": \[[^]]*\]\s*\]/"shards": [5]/' $D/edited/run.json  # a shard of another type
    refused edited_run_json "-o $D/edited: $D/edited/run.json is damaged \(not the JSON a run writes\)" $TRAIN -x 6 -n 2 -o $D/edited -y 1
    $TRAIN -x 6 -n 2 -o $D/run -y 1 > $D/same.txt 2>&1 || { tail -n 3 $D/same.txt; fail "a resume with the run's own flags"; }
    grep -q "^resuming from step 4" $D/same.txt || fail "a resume with the run's own flags: $(grep -m1 resum $D/same.txt)"
    echo "ok: the run's own flags resume it"
fi

if part markers; then
    $TRAIN -x 8 -n 2 -o $D/whole > $D/whole.txt 2>&1 || { tail -n 3 $D/whole.txt; fail "the unbroken run"; }
    mkdir -p $D/marked && cp $D/whole/*_0000000[246]* $D/whole/run.json $D/marked/
    : > $D/marked/complete_00000006  # emptied
    head -n -1 $D/marked/complete_00000004 > $D/marked/cut && mv $D/marked/cut $D/marked/complete_00000004  # last file line gone
    truncate -s -4 $D/marked/state_00000004_00001.bin  # and the file it named, short by 4 bytes
    code=0; $TRAIN -x 8 -n 2 -o $D/marked -y 1 > $D/marked.txt 2>&1 || code=$?
    from=$(sed -n 's/^resuming from step \([0-9]*\):.*/\1/p' $D/marked.txt)
    [ $code -eq 0 ] && [ "${from:-0}" = 2 ] || { grep -v '^step' $D/marked.txt | tail -n 5; fail "an emptied and a cut marker: exit $code, resumed from ${from:-nothing}, not 2"; }
    cmp $D/whole/model_00000008.bin $D/marked/model_00000008.bin || fail "resumed past the damaged markers, the final model differs"
    for s in 6 4; do
        grep -Eq "^checkpoint step $s passed over: .*complete_0000000$s does not name every file of its checkpoint" $D/marked.txt \
            || fail "step $s's marker: no line passing it over"
    done
    echo "ok: an emptied marker (6) and a cut one (4, its state file short by 4 bytes) passed over; resumed from 2, final model identical"
fi

if part nonfinite; then
    $PYTHON - $REF/model.bin $D/nan_model.bin <<'PY'
import sys, numpy as np
raw = open(sys.argv[1], "rb").read()
values = np.frombuffer(raw, dtype=np.float32, offset=1024).copy()
values[::97] = np.nan  # damaged: every forward is NaN
open(sys.argv[2], "wb").write(raw[:1024] + values.tobytes())
PY
    code=0; $TRAIN -e $D/nan_model.bin -x 20 -n 2 -o $D/nan > $D/nan.txt 2>&1 || code=$?
    want="^error: step 8: 8 steps in a row had non-finite gradients: the parameters or the data are broken; ended with no checkpoint of this state"
    [ $code -eq 1 ] && [ "$(grep -Ec "$want" $D/nan.txt)" = 2 ] && [ "$(grep -Ec '^step +[0-9]+/' $D/nan.txt)" = 8 ] \
        || { grep -v warning $D/nan.txt | tail -n 4; fail "a NaN model: exit $code, $(grep -Ec "$want" $D/nan.txt) of 2 lines, $(grep -Ec '^step +[0-9]+/' $D/nan.txt) steps (want 8)"; }
    ls $D/nan | grep -Eq '^(complete_|run.json|model_)' && fail "a NaN model: a checkpoint was written: $(ls $D/nan | tr '\n' ' ')"
    grep -q "^step 2: no checkpoint written: the loss is non-finite" $D/nan.txt || fail "a NaN model: no line for step 2's checkpoint"
    echo "ok: a NaN model: $(grep -m1 '^error' $D/nan.txt | cut -c1-120); no checkpoint written"
fi

if part files; then
    refused n_without_o "-n 2 writes checkpoints into -o, and no -o was given" $TRAIN -x 4 -n 2
    refused missing_tok "-tok $D/none.bin: no such file" $TRAIN -x 4 -s 2 -tok $D/none.bin
    refused bad_log "-log $D/no_dir/log.jsonl: cannot write it" $TRAIN -x 4 -log $D/no_dir/log.jsonl
    refused bad_trace "-trace $D/no_dir/trace.json: cannot write it" $TRAIN -x 4 -trace $D/no_dir/trace.json
fi

if part fsync; then
    command -v strace > /dev/null || fail "strace is needed (scripts/install_deps.sh installs it)"
    strace -f -e trace=openat,fsync,rename,close -o $D/strace.txt \
        ./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -b 2 -t 32 -x 2 -v 0 -s 0 -n 2 -o $D/synced > /dev/null
    $PYTHON - $D/strace.txt $D/synced <<'PY'
import re, sys
lines, folder = open(sys.argv[1]).read().splitlines(), sys.argv[2]
fd_of, synced, renamed, problems = {}, {}, [], []
for i, line in enumerate(lines):
    if m := re.search(r'openat\(AT_FDCWD, "([^"]+\.tmp)", O_WRONLY[^)]*\) = (\d+)', line):
        fd_of[m[2]] = m[1]; synced[m[1]] = False
    elif m := re.search(r'fsync\((\d+)\) += 0', line):
        if m[1] in fd_of: synced[fd_of[m[1]]] = True
    elif m := re.search(r'close\((\d+)\)', line):
        fd_of.pop(m[1], None)
    elif m := re.search(r'rename\("([^"]+\.tmp)", "([^"]+)"\) = 0', line):
        if not synced.get(m[1]): problems.append(f"{m[2]} renamed before its bytes were fsynced")
        after = lines[i + 1:i + 4]  # the directory opened and fsynced next
        d = next((re.search(r'openat\(AT_FDCWD, "([^"]+)", O_RDONLY\) = (\d+)', l) for l in after if "O_RDONLY)" in l), None)
        if not d or d[1] != m[2].rsplit("/", 1)[0] or not any(f"fsync({d[2]})" in l for l in after):
            problems.append(f"{m[2]}: its directory not fsynced after the rename")
        renamed.append(m[2].rsplit("/", 1)[1])
want = {"model_00000002.bin", "optimizer_00000002.bin", "state_00000002_00000.bin", "complete_00000002", "run.json"}
if not want <= set(renamed): problems.append(f"renamed {sorted(renamed)}, not all of {sorted(want)}")
if problems: sys.exit("FAIL: " + "; ".join(problems))
print(f"ok fsync: {len(renamed)} files ({', '.join(sorted(renamed))}) each fsynced, renamed, its directory fsynced")
PY
fi

if part unfinished; then
    F="-x 6 -n 2 -z 1"
    $TRAIN $F -o $D/crash_whole > /dev/null 2>&1 || fail "the unbroken run"
    TRAIN_GPT_DIE_IN_CHECKPOINT=4 $TRAIN $F -o $D/crash > $D/crash.txt 2>&1 && fail "the job went on after a rank died"
    [ -f $D/crash/complete_00000002 ] && [ ! -f $D/crash/complete_00000004 ] && [ -f $D/crash/model_00000004.bin ] \
        || fail "after the crash: $(ls $D/crash | tr '\n' ' ')"
    left=$(cd $D/crash && ls | grep _00000004 | tr '\n' ' ')  # rank 0's files, each out or not (a race), and the .tmp
    $TRAIN $F -o $D/crash -y 1 > $D/crash_resume.txt 2>&1 || { tail -n 3 $D/crash_resume.txt; fail "resuming after the crash"; }
    for f in $left; do
        grep -q "^-o $D/crash: removed $f, a file of a checkpoint that never completed" $D/crash_resume.txt \
            || fail "the unfinished checkpoint's $f: no line removing it ($(grep -c removed $D/crash_resume.txt) removed)"
    done
    grep -q "^resuming from step 2" $D/crash_resume.txt || fail "after the crash: $(grep -m1 resum $D/crash_resume.txt)"
    cmp $D/crash_whole/model_00000006.bin $D/crash/model_00000006.bin || fail "resumed after the crash, the final model differs"
    echo "ok: a checkpoint cut by a killed rank: its files ($left) removed at the next start, one line each; resumed from 2, final model identical"
fi

if part loader; then
    ASAN="timeout 300 mpirun -np 2 tests/build/train_gpt_cpu_asan -e $REF/model.bin -b 2 -t 32 -l 1e-3 -v 0 -s 0 -d 128"
    mkdir -p $D/two && cp $REF/train.bin $D/two/a.bin && cp $REF/train.bin $D/two/b.bin
    $ASAN -i "$D/two/*.bin" -x -1 -n 40 -o $D/epoch > $D/epoch.txt 2>&1 || { tail -n 20 $D/epoch.txt; fail "one epoch under ASan"; }
    grep -q "ERROR: AddressSanitizer" $D/epoch.txt && { grep -m3 -A5 AddressSanitizer $D/epoch.txt; fail "ASan, one epoch"; }
    want=$($PYTHON -c "
import numpy as np, sys
n = [int(np.fromfile(p, dtype=np.int32, count=3)[2]) for p in sys.argv[1:]]
print(sum((t - 1) // (2 * 2 * 32) for t in n))  # whole samples of dp 2 x B 2 x T 32 tokens (+1), one a step" $D/two/a.bin $D/two/b.bin)
    steps=$(grep -Ec "^step +[0-9]+/" $D/epoch.txt)
    [ "$steps" = "$want" ] || fail "-x -1 ran $steps steps; the two shards hold $want whole samples (one a step)"
    echo "ok: -x -1 ran $steps steps: the shards' $want whole samples, under ASan"
    mv $D/two/b.bin $D/b_moved.bin && rm $D/epoch/run.json  # the last checkpoint was reading the second shard
    refused fewer_shards_asan "checkpoint step $steps was reading shard 2 of its epoch; -i $D/two/\*.bin matches 1" \
        $ASAN -i "$D/two/*.bin" -x 50 -n 40 -o $D/epoch -y 1
    grep -q "AddressSanitizer" $D/fewer_shards_asan.txt && fail "ASan reported on the resume with fewer shards"
    echo "ok: no ASan report"
fi

if part space; then
    # the test model at 2 ranks under ZeRO-0 with -n: the model file P*4 bytes, the optimizer file
    # P*8, and each rank's state P*8 (its m and v whole): 28 P in all, where one rank's share (the
    # count before, 20 P) would fit a tmpfs of 24 P
    P=$(( ($(stat -L -c %s $REF/model.bin) - 1024) / 4 ))  # (-L: the mutants' trees link the references)
    mkdir -p $D/small
    mount -t tmpfs -o size=$((24 * P / 1024))k tmpfs $D/small || fail "cannot mount a tmpfs (root is needed) for the space case"
    code=0; $TRAIN -x 4 -n 2 -o $D/small/run > $D/small.txt 2>&1 || code=$?
    # (a rank ended by MPI_Abort may still hold a file there for a moment after mpirun returns)
    for i in $(seq 50); do umount $D/small 2> /dev/null && break; sleep 0.2; done
    mountpoint -q $D/small && { umount -l $D/small; fail "the tmpfs stayed busy 10 s after the run ended"; }
    [ $code -eq 1 ] && ! grep -q "^step" $D/small.txt && [ "$(grep -c "^error: " $D/small.txt)" = 2 ] \
        || { tail -n 3 $D/small.txt; fail "-o on a tmpfs of 24 P bytes: exit $code (want 1, before any step, on both ranks)"; }
    needs=$(grep -m1 -oE "^error: -o $D/small/run: [0-9.]+ MiB free, one checkpoint needs [0-9.]+ MiB" $D/small.txt | awk '{print $(NF - 1)}')
    awk -v n="${needs:-0}" -v p=$P 'BEGIN {exit !(n * 1048576 > 28 * p && n * 1048576 < 28 * p + 0.2 * 1048576)}' \
        || fail "the space line: $(grep -m1 '^error' $D/small.txt) (want 28 P = $((28 * P)) bytes, within 0.2 MiB)"
    echo "ok space: $(grep -m1 '^error' $D/small.txt | cut -c1-150)"
fi

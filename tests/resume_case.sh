# tests/resume_case.sh: one bit-exact resume check, sourced by tests/test_resume.sh and
# tests/test_emu.sh. The caller sets D (a scratch directory) and FLAGS (the run's flags, with -x 8
# and -n 4). A run of 8 steps; then, in a directory holding only its step 4 checkpoint and a log of
# its first 4 rows (as if it had stopped there), a run resumed with -y 1 must log the same steps
# and write the same final model, byte for byte.
resume_case() {  # resume_case NAME LAUNCH TRAINER EXTRA_FLAGS
    local name=$1 launch=$2 trainer=$3 extra=$4
    $launch $trainer $FLAGS $extra -o $D/$name-whole -log $D/$name-whole.jsonl > /dev/null
    mkdir -p $D/$name-cut && cp $D/$name-whole/*_00000004* $D/$name-cut/  # model, optimizer, state files, marker
    head -n 4 $D/$name-whole.jsonl > $D/$name-cut.jsonl
    $launch $trainer $FLAGS $extra -o $D/$name-cut -y 1 -log $D/$name-cut.jsonl > $D/$name-resume.txt
    grep -q "^resuming from step 4:" $D/$name-resume.txt \
        || { echo "FAIL $name: resumed from $(grep -m1 -o '^resuming from step [0-9]*' $D/$name-resume.txt || echo 'no step'), not step 4"; exit 1; }
    # identical rows but for timing (ms, tok_per_s, mfu, the bubble, the CPU build's split of the step)
    # and the first step's measured block
    strip() { sed -E -e 's/"ms": [0-9.]*, "tok_per_s": [0-9.]*, "mfu": ([0-9.e+-]+|null)//' -e 's/, "bubble[a-z_]*": (\[[^]]*\]|[0-9.-]+)//g' \
        -e 's/, "time_ms": \{[^}]*\}//' -e 's/, "measured": .*}$/}/' "$1"; }
    diff <(strip $D/$name-whole.jsonl) <(strip $D/$name-cut.jsonl) > /dev/null || { echo "FAIL $name: logs differ"; diff <(strip $D/$name-whole.jsonl) <(strip $D/$name-cut.jsonl) | head; exit 1; }
    cmp $D/$name-whole/model_00000008.bin $D/$name-cut/model_00000008.bin || { echo "FAIL $name: final models differ"; exit 1; }
    echo "ok $name: steps 5-8 after resuming equal the unbroken run, final model identical"
}

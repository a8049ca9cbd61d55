#!/usr/bin/env bash
# tests/run_mutants.sh: "a test must be able to fail", itself tested. Each file in tests/mutants/ is
# a deliberate bug (a small patch) with the check of `make test` that must catch it:
#
#     caught by: NAME     the check of tests/run_tests.sh that catches it (what it proves)
#     kind: lab           only for a bug in a dev/ kernel lab, which the trainer never runs (else: trainer)
#     build: TARGETS      what the check needs built (make targets)
#     check: COMMAND      the check itself, run from the tree's root; it must fail with the bug
#     expect: REGEX       a line the check must print when it catches the bug (grep -E): the
#                         assertion or FAIL line naming the quantity the bug breaks
#     --- a/FILE          then the patch, as `git diff` writes it
#
# A mutant is CAUGHT only when its check exits non-zero *and* its log holds a line matching `expect:`:
# a check that fails for another reason (a timeout, a crash, a missing file, another assertion) proves
# nothing about this bug, and is reported as TIMEOUT, CRASHED or OTHER REASON. Every distinct check
# first runs on an unchanged copy of the tree, where it must pass and print no line matching any of
# its mutants' `expect:` (else the check, or the expected line, not the bug, would be what is seen). A
# check that make test ran as it is (its `caught by:` check, the same command) and passed on this very
# tree (tests/tree_id.sh: the same commit, changes and untracked files; no build output newer than its
# start) is not run again: a copy of make test's log serves (under CI, make test runs just before).
# Then each mutant gets a copy of that tree with its patch applied, its targets rebuilt (make rebuilds
# only what the patched file touches) and its check run. Prints one line per mutant and "N of N
# trainer mutants caught; M of M lab mutants caught"; exits 1 if one is not caught, if a patch no
# longer applies or no longer builds, or if a check fails without its bug.
#
#     bash tests/run_mutants.sh [NAME...]     (make test-mutants; after make test, which builds the
#                                             binaries and references the copies start from;
#                                             MUTANT_DIR=DIR: where the copies go, tests/build/mutants;
#                                             MUTANT_JOBS=N: how many run at once, 3)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHON=${PYTHON:-/usr/bin/python3} OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OPENBLAS_NUM_THREADS=1
source tests/blas_kernels.sh  # exports OPENBLAS_CORETYPE (make test's kernels)
S=${MUTANT_DIR:-tests/build/mutants}  # another folder for a second run at once
ROOT=$PWD
source tests/checkpoint_files.sh  # defines: drop_checkpoints
source tests/tree_id.sh           # defines: tree_id
rm -rf $S; mkdir -p $S

# the mutants asked for, else all
names=("$@")
[ ${#names[@]} -gt 0 ] || names=($(cd tests/mutants && ls *.patch | sed 's/\.patch$//'))
field() { sed -n "s/^$2: //p" tests/mutants/$1.patch | head -n 1; }  # field NAME KEY

# a copy of the working tree, its build outputs (timestamps kept, so make rebuilds only what a patch
# touches) and, as links, the data and the references the checks read (a check's own writes land in
# the copy; a file it removes first is only the link)
copy_tree() {  # copy_tree DIR
    mkdir -p $1
    git ls-files -co --exclude-standard -z | xargs -0 cp -p --parents -t $1
    for f in train_gpt_cpu train_gpt_cpu_bf16 train_gpt_cpu_fp16 train_gpt_emu train_gpt_emu_fp32 train_gpt_emu_fp16 \
             tokenize convert_hf .precision-*; do [ -e $f ] && cp -p $f $1/; done
    mkdir -p $1/tests/build/emu
    for f in tests/build/catch_main.o tests/build/test_*; do [ -e $f ] && cp -a $f $1/tests/build/; done
    for f in tests/build/emu/*; do [ $f = tests/build/emu/runs ] || cp -a $f $1/tests/build/emu/; done  # not its runs' 1 GB
    ln -s $ROOT/data $1/data
    for ref in ref ref4 pytorch_ops; do [ -d tests/build/$ref ] && cp -rs $ROOT/tests/build/$ref $1/tests/build/$ref; done
    true
}
run_check() {  # run_check DIR NAME TAG: builds the mutant's targets in DIR and runs its check there (logs: NAME.TAG.*)
    local dir=$1 name=$2
    (cd $dir && make -s $(field $name build) > $ROOT/$S/$name.$3.build.log 2>&1) || return 250  # (no check exits 250)
    local code=0
    (cd $dir && timeout 600 bash -c "$(field $name check)") > $S/$name.$3.log 2>&1 || code=$?
    drop_checkpoints $dir/tests/build  # GBs of checkpoints, read by no later check
    return $code
}

# the runs go JOBS at a time (MUTANT_JOBS, default 3: compiling a mutant takes one core, most checks
# one or two, and their ranks sleep while they wait: on this 2-core machine the 84 took 1638 s two at
# a time, 1469 s three at a time, 2026-11-29): each job in a copy of its own, its result a file
# ($S/NAME.result) read at the end.
# (Polled each second: simpler than bash's wait -n, whose view of jobs already ended varies by version.)
JOBS=${MUTANT_JOBS:-3}
slots=()  # the process running in each slot, for the clean runs (each slot has its copy, $S/cleanK)
take_slot() {  # take_slot: waits for a free slot, sets `slot`
    while :; do
        for ((slot = 0; slot < JOBS; slot++)); do
            [ -z "${slots[slot]:-}" ] && return
            kill -0 ${slots[slot]} 2> /dev/null || { slots[slot]=""; return; }
        done
        sleep 1
    done
}
running_at_most() {  # running_at_most N: waits until at most N background jobs run
    while [ $(jobs -rp | wc -l) -gt $1 ]; do sleep 1; done
}

start=$SECONDS
echo "copying the tree and checking that every check passes without its bug ($JOBS at a time)"
copy_tree $S/base  # stays as built: each mutant starts from a copy of it, not of what the checks wrote
for ((k = 0; k < JOBS; k++)); do cp -a $S/base $S/clean$k; done
declare -A clean_log  # "build|check" -> the clean run's log: mutants sharing a check share its clean run
clean_names=()
# make test's log of the mutant's check, when make test ran that very command on this tree and it passed:
# copied (a make test started meanwhile would rewrite it)
tree=$(tree_id)
passed_in_make_test() {  # passed_in_make_test NAME: prints the copy's path, or nothing
    local check=$(field $1 'caught by' | cut -d' ' -f1) command=$(field $1 check)
    local started=tests/build/commands/$check
    [ "$(cat tests/build/results/$check 2> /dev/null)" = passed ] && [ -f $started ] || return 0
    [ "$(cat $started)" = "${command//\$PYTHON/$PYTHON}" ] || return 0
    [ "$(cat tests/build/commands/.tree 2> /dev/null)" = "$tree" ] || return 0
    local newer=$(find train_gpt_* tokenize convert_hf tests/build/catch_main.o tests/build/train_gpt_cpu_asan \
                       tests/build/test_* tests/build/emu/*.o tests/build/emu/test_* tests/build/emu/dev tests/build/emu/tsan \
                       -type f -newer $started 2> /dev/null | head -n 1)
    [ -z "$newer" ] && cp tests/build/$check.log $S/$1.clean.log && echo $S/$1.clean.log
}
for name in "${names[@]}"; do
    [ -f tests/mutants/$name.patch ] || { echo "no mutant tests/mutants/$name.patch"; exit 1; }
    for key in build check expect; do
        [ -n "$(field $name $key)" ] || { echo "FAIL: tests/mutants/$name.patch has no '$key:' line"; exit 1; }
    done
    key="$(field $name build)|$(field $name check)"
    [ -n "${clean_log[$key]:-}" ] && continue
    log=$(passed_in_make_test $name)
    if [ -n "$log" ]; then clean_log[$key]=$log; echo "  clean $name: passed in make test ($log)"
    else clean_log[$key]=$S/$name.clean.log; clean_names+=($name); fi
done
for name in "${clean_names[@]}"; do
    take_slot
    (
        t=$SECONDS
        if run_check $S/clean$slot $name clean; then echo "  clean $name: passes ($((SECONDS - t)) s)"; echo ok > $S/$name.clean.result
        else echo "  clean $name: FAILS without the bug: $(field $name check)"; tail -n 5 $S/$name.clean.log; echo fail > $S/$name.clean.result; fi
    ) &
    slots[slot]=$!
done
wait
clean_fails=0
for name in "${clean_names[@]}"; do [ "$(cat $S/$name.clean.result 2> /dev/null)" = ok ] || clean_fails=$((clean_fails + 1)); done
for name in "${names[@]}"; do
    key="$(field $name build)|$(field $name check)"
    if grep -Eq -- "$(field $name expect)" ${clean_log[$key]}; then
        echo "  clean $name: prints its expected line without the bug: $(grep -Em1 -- "$(field $name expect)" ${clean_log[$key]} | cut -c1-120)"
        clean_fails=$((clean_fails + 1))
    fi
done
for ((k = 0; k < JOBS; k++)); do rm -rf $S/clean$k; done

# one mutant in its own copy: prints its line, writes CAUGHT or MISSED to $S/NAME.result
run_mutant() {  # run_mutant NAME
    local name=$1 t=$SECONDS dir=$S/$1 code=0
    cp -a $S/base $dir
    if ! (cd $dir && patch -p1 --quiet --no-backup-if-mismatch) < tests/mutants/$name.patch > $S/$name.patch.log 2>&1; then
        echo "STALE  $name: the patch no longer applies: $(head -n 1 $S/$name.patch.log)"; echo MISSED > $S/$name.result; rm -rf $dir; return
    fi
    run_check $dir $name mutant || code=$?
    local log=$S/$name.mutant.log expect=$(field $name expect)
    local seen=$(grep -Em1 -- "$expect" $log | cut -c1-150) result=MISSED
    if [ $code -eq 250 ]; then  # a bug that does not compile tests nothing
        echo "BROKEN $name: does not build: $(grep -m1 'rror' $S/$name.mutant.build.log)"
    elif [ $code -eq 0 ]; then
        echo "SURVIVED $name: $(field $name check) passed with the bug"
    elif [ -n "$seen" ]; then
        echo "CAUGHT $name by $(field $name 'caught by' | cut -d' ' -f1) ($((SECONDS - t)) s): $seen"; result=CAUGHT
    else
        local why="OTHER REASON"
        [ $code -eq 124 ] && why="TIMEOUT"
        { [ $code -gt 128 ] && [ $code -ne 250 ] || grep -Eq 'Segmentation fault|core dumped|Aborted|terminated by signal|BAD TERMINATION' $log; } && why="CRASHED"
        echo "$why $name (exit $code): the check failed without printing /$expect/; its last line: $(tail -n 1 $log | cut -c1-120)"
    fi
    echo $result > $S/$name.result
    rm -rf $dir
}
for name in "${names[@]}"; do
    running_at_most $((JOBS - 1))
    run_mutant $name &
done
wait
caught=(0 0); total=(0 0); missed=0  # [0]: trainer mutants, [1]: lab mutants
for name in "${names[@]}"; do
    kind=0; [ "$(field $name kind)" = lab ] && kind=1
    total[$kind]=$((total[$kind] + 1))
    if [ "$(cat $S/$name.result 2> /dev/null)" = CAUGHT ]; then caught[$kind]=$((caught[$kind] + 1)); else missed=$((missed + 1)); fi
done
echo "${caught[0]} of ${total[0]} trainer mutants caught; ${caught[1]} of ${total[1]} lab mutants caught ($((SECONDS - start)) s)"
[ $clean_fails -eq 0 ] || echo "FAIL: $clean_fails checks fail or print an expected line without their bug, so they prove nothing"
[ $missed -eq 0 ] && [ $clean_fails -eq 0 ]

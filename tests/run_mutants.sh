#!/usr/bin/env bash
# tests/run_mutants.sh: "a test must be able to fail", itself tested. Each file in tests/mutants/ is
# a deliberate bug (a small patch) with the check of `make test` that must catch it:
#
#     caught by: NAME     the check of tests/run_tests.sh that catches it (what it proves)
#     build: TARGETS      what the check needs built (make targets)
#     check: COMMAND      the check itself, run from the tree's root; the mutant is caught when it fails
#     --- a/FILE          then the patch, as `git diff` writes it
#
# Every check first runs on an unchanged copy of the tree, where it must pass: a check that fails
# without the bug (a missing file, a stale path) would "catch" every mutant and prove nothing. Then
# each mutant gets a copy of that tree with its patch applied, its targets rebuilt (make rebuilds
# only what the patched file touches) and its check run. Prints one line per mutant and "N of N
# mutants caught"; exits 1 if one survives, if a patch no longer applies or no longer builds, or if
# a check fails without its bug.
#
#     bash tests/run_mutants.sh [NAME...]     (make test-mutants; after make test, which builds the
#                                             binaries and references the copies start from)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHON=${PYTHON:-/usr/bin/python3} OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OPENBLAS_NUM_THREADS=1
S=tests/build/mutants
ROOT=$PWD
source tests/checkpoint_files.sh  # defines: drop_checkpoints
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
    (cd $dir && make -s $(field $name build) > $ROOT/$S/$name.$3.build.log 2>&1) || return 2
    local code=0
    (cd $dir && timeout 600 bash -c "$(field $name check)") > $S/$name.$3.log 2>&1 || code=$?
    drop_checkpoints $dir/tests/build  # GBs of checkpoints, read by no later check
    return $code
}

start=$SECONDS
echo "copying the tree and checking that every check passes without its bug"
copy_tree $S/base  # stays as built: each mutant starts from a copy of it, not of what the checks wrote
cp -a $S/base $S/clean
clean_fails=0
for name in "${names[@]}"; do
    [ -f tests/mutants/$name.patch ] || { echo "no mutant tests/mutants/$name.patch"; exit 1; }
    t=$SECONDS
    if run_check $S/clean $name clean; then echo "  clean $name: passes ($((SECONDS - t)) s)"
    else echo "  clean $name: FAILS without the bug: $(field $name check)"; tail -n 5 $S/$name.clean.log; clean_fails=$((clean_fails + 1)); fi
done

rm -rf $S/clean
caught=0; survived=0
for name in "${names[@]}"; do
    t=$SECONDS
    dir=$S/$name
    cp -a $S/base $dir
    if ! (cd $dir && patch -p1 --quiet --no-backup-if-mismatch) < tests/mutants/$name.patch > $S/$name.patch.log 2>&1; then
        echo "STALE  $name: the patch no longer applies"; cat $S/$name.patch.log; survived=$((survived + 1)); continue
    fi
    code=0; run_check $dir $name mutant || code=$?
    if [ $code -eq 2 ]; then  # a bug that does not compile tests nothing
        echo "BROKEN $name: does not build: $(grep -m1 error $S/$name.mutant.build.log)"; survived=$((survived + 1))
    elif [ $code -ne 0 ]; then
        why=$(grep -m1 'FAIL\|rror\|failed\|mismatch\|not fewer\|deadlock\|out-of-range\|data race' $S/$name.mutant.log || tail -n 1 $S/$name.mutant.log)
        echo "CAUGHT $name by $(field $name 'caught by' | cut -d' ' -f1) ($((SECONDS - t)) s): $(echo "$why" | cut -c1-150)"
        caught=$((caught + 1))
    else
        echo "SURVIVED $name: $(field $name check) passed with the bug"; survived=$((survived + 1))
    fi
    rm -rf $dir
done
total=${#names[@]}
echo "$caught of $total mutants caught ($((SECONDS - start)) s)"
[ $clean_fails -eq 0 ] || echo "FAIL: $clean_fails checks fail without their bug, so they prove nothing"
[ $survived -eq 0 ] && [ $clean_fails -eq 0 ]

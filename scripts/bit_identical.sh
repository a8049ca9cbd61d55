#!/usr/bin/env bash
# scripts/bit_identical.sh REV: does the working tree train exactly as commit REV does?
# For a change that should not change behaviour (a refactor, a move, a rename): builds the CPU
# trainers (fp32, bf16, fp16) at REV in a git worktree and here, runs both on the same ten
# runs (one rank; dp 2 ZeRO-3 with -ga fp32; tp 2 ZeRO-1 -r 2; pp 2 1F1B ZeRO-2; pp 2 GPipe ZeRO-3
# -r 3; dp 2 x tp 2 x pp 2 ZeRO-3 -r 1 at np 8; bf16 pp 2 ZeRO-3 -ga fp32; fp16 with loss
# scaling; bf16 dp 2 ZeRO-2; tp 2 -sp 1 x pp 2 ZeRO-1; then a bf16 resume under pp 2 ZeRO-3) of a 2-layer GPT-2 on
# tinyshakespeare, 4 steps with validation, samples and checkpoints every 2, and compares
# byte for byte: the log rows (losses, norms, learning rates, validation losses, samples,
# measured memory and traffic; timings removed), the step lines, -plan's output, and every
# model, optimizer, state, marker and run.json file written (but the lock and run.json's process
# and time, which name the run). Prints IDENTICAL or each difference; exit 1
# on any. Takes about 5 minutes on 2 cores. Needs `make data`.
set -uo pipefail
REV=${1:?usage: scripts/bit_identical.sh REV}
cd "$(dirname "$0")/.."
WORK=$(mktemp -d /tmp/bit_identical.XXXXXX)
TRAINERS="train_gpt_cpu train_gpt_cpu_bf16 train_gpt_cpu_fp16"
git worktree add -q --detach $WORK/base "$REV" || exit 1
trap 'git worktree remove --force $WORK/base; rm -rf $WORK' EXIT
make -s -C $WORK/base $TRAINERS > $WORK/build.log 2>&1 && make -s $TRAINERS >> $WORK/build.log 2>&1 ||
    { tail -n 20 $WORK/build.log; exit 1; }
export OMP_NUM_THREADS=1
COMMON="-e d2 -b 2 -t 32 -x 4 -v 2 -m 2 -s 2 -g 4 -l 1e-3 -u 1 -q 0.1 -c 0.1 -i data/tinyshakespeare_train.bin \
        -j data/tinyshakespeare_val.bin -tok data/gpt2_tokenizer.bin"
TIMINGS='s/"ms": [0-9.]+, "tok_per_s": [0-9.]+, "mfu": ([0-9.e+-]+|null)//; s/, "bubble[a-z_]*": (\[[^]]*\]|[0-9.]+)//g; s/, "time_ms": \{[^}]*\}//'  # timings, the bubble and the step's split (timed)

run_all() {  # run_all BINDIR OUT: every run, its log without timings, its step lines, its plan
    local bin=$1 out=$2 i=0
    run() {  # run NP TRAINER FLAGS...
        local np=$1 trainer=$2; shift 2; i=$((i + 1))
        local d=$out/run$i; mkdir -p $d
        timeout 600 mpirun -np $np $bin/$trainer $COMMON -o $d/out -n 2 -log $d/log.jsonl "$@" > $d/stdout.txt 2>&1 ||
            echo "run $i ($trainer $*) failed" >> $out/failures.txt
        sed -E "$TIMINGS" $d/log.jsonl > $d/log.clean
        grep -E "^(step|val|sample)" $d/stdout.txt | sed -E 's/\| [0-9.]+ ms \|.*ETA [0-9]+ s//' > $d/steps.clean
        timeout 600 mpirun -np $np $bin/$trainer $COMMON "$@" -plan 1 2>&1 | grep -v '^pipeline, ' > $d/plan.txt
    }
    run 1 train_gpt_cpu
    run 2 train_gpt_cpu -z 3 -ga fp32
    run 2 train_gpt_cpu -tp 2 -z 1 -r 2
    run 2 train_gpt_cpu -pp 2 -z 2 -d 256
    run 2 train_gpt_cpu -pp 2 -ps gpipe -z 3 -d 256 -r 3
    run 8 train_gpt_cpu -tp 2 -pp 2 -z 3 -d 512 -r 1
    run 2 train_gpt_cpu_bf16 -pp 2 -z 3 -ga fp32 -d 256
    run 1 train_gpt_cpu_fp16 -d 128
    run 2 train_gpt_cpu_bf16 -z 2
    run 4 train_gpt_cpu -tp 2 -sp 1 -pp 2 -z 1 -d 256
    local d=$out/resume; mkdir -p $d  # stop at step 2, resume to 4
    mpirun -np 2 $bin/train_gpt_cpu_bf16 $COMMON -pp 2 -z 3 -d 256 -o $d/out -n 2 -x 2 > /dev/null 2>&1
    mpirun -np 2 $bin/train_gpt_cpu_bf16 $COMMON -pp 2 -z 3 -d 256 -o $d/out -n 2 -y 1 -log $d/log.jsonl > /dev/null 2>&1
    sed -E "$TIMINGS" $d/log.jsonl > $d/log.clean
}
run_all $WORK/base $WORK/before
run_all . $WORK/after
[ -f $WORK/before/failures.txt ] || [ -f $WORK/after/failures.txt ] && { cat $WORK/*/failures.txt; exit 1; }

differ=0 files=0
for d in $WORK/before/*/; do
    name=$(basename $d)
    # .lock holds the process that ran (run_dir.h), and run.json's "run" line that process and the time
    for f in log.clean steps.clean plan.txt $(cd $d && find out -type f ! -name .lock | sort); do
        [ -f $d/$f ] || continue
        files=$((files + 1))
        same() { sed -E "s|$1||g; s|\"run\": \"process [0-9]+ on [^\"]*\"||" $2; }
        cmp -s <(same $WORK/before $d/$f) <(same $WORK/after $WORK/after/$name/$f) && continue
        echo "differs: $name/$f"; differ=$((differ + 1))
        case $f in *.clean|*.txt) diff <(sed "s|$WORK/before||g" $d/$f) <(sed "s|$WORK/after||g" $WORK/after/$name/$f) |
            head -n 4 | cut -c1-400;; esac  # the first lines that differ, to see what changed
    done
done
[ $differ -eq 0 ] && echo "IDENTICAL to $REV: $files files of 10 runs and a resume (logs, step lines, plans, checkpoints)"
exit $((differ > 0))

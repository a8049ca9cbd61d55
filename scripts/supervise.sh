#!/usr/bin/env bash
# scripts/supervise.sh [--max-restarts N] -- LAUNCH COMMAND [FLAGS...]
# Runs a training command and, when it ends by a fault, runs it again from its newest complete
# checkpoint, up to N times (default 10): llm.c's shell loop round -y 1, torchrun's --max-restarts.
#   scripts/supervise.sh --max-restarts 5 -- mpirun -np 8 ./train_gpt -e d12 -o out -n 500 -log out/log.jsonl
# The command's exit status decides:
#   0                 finished: stop
#   1                 a refusal (bad flags or files, one line on every rank): stop, retrying cannot help
#   3                 the watchdog (-timeout, watchdog.h): a rank stopped making progress: restart
#   anything else     a crash or a killed rank (the launcher's signal status, 9, 134, 137, ...): restart
# The watchdog is also known by its line ("error: watchdog: ..."), whatever the status: the launcher
# reports one rank's end, and when the watchdog's rank exits 3 while it is killing the stopped one,
# MPICH's mpiexec has been seen to return that one's signal (1, a hangup), which alone reads as a
# refusal. So the command's output (stdout and stderr, merged) passes through tee, and is read.
# A restart appends -y 1 (resume from the newest complete checkpoint in -o; bit-exact, so the run
# ends as an unbroken one would) and prints one line: the time, the cause, the step it resumes
# from, which also goes into the run's -log as {"restart": K, "cause": ..., "resume_from": STEP}.
# The command must write checkpoints (-o and -n), or there is nothing to resume from: refused.
# SIGTERM, SIGHUP or SIGINT to the supervisor (a scheduler ending the job, a closed terminal, ^C)
# end the command (SIGTERM, which mpirun passes to its ranks); the supervisor waits for it, then exits with
# 128 + the signal's number, and restarts nothing. The command is the supervisor's own child, not
# part of a pipeline, so that its exit status and its process are the ones the supervisor holds.
# What it cannot do: keep the healthy ranks alive and replace only the failed one (an in-process
# restart, as torchft does): every restart starts every rank again and re-reads the checkpoint,
# and the steps since the last checkpoint are computed again.
set -uo pipefail
MAX_RESTARTS=10
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    case "$1" in
        --max-restarts) MAX_RESTARTS=${2:-}; shift $(($# < 2 ? 1 : 2))
            [[ $MAX_RESTARTS =~ ^[0-9]+$ ]] || { echo "supervise.sh: --max-restarts expects a whole number, got '$MAX_RESTARTS'"; exit 1; } ;;
        *) echo "supervise.sh: unknown option $1 (usage: supervise.sh [--max-restarts N] -- COMMAND...)"; exit 1 ;;
    esac
done
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "usage: supervise.sh [--max-restarts N] -- COMMAND..."; exit 1; }

# the command's -o, -n and -log values (the trainer's flags take one value each)
OUT="" EVERY="" LOG="" args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; i++)); do
    case "${args[i]}" in -o) OUT=${args[i + 1]} ;; -n) EVERY=${args[i + 1]} ;; -log) LOG=${args[i + 1]} ;; esac
done
if [ -z "$OUT" ] || [ -z "$EVERY" ] || [ "$EVERY" = 0 ]; then
    echo "supervise.sh: the command writes no checkpoints (give it -o DIR and -n STEPS): a restart would have nothing to resume from"
    exit 1
fi

newest_checkpoint() {  # the newest step with a completion marker in $OUT (checkpoint.h), or 0
    local newest=0 f n
    for f in "$OUT"/complete_*; do
        [ -e "$f" ] || continue
        n=$((10#${f##*complete_}))
        [ $n -gt $newest ] && newest=$n
    done
    echo $newest
}

child=""
stop() {  # stop SIGNAL: the command gets SIGTERM (mpirun passes it to its ranks), then the supervisor ends
    echo "supervise.sh: SIG$1: ending the command (SIGTERM); not restarting"
    [ -n "$child" ] && kill -s TERM $child 2> /dev/null && wait $child
    exit $((128 + $(kill -l $1)))
}
for s in TERM HUP INT; do trap "stop $s" $s; done

restarts=0 resume=()
attempt=$(mktemp); trap 'rm -f "$attempt"' EXIT  # the last attempt's output
while :; do
    "$@" "${resume[@]}" > "$attempt" 2>&1 &  # in the background: a trapped signal interrupts the wait
    child=$!
    tail -n +1 -f --pid=$child "$attempt" &  # its output as it comes, stdout and stderr merged
    wait $child; status=$?
    wait $!  # the rest of its output
    child=""
    grep -q "^error: watchdog:" "$attempt" && [ $status -ne 0 ] && status=3
    case $status in
        0) exit 0 ;;
        1) echo "supervise.sh: the command refused its input (exit 1): not restarted"; exit 1 ;;
        3) cause="the watchdog (a rank made no progress; exit 3)" ;;
        *) cause="a crash or a killed rank (exit $status)" ;;
    esac
    if [ $restarts -ge "$MAX_RESTARTS" ]; then
        echo "supervise.sh: $cause after $restarts restarts, the most --max-restarts allows: giving up"
        exit $status
    fi
    restarts=$((restarts + 1))
    step=$(newest_checkpoint)
    echo "supervise.sh: $(date '+%Y-%m-%d %H:%M:%S') restart $restarts of $MAX_RESTARTS: $cause; resuming from step $step"
    [ -n "$LOG" ] && printf '{"restart": %d, "cause": "%s", "resume_from": %d}\n' $restarts "$cause" $step >> "$LOG"
    resume=(-y 1)
done

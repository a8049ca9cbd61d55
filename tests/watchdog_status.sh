# tests/watchdog_status.sh: sourced by tests/test_faults.sh and tests/test_emu.sh. Whether a job the
# watchdog ended (watchdog.h) exited as it should. Its rank exits WATCHDOG_EXIT_CODE (3), and
# MPICH's mpiexec then kills the stopped rank; it reports one rank's end, usually the first, but it
# has been seen to return the killed one's signal instead (9 here, once in about 60 runs of
# test_emu.sh's case; 1, a hangup: scripts/supervise.sh), and then says so in one line:
#     YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)
# That is the launcher's report, not the trainer's: it passes when the line names the same signal
# as the exit code. The watchdog's own line is checked apart, by each test.
watchdog_status_ok() {  # watchdog_status_ok CODE FILE: the job's exit code and its merged output
    [ "$1" -eq 3 ] || { [ "$1" -ne 0 ] && [ "$1" -ne 124 ] &&
        grep -Eq "^YOUR APPLICATION TERMINATED WITH THE EXIT STRING: .*\(signal $1\)$" "$2"; }
}

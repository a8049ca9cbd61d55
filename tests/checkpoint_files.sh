# tests/checkpoint_files.sh: sourced by tests/run_tests.sh and tests/run_mutants.sh. A run's
# step-numbered files under -o (checkpoint.h's names: model_%08d.bin, optimizer_%08d.bin,
# state_%08d_%05d.bin, each .tmp while it is written) are GBs over the suite, and a check that
# passed has no more use for them: they go, its logs stay.
drop_checkpoints() {  # drop_checkpoints DIR [PATH_PATTERN_KEPT [FILE]]: deletes those files under DIR,
                      # with FILE only those not newer than it
    # -ignore_readdir_race: two checks that end together both drop, and a starting check may clear its
    # directory; a file gone before find reaches it is no error (CI's log once had 16 such lines)
    find "$1" -ignore_readdir_race -type f ${2:+-not -path "$2"} ${3:+-not -newer "$3"} -regextype posix-extended \
        -regex '.*/(model|optimizer|state)_[0-9]+(_[0-9]+)?\.bin(\.tmp)?' -delete
}

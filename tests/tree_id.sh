# tests/tree_id.sh: sourced by tests/run_tests.sh and tests/run_mutants.sh. One line naming what the
# working tree holds (its commit, the changes to it, the untracked files' contents; not what git
# ignores: build outputs, data), for make test-mutants to reuse a make test run only on the same tree.
# Outside a git clone: a line never printed twice (so nothing is reused).
tree_id() {
    git rev-parse -q --verify HEAD > /dev/null 2>&1 || { echo "no git: $$ $RANDOM $RANDOM $(date +%s%N)"; return; }
    { git rev-parse HEAD; git diff HEAD --binary; git ls-files -o --exclude-standard -z | xargs -0 -r sha256sum; } \
        | sha256sum | cut -d' ' -f1
}

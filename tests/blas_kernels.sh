# tests/blas_kernels.sh (sourced by tests/run_tests.sh and tests/run_mutants.sh): OpenBLAS's kernels
# for every program the suite runs. Debian 12's OpenBLAS falls back to its Prescott kernels (SSE3) on
# CPUs it does not know, this project's Xeons among them: sgemm 5x slower than its SkylakeX kernels.
# The trainer names the kernels itself (kernels/common.cuh: cpu_name_blas_kernels, tested in
# tests/test_zero.sh); the test programs and the emulated build's cuBLAS (OpenBLAS underneath) read
# OPENBLAS_CORETYPE, set here from the CPU's flags unless the environment set it.
if [ -z "${OPENBLAS_CORETYPE+set}" ]; then
    cpu_flags=" $(grep -m 1 '^flags' /proc/cpuinfo 2> /dev/null | cut -d: -f2) "
    has() { for f in "$@"; do [[ $cpu_flags == *" $f "* ]] || return 1; done; }
    if has avx512f avx512bw avx512dq avx512vl avx512cd; then export OPENBLAS_CORETYPE=SkylakeX
    elif has avx2 fma; then export OPENBLAS_CORETYPE=Haswell; fi
    unset -f has; unset cpu_flags
fi

#!/usr/bin/env bash
# The Makefile on machines unlike this one (make -n: what it would run):
#  - a GPU machine without OpenBLAS and PCRE2 (HAVE_OPENBLAS= HAVE_PCRE2= stand for their absence):
#    `make` builds train_gpt first, builds no CPU trainer, and says in one line each what it skipped;
#  - MPI that pkg-config does not know (PKG_CONFIG_LIBDIR=/nonexistent): the CUDA build takes its MPI
#    flags from the compiler wrapper (mpicxx -show for MPICH, --showme for Open MPI);
#  - make test-gpu on a GPU machine without Catch2 (HAVE_CATCH2=): it builds no Catch2 test, says
#    so, and hands the suite the compute-sanitizer that sits beside nvcc.
set -euo pipefail
# grep reads $out from a here-string, not from `echo "$out" |`: under pipefail, grep -q's early exit
# makes echo die of SIGPIPE, and the pipeline's status turns a match into a miss
out=$(make -n -B all NVCC=fake-nvcc HAVE_OPENBLAS= HAVE_PCRE2= 2>&1)  # -B: as on a fresh clone
first=$(grep -m1 -E "^(fake-nvcc|mpicxx|g\+\+)" <<< "$out" || true)
[[ $first == fake-nvcc*"-o train_gpt" ]] || { echo "FAIL: the first build command is not train_gpt's: $first"; exit 1; }
if grep -q -- "-o train_gpt_cpu" <<< "$out"; then echo "FAIL: a CPU trainer would be built without OpenBLAS"; exit 1; fi
grep -q "make: skipped the CPU trainers: no cblas.h here" <<< "$out" && grep -q "make: skipped tokenize and data/: no pcre2.h here" <<< "$out" \
    || { echo "FAIL: no line saying what was skipped"; echo "$out"; exit 1; }
echo "ok: without OpenBLAS and PCRE2, make builds train_gpt first and skips the CPU targets, saying why"
flags=$(PKG_CONFIG_LIBDIR=/nonexistent make -s print-mpi)
[[ $flags == *"MPI_CFLAGS=-I"* && $flags == *"-lmpi"* ]] || { echo "FAIL: no MPI flags without pkg-config: $flags"; exit 1; }
echo "ok: without pkg-config's MPI: $flags"
fake=$(mktemp -d); trap 'rm -rf $fake' EXIT
mkdir -p $fake/bin && touch $fake/bin/nvcc $fake/bin/compute-sanitizer && chmod +x $fake/bin/*
out=$(make -n -B test-gpu NVCC=$fake/bin/nvcc HAVE_CATCH2= 2>&1)
if grep -q "catch_main\|test_gpt2_gpu.o" <<< "$out"; then echo "FAIL: make test-gpu builds a Catch2 test without Catch2"; exit 1; fi
grep -q "make test-gpu: no Catch2 here" <<< "$out" && grep -q "COMPUTE_SANITIZER=$fake/bin/compute-sanitizer bash tests/run_tests_gpu.sh" <<< "$out" \
    || { echo "FAIL: make test-gpu without Catch2, compute-sanitizer beside nvcc"; echo "$out" | tail -3; exit 1; }
echo "ok: make test-gpu without Catch2 skips test_gpt2_gpu, saying so; compute-sanitizer found beside nvcc"

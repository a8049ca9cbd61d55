#!/usr/bin/env bash
# The Debian/Ubuntu packages this project builds and tests with, in one place: the README's
# dependency line and CI (.ci/run) both run this script.
#   build:  make g++ pkg-config, MPI (mpich), OpenBLAS built for OpenMP (the CPU trainers' GEMMs
#           run on their OpenMP threads; see the Makefile), PCRE2 and nlohmann-json (the tokenizer;
#           the trainer's -o/run.json)
#   tests:  Catch2, PyTorch and numpy (float64 references), regex (GPT-2's encoder reference), time,
#           strace (the order of a checkpoint's fsyncs and renames: tests/test_run_dir.sh)
#   plots:  matplotlib (scripts/plot_log.py)
#   PyPI, for what Debian lacks (pinned): Hugging Face transformers (tests/test_convert_hf.py loads
#           ./convert_hf's export with its own GPT2LMHeadModel; 4.44 runs on Debian's torch 1.13) and
#           tiktoken (the tokenizer's second reference), into the system's python3 beside its torch
# The CUDA toolkit and NCCL, for `make train_gpt`, are not Debian packages here: install them
# from NVIDIA.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
    make g++ pkg-config mpich libmpich-dev libopenblas-openmp-dev libpcre2-dev nlohmann-json3-dev zlib1g-dev \
    catch2 python3-torch python3-numpy python3-regex time python3-matplotlib strace > /dev/null
/usr/bin/python3 -m pip install -q --break-system-packages --no-cache-dir --root-user-action=ignore \
    transformers==4.44.2 tiktoken==0.8.0

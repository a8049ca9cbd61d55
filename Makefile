# GPT-2 trainer: one source (train_gpt.cu), two builds. `make help` lists the targets.
#
#   make                    builds what this machine can: train_gpt_cpu, and train_gpt where nvcc exists
#   make train_gpt          CUDA build (nvcc, cuBLAS, NCCL, MPI); GPU_ARCH=90 by default (sm_90 + PTX)
#   make train_gpt_cpu      CPU build (g++ via mpicxx, OpenMP, OpenBLAS, MPI)
#   make test               the whole CPU test suite (what CI runs)
#   make test-gpu           the GPU build against the PyTorch reference (needs a GPU)

PRECISION ?= FP32
GPU_ARCH ?= 90
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
MPICXX ?= mpicxx
PYTHON ?= /usr/bin/python3

# MPI for nvcc: flags from the environment (the device bundle sets them) or from pkg-config
MPI_CFLAGS ?= $(shell pkg-config --cflags mpich 2>/dev/null || pkg-config --cflags ompi 2>/dev/null)
MPI_LDFLAGS ?= $(shell pkg-config --libs-only-L --libs-only-l mpich 2>/dev/null || pkg-config --libs-only-L --libs-only-l ompi 2>/dev/null)
NCCL_CFLAGS ?=
NCCL_LDFLAGS ?= -lnccl

ifeq ($(PRECISION),BF16)
  PRECISION_FLAGS = -DENABLE_BF16
else ifeq ($(PRECISION),FP16)
  PRECISION_FLAGS = -DENABLE_FP16
else ifeq ($(PRECISION),FP32)
  PRECISION_FLAGS =
else
  $(error PRECISION must be FP32, BF16 or FP16)
endif

CXXFLAGS = -O2 -std=c++17 -fopenmp -Wall -Wno-unknown-pragmas $(PRECISION_FLAGS)
CPU_LIBS = -lopenblas -lm
NVCC_FLAGS = -O3 -std=c++17 -gencode arch=compute_$(GPU_ARCH),code=[sm_$(GPU_ARCH),compute_$(GPU_ARCH)] \
             $(PRECISION_FLAGS) $(MPI_CFLAGS) $(NCCL_CFLAGS)
NVCC_LIBS = -lcublas $(NCCL_LDFLAGS) $(MPI_LDFLAGS)

HEADERS = $(wildcard *.h kernels/*.cuh)
CATCH_MAIN = tests/build/catch_main.o

ifneq ($(NVCC),)
all: train_gpt_cpu train_gpt
else
all: train_gpt_cpu
	@echo "nvcc not found: built the CPU trainer only"
endif

train_gpt_cpu: train_gpt.cu $(HEADERS)
	$(MPICXX) $(CXXFLAGS) -x c++ $< -x none $(CPU_LIBS) -o $@

train_gpt: train_gpt.cu $(HEADERS)
	$(NVCC) $(NVCC_FLAGS) $< $(NVCC_LIBS) -o $@

# ---------------------------------------------------------------- tests
$(CATCH_MAIN): tests/catch_main.cpp
	@mkdir -p tests/build
	$(MPICXX) -O1 -std=c++17 -c $< -o $@

tests/build/test_kernels: tests/test_kernels.cpp $(HEADERS) $(CATCH_MAIN)
	$(MPICXX) $(CXXFLAGS) $< $(CATCH_MAIN) $(CPU_LIBS) -o $@

tests/build/test_gpt2: tests/test_gpt2.cpp train_gpt.cu $(HEADERS) $(CATCH_MAIN)
	$(MPICXX) $(CXXFLAGS) $< $(CATCH_MAIN) $(CPU_LIBS) -o $@

test: train_gpt_cpu tests/build/test_kernels tests/build/test_gpt2
	PYTHON=$(PYTHON) bash tests/run_tests.sh

test-gpu: train_gpt
	PYTHON=$(PYTHON) TRAINER=./train_gpt bash tests/run_tests_gpu.sh

help:
	@echo "targets:"
	@echo "  make                 build train_gpt_cpu, and train_gpt where nvcc exists"
	@echo "  make train_gpt       CUDA build; GPU_ARCH=$(GPU_ARCH) (sm_XX + PTX), PRECISION=$(PRECISION)"
	@echo "  make train_gpt_cpu   CPU build (OpenMP, OpenBLAS, MPI)"
	@echo "  make test            the CPU test suite: kernels, PyTorch reference, trajectories, bad input"
	@echo "  make test-gpu        train_gpt against the PyTorch reference (needs a GPU)"
	@echo "  make clean           remove build outputs"
	@echo "variables: PRECISION=FP32 (BF16/FP16 arrive with mixed precision), GPU_ARCH, NVCC, MPICXX, PYTHON,"
	@echo "           MPI_CFLAGS, MPI_LDFLAGS, NCCL_CFLAGS, NCCL_LDFLAGS"

clean:
	rm -rf train_gpt train_gpt_cpu tests/build

.PHONY: all test test-gpu help clean

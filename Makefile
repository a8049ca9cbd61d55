# GPT-2 trainer: one source (train_gpt.cu), two builds. `make help` lists the targets.
#
#   make                    builds what this machine can: the CPU trainers, and train_gpt where nvcc exists;
#                           prepares data/ (tinyshakespeare) when it is missing
#   make train_gpt          CUDA build (nvcc, cuBLAS, NCCL, MPI), PRECISION=BF16 by default; GPU_ARCH=90 (sm_90 + PTX)
#   make train_gpt_cpu      CPU build (g++ via mpicxx, OpenMP, OpenBLAS, MPI), FP32;
#                           train_gpt_cpu_bf16 and train_gpt_cpu_fp16 store bf16 / fp16 exactly as the GPU does
#   make test               the whole CPU test suite (what CI runs)
#   make test-mutants       deliberate bugs that make test's checks must catch (tests/mutants/)
#   make test-gpu           the GPU build against the PyTorch reference (needs a GPU)

PRECISION ?= BF16
GPU_ARCH ?= 90
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
MPICXX ?= mpicxx
CXX = g++
PYTHON ?= /usr/bin/python3
# the GPU suite's interpreter: the first that can import torch (on a GPU machine PyTorch is
# usually the python3 on PATH, here Debian's /usr/bin/python3)
GPU_PYTHON ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import torch' > /dev/null 2>&1 && echo $$p && break; done)

# MPI for nvcc: flags from the environment (the device bundle sets them), from pkg-config, or else
# from the MPI compiler wrapper itself (MPICH's mpicxx -show, Open MPI's --showme)
MPI_PKG := $(firstword $(foreach p,mpich ompi,$(shell pkg-config --exists $(p) 2>/dev/null && echo $(p))))
ifneq ($(MPI_PKG),)
  MPI_CFLAGS ?= $(shell pkg-config --cflags $(MPI_PKG))
  MPI_LDFLAGS ?= $(shell pkg-config --libs-only-L --libs-only-l $(MPI_PKG))
else
  MPI_SHOW := $(shell $(MPICXX) -show 2>/dev/null || $(MPICXX) --showme 2>/dev/null)
  MPI_CFLAGS ?= $(filter -I% -D%,$(MPI_SHOW))
  MPI_LDFLAGS ?= $(filter -L% -l% -Wl%,$(MPI_SHOW))
endif
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

CXXFLAGS = -O3 -fno-math-errno -std=c++17 -fopenmp -Wall -Wno-unknown-pragmas
# OpenBLAS built for OpenMP (Debian's libopenblas-openmp-dev) runs its GEMMs on the trainer's own
# OpenMP threads. The pthread build (the default libopenblas.so) keeps a second set of threads that
# fight OpenMP's spinning ones for the cores: a GPT-2 124M step on 2 cores took 2.8 s instead of 1.55 s.
MULTIARCH := $(shell gcc -print-multiarch 2>/dev/null)
OPENBLAS_OPENMP ?= /usr/lib/$(MULTIARCH)/openblas-openmp
ifneq ($(wildcard $(OPENBLAS_OPENMP)/libopenblas.so),)
  CXXFLAGS += $(addprefix -I,$(wildcard /usr/include/$(MULTIARCH)/openblas-openmp))
  CPU_LIBS = -L$(OPENBLAS_OPENMP) -Wl,-rpath,$(OPENBLAS_OPENMP) -lopenblas -lm
else
  CPU_LIBS = -lopenblas -lm
endif
# glibc's vector math (libmvec, x86-64): expf and tanhf on SIMD lanes (kernels/common.cuh)
ifneq ($(wildcard /usr/lib/$(MULTIARCH)/libmvec.so),)
  CXXFLAGS += -DUSE_LIBMVEC
  CPU_LIBS += -lmvec
endif
NVCC_FLAGS = -O3 -std=c++17 -gencode arch=compute_$(GPU_ARCH),code=[sm_$(GPU_ARCH),compute_$(GPU_ARCH)] \
             $(MPI_CFLAGS) $(NCCL_CFLAGS)
# make DEBUG=1: every kernel launch waits for the kernel, so a fault is reported where it happened
ifeq ($(DEBUG),1)
  NVCC_FLAGS += -DDEBUG_SYNC -lineinfo
endif
NVCC_LIBS = -lcublas -lcublasLt $(NCCL_LDFLAGS) $(MPI_LDFLAGS)

HEADERS = $(wildcard *.h kernels/*.cuh tokenizer/*.h)
CATCH_MAIN = tests/build/catch_main.o
# Catch2 from the system, or from .device/include on a GPU machine without Debian's packages
CATCH_CFLAGS = $(if $(wildcard .device/include/catch2/catch.hpp),-I.device/include)

CPU_TRAINERS = train_gpt_cpu train_gpt_cpu_bf16 train_gpt_cpu_fp16
# `make` also prepares the default data (tinyshakespeare and the decode table) when it is missing
DEFAULT_DATA = data/tinyshakespeare_train.bin
# `make` builds what this machine has the libraries for, the GPU trainer first: a GPU machine
# without OpenBLAS or PCRE2 still gets train_gpt, and one line says what was skipped and why
HAVE_MPICXX := $(shell command -v $(MPICXX) > /dev/null 2>&1 && echo yes)
HAVE_OPENBLAS := $(shell printf '\043include <cblas.h>\n' | $(CXX) $(filter -I%,$(CXXFLAGS)) -E -x c++ - > /dev/null 2>&1 && echo yes)
HAVE_PCRE2 := $(shell printf '\043define PCRE2_CODE_UNIT_WIDTH 8\n\043include <pcre2.h>\n' | $(CXX) -E -x c++ - > /dev/null 2>&1 && echo yes)
BUILDABLE = $(if $(NVCC),$(if $(HAVE_MPICXX),train_gpt)) $(if $(HAVE_MPICXX),$(if $(HAVE_OPENBLAS),$(CPU_TRAINERS))) \
            $(if $(HAVE_PCRE2),tokenize $(DEFAULT_DATA)) convert_hf
all: $(BUILDABLE)
	@$(if $(NVCC),,echo "make: skipped train_gpt: no nvcc here (the CUDA toolkit); built the CPU trainers";) true
	@$(if $(HAVE_MPICXX),,echo "make: skipped the trainers: no $(MPICXX) here (MPI: scripts/install_deps.sh installs MPICH)";) true
	@$(if $(HAVE_OPENBLAS),,echo "make: skipped the CPU trainers: no cblas.h here (OpenBLAS: libopenblas-openmp-dev)";) true
	@$(if $(HAVE_PCRE2),,echo "make: skipped tokenize and data/: no pcre2.h here (PCRE2: libpcre2-dev)";) true
$(DEFAULT_DATA): | tokenize
	$(MAKE) data

train_gpt_cpu: train_gpt.cu $(HEADERS)
	$(MPICXX) $(CXXFLAGS) -x c++ $< -x none $(CPU_LIBS) -o $@
train_gpt_cpu_bf16: train_gpt.cu $(HEADERS)
	$(MPICXX) $(CXXFLAGS) -DENABLE_BF16 -x c++ $< -x none $(CPU_LIBS) -o $@
train_gpt_cpu_fp16: train_gpt.cu $(HEADERS)
	$(MPICXX) $(CXXFLAGS) -DENABLE_FP16 -x c++ $< -x none $(CPU_LIBS) -o $@
# the fp32 CPU trainer under AddressSanitizer, for make test's checks of reads past an array (the data
# loader's resume cases: tests/test_faults.sh)
tests/build/train_gpt_cpu_asan: train_gpt.cu $(HEADERS)
	@mkdir -p $(@D)
	$(MPICXX) $(subst -O3,-O1 -g -fsanitize=address -fno-omit-frame-pointer,$(CXXFLAGS)) -x c++ $< -x none $(CPU_LIBS) -o $@

# the GPT-2 tokenizer and data preparation (PCRE2); needs neither MPI nor CUDA
tokenize: tokenizer/tokenize.cpp tokenizer/tokenizer.h tokenizer/decoder.h base.h precision.h hellaswag.h
	$(CXX) -O2 -std=c++17 -Wall $< -lpcre2-8 -lz -pthread -o $@

# GPT-2 weights between Hugging Face's safetensors and llm.c's model file (nlohmann-json)
convert_hf: convert_hf.cpp base.h precision.h
	$(CXX) -O2 -std=c++17 -Wall $< -o $@

# tinyshakespeare as llm.c prepares it: EOT before each blank-line block, the first
# 32,768 tokens are val; plus the decode table for samples. Files come from ../shared
# when present, else they are downloaded (scripts/download_data.sh).
data: tokenize
	bash scripts/download_data.sh
	./tokenize shards -o data/tinyshakespeare --val-tokens 32768 --split-on-blank-lines data/tinyshakespeare.txt
	./tokenize decoder -o data/gpt2_tokenizer.bin

# the precision is part of the build: a stamp file makes a PRECISION change rebuild train_gpt
.precision-$(PRECISION):
	@rm -f .precision-*; touch $@
train_gpt: train_gpt.cu $(HEADERS) .precision-$(PRECISION)
	$(NVCC) $(NVCC_FLAGS) $(PRECISION_FLAGS) $< $(NVCC_LIBS) -o $@
# fixed-precision GPU builds for the GPU tests
train_gpt_fp32: train_gpt.cu $(HEADERS)
	$(NVCC) $(NVCC_FLAGS) $< $(NVCC_LIBS) -o $@
train_gpt_fp16: train_gpt.cu $(HEADERS)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP16 $< $(NVCC_LIBS) -o $@

# ---------------------------------------------------------------- dev/: kernel labs (nvcc)
LABS = $(patsubst %.cu,%,$(wildcard dev/*.cu))
ifneq ($(NVCC),)
dev: $(LABS)
else
dev:
	@echo "make dev: no nvcc here (the labs are CUDA programs)"; exit 1
endif
dev/%: dev/%.cu dev/lab.h dev/pytorch_ref.h $(HEADERS) .precision-$(PRECISION)
	$(NVCC) $(NVCC_FLAGS) $(PRECISION_FLAGS) -Xcompiler -fopenmp $< -lcublas -lcublasLt -lgomp -o $@
# the labs in fp32 too (checked against float64 at 1e-5), for make test-gpu
dev-fp32: $(patsubst dev/%,dev/fp32/%,$(LABS))
dev/fp32/%: dev/%.cu dev/lab.h dev/pytorch_ref.h $(HEADERS)
	@mkdir -p dev/fp32
	$(NVCC) $(NVCC_FLAGS) -Xcompiler -fopenmp $< -lcublas -lcublasLt -lgomp -o $@

# ---------------------------------------------------------------- the emulated CUDA build (tests/emu/)
# The CUDA build's own sources compiled by g++ against an emulation of CUDA, cuBLAS(Lt) and NCCL
# (tests/emu/cuda_emu.h), so that make test runs the GPU-only code on a machine without a GPU.
# Each source is copied into $(EMU_DIR)/src with its kernel launches rewritten (tests/emu/
# rewrite_launches.pl) and a #line naming the original file; nothing else changes.
EMU_DIR = tests/build/emu
EMU_SOURCES = $(wildcard *.h *.cu kernels/*.cuh tokenizer/*.h dev/*.cu dev/*.h tests/*.cpp tests/*.cu)
EMU_MIRROR = $(addprefix $(EMU_DIR)/src/,$(EMU_SOURCES))
EMU_CFLAGS = -O2 -std=c++17 -fopenmp -Wall -Wno-unknown-pragmas -D__CUDACC__ -Itests/emu -include tests/emu/cuda_runtime.h
EMU_LIB = $(EMU_DIR)/cuda_emu.o $(EMU_DIR)/cublas_emu.o
EMU_TRAINERS = train_gpt_emu train_gpt_emu_fp32 train_gpt_emu_fp16
EMU_LABS = $(patsubst dev/%.cu,$(EMU_DIR)/dev/%,$(wildcard dev/*.cu))
$(EMU_MIRROR): $(EMU_DIR)/src/%: % tests/emu/rewrite_launches.pl
	@mkdir -p $(@D)
	@{ echo '#line 1 "$<"'; perl -p tests/emu/rewrite_launches.pl $<; } > $@
$(EMU_DIR)/%.o: tests/emu/%.cpp $(wildcard tests/emu/*.h)
	@mkdir -p $(@D)
	$(MPICXX) -O2 -std=c++17 -fopenmp -Wall $(filter -I%,$(CXXFLAGS)) -c $< -o $@
# the emulator for a program built with -fsanitize=thread: itself not instrumented (tests/emu/cuda_emu.cpp)
$(EMU_DIR)/tsan/cuda_emu.o: tests/emu/cuda_emu.cpp $(wildcard tests/emu/*.h)
	@mkdir -p $(@D)
	$(MPICXX) -O2 -std=c++17 -DCUDA_EMU_TSAN=1 -Wall -c $< -o $@
train_gpt_emu: $(EMU_MIRROR) $(EMU_LIB) $(EMU_DIR)/nccl_emu.o
	$(MPICXX) $(EMU_CFLAGS) -DENABLE_BF16 -x c++ $(EMU_DIR)/src/train_gpt.cu -x none $(EMU_LIB) $(EMU_DIR)/nccl_emu.o $(CPU_LIBS) -o $@
train_gpt_emu_fp32: $(EMU_MIRROR) $(EMU_LIB) $(EMU_DIR)/nccl_emu.o
	$(MPICXX) $(EMU_CFLAGS) -x c++ $(EMU_DIR)/src/train_gpt.cu -x none $(EMU_LIB) $(EMU_DIR)/nccl_emu.o $(CPU_LIBS) -o $@
train_gpt_emu_fp16: $(EMU_MIRROR) $(EMU_LIB) $(EMU_DIR)/nccl_emu.o
	$(MPICXX) $(EMU_CFLAGS) -DENABLE_FP16 -x c++ $(EMU_DIR)/src/train_gpt.cu -x none $(EMU_LIB) $(EMU_DIR)/nccl_emu.o $(CPU_LIBS) -o $@
# the labs in bf16, the precision they time on a GPU
$(EMU_DIR)/dev/%: $(EMU_MIRROR) $(EMU_LIB)
	@mkdir -p $(@D)
	$(MPICXX) $(EMU_CFLAGS) -DENABLE_BF16 -x c++ $(EMU_DIR)/src/dev/$*.cu -x none $(EMU_LIB) $(CPU_LIBS) -o $@
$(EMU_DIR)/test_emu_kernels_fp32: $(EMU_MIRROR) $(EMU_LIB)
	$(MPICXX) $(EMU_CFLAGS) -x c++ $(EMU_DIR)/src/tests/test_emu_kernels.cpp -x none $(EMU_LIB) $(CPU_LIBS) -o $@
$(EMU_DIR)/test_emu_kernels_bf16: $(EMU_MIRROR) $(EMU_LIB)
	$(MPICXX) $(EMU_CFLAGS) -DENABLE_BF16 -x c++ $(EMU_DIR)/src/tests/test_emu_kernels.cpp -x none $(EMU_LIB) $(CPU_LIBS) -o $@
$(EMU_DIR)/test_emu_kernels_fp16: $(EMU_MIRROR) $(EMU_LIB)
	$(MPICXX) $(EMU_CFLAGS) -DENABLE_FP16 -x c++ $(EMU_DIR)/src/tests/test_emu_kernels.cpp -x none $(EMU_LIB) $(CPU_LIBS) -o $@
$(EMU_DIR)/test_emu_contract: $(EMU_MIRROR) $(EMU_LIB) $(EMU_DIR)/nccl_emu.o
	$(MPICXX) $(EMU_CFLAGS) -x c++ $(EMU_DIR)/src/tests/test_emu_contract.cu -x none $(EMU_LIB) $(EMU_DIR)/nccl_emu.o $(CPU_LIBS) -o $@
# the same under ThreadSanitizer: a missing __syncthreads is a data race (compute-sanitizer's racecheck)
$(EMU_DIR)/tsan/test_emu_contract: $(EMU_MIRROR) $(EMU_DIR)/tsan/cuda_emu.o $(EMU_DIR)/cublas_emu.o $(EMU_DIR)/nccl_emu.o
	$(MPICXX) $(subst -O2 ,-O1 -g ,$(subst -fopenmp,-fsanitize=thread,$(EMU_CFLAGS))) -x c++ $(EMU_DIR)/src/tests/test_emu_contract.cu -x none \
	    $(EMU_DIR)/tsan/cuda_emu.o $(EMU_DIR)/cublas_emu.o $(EMU_DIR)/nccl_emu.o $(CPU_LIBS) -o $@
$(EMU_DIR)/tsan/test_emu_kernels_bf16: $(EMU_MIRROR) $(EMU_DIR)/tsan/cuda_emu.o $(EMU_DIR)/cublas_emu.o
	$(MPICXX) $(subst -O2 ,-O1 -g ,$(subst -fopenmp,-fsanitize=thread,$(EMU_CFLAGS))) -DENABLE_BF16 -x c++ $(EMU_DIR)/src/tests/test_emu_kernels.cpp -x none \
	    $(EMU_DIR)/tsan/cuda_emu.o $(EMU_DIR)/cublas_emu.o $(CPU_LIBS) -o $@
emu: $(EMU_TRAINERS) $(EMU_LABS) $(EMU_DIR)/test_emu_kernels_fp32 $(EMU_DIR)/test_emu_kernels_bf16 $(EMU_DIR)/test_emu_kernels_fp16 \
     $(EMU_DIR)/test_emu_contract $(EMU_DIR)/tsan/test_emu_contract $(EMU_DIR)/tsan/test_emu_kernels_bf16

# ---------------------------------------------------------------- tests
$(CATCH_MAIN): tests/catch_main.cpp
	@mkdir -p tests/build
	$(CXX) -O1 -std=c++17 $(CATCH_CFLAGS) -c $< -o $@

tests/build/test_kernels: tests/test_kernels.cpp $(HEADERS) $(CATCH_MAIN)
	$(MPICXX) $(CXXFLAGS) $< $(CATCH_MAIN) $(CPU_LIBS) -o $@

tests/build/test_gpt2: tests/test_gpt2.cpp train_gpt.cu $(HEADERS) $(CATCH_MAIN)
	$(MPICXX) $(CXXFLAGS) $< $(CATCH_MAIN) $(CPU_LIBS) -o $@

# the same test built by nvcc for make test-gpu (fp32, no TF32)
tests/build/test_gpt2_gpu: tests/test_gpt2.cpp train_gpt.cu $(HEADERS) $(CATCH_MAIN)
	$(NVCC) $(NVCC_FLAGS) $(CATCH_CFLAGS) -x cu -c $< -o $@.o
	$(NVCC) $(NVCC_FLAGS) $@.o $(CATCH_MAIN) $(NVCC_LIBS) -o $@

tests/build/test_precision_bf16: tests/test_precision.cpp $(HEADERS) $(CATCH_MAIN)
	$(MPICXX) $(CXXFLAGS) -DENABLE_BF16 $< $(CATCH_MAIN) $(CPU_LIBS) -o $@
tests/build/test_precision_fp16: tests/test_precision.cpp $(HEADERS) $(CATCH_MAIN)
	$(MPICXX) $(CXXFLAGS) -DENABLE_FP16 $< $(CATCH_MAIN) $(CPU_LIBS) -o $@

tests/build/test_comm: tests/test_comm.cpp comm.h process_grid.h base.h precision.h
	@mkdir -p tests/build
	$(MPICXX) $(CXXFLAGS) $< -o $@
# pipeline.h's executor over MPI, every schedule, on a stage whose math is known
tests/build/test_run_schedule: tests/test_run_schedule.cpp pipeline.h pipeline_run.h pipeline_links.h comm.h process_grid.h base.h precision.h
	@mkdir -p tests/build
	$(MPICXX) $(CXXFLAGS) $< -o $@

# tensor parallelism's pieces under mpirun: the vocabulary-parallel loss, sharded layers
tests/build/test_tp: tests/test_tp.cpp tests/rank_checks.h $(HEADERS)
	@mkdir -p tests/build
	$(MPICXX) $(CXXFLAGS) $< $(CPU_LIBS) -o $@

# context parallelism's ring attention under mpirun against one rank's attention
tests/build/test_cp: tests/test_cp.cpp tests/rank_checks.h $(HEADERS)
	@mkdir -p tests/build
	$(MPICXX) $(CXXFLAGS) $< $(CPU_LIBS) -o $@

tests/build/test_pipeline: tests/test_pipeline.cpp $(HEADERS) $(CATCH_MAIN)
	$(MPICXX) -O2 -std=c++17 -Wall $< $(CATCH_MAIN) -o $@

# every op's host twin against PyTorch (dev/pytorch_ref.py's files), in fp32 and in bf16
tests/build/test_ops_vs_pytorch_fp32: tests/test_ops_vs_pytorch.cpp dev/pytorch_ref.h $(HEADERS)
	@mkdir -p tests/build
	$(MPICXX) $(CXXFLAGS) $< $(CPU_LIBS) -o $@
tests/build/test_ops_vs_pytorch_bf16: tests/test_ops_vs_pytorch.cpp dev/pytorch_ref.h $(HEADERS)
	@mkdir -p tests/build
	$(MPICXX) $(CXXFLAGS) -DENABLE_BF16 $< $(CPU_LIBS) -o $@

tests/build/test_tokenizer: tests/test_tokenizer.cpp tokenizer/tokenizer.h tokenizer/decoder.h base.h $(CATCH_MAIN)
	$(CXX) -O2 -std=c++17 -Wall $< $(CATCH_MAIN) -lpcre2-8 -o $@

TEST_BINARIES = tests/build/test_ops_vs_pytorch_fp32 tests/build/test_ops_vs_pytorch_bf16 tests/build/test_tokenizer tests/build/test_comm tests/build/test_tp tests/build/test_cp tests/build/test_pipeline tests/build/test_run_schedule tests/build/test_kernels tests/build/test_gpt2 tests/build/test_precision_bf16 tests/build/test_precision_fp16 tests/build/train_gpt_cpu_asan
# train_gpt too where nvcc exists: the suite's no-GPU check runs the CUDA build it needs, with or
# without a prior make
test-binaries: $(TEST_BINARIES)
test: $(CPU_TRAINERS) convert_hf data $(TEST_BINARIES) emu $(filter train_gpt,$(BUILDABLE))
	PYTHON=$(PYTHON) bash tests/run_tests.sh

# a learner's first result (docs/shakespeare.md)
shakespeare: train_gpt_cpu data
	PYTHON=$(PYTHON) bash scripts/shakespeare.sh

# deliberate bugs (tests/mutants/), each of which a check of make test must catch; after make test,
# whose binaries and references the mutants' copies of the tree start from (MUTANTS="a b": just those)
test-mutants: $(CPU_TRAINERS) convert_hf data $(TEST_BINARIES) emu
	PYTHON=$(PYTHON) bash tests/run_mutants.sh $(MUTANTS)

# needs data/ (make data, here or where ../shared is, then carried): nothing here rebuilds it
# what it can without Catch2 (the suite says what it skipped); compute-sanitizer from PATH or beside nvcc
HAVE_CATCH2 := $(shell printf '\043include <catch2/catch.hpp>\n' | $(CXX) $(CATCH_CFLAGS) -E -x c++ - > /dev/null 2>&1 && echo yes)
COMPUTE_SANITIZER ?= $(firstword $(shell command -v compute-sanitizer 2> /dev/null; ls $(dir $(NVCC))compute-sanitizer $(dir $(NVCC))../compute-sanitizer/compute-sanitizer 2> /dev/null))
test-gpu: train_gpt train_gpt_fp32 train_gpt_fp16 $(if $(HAVE_CATCH2),tests/build/test_gpt2_gpu) dev dev-fp32
	@[ -n "$(GPU_PYTHON)" ] || { echo "make test-gpu: no python3 here can import torch (set GPU_PYTHON=...)"; exit 1; }
	@$(if $(HAVE_CATCH2),,echo "make test-gpu: no Catch2 here: tests/build/test_gpt2_gpu is not built, its check is skipped";) true
	PYTHON=$(GPU_PYTHON) COMPUTE_SANITIZER=$(COMPUTE_SANITIZER) bash tests/run_tests_gpu.sh

print-nvcc:
	@echo $(NVCC)
# the MPI flags the CUDA build compiles and links with (pkg-config, or the mpicxx wrapper's)
print-mpi:
	@echo "MPI_CFLAGS=$(MPI_CFLAGS) MPI_LDFLAGS=$(MPI_LDFLAGS)"

# the OpenBLAS directory the CPU builds link (empty: the system default), for scripts/bench_cpu.sh
print-openblas-dir:
	@echo $(if $(wildcard $(OPENBLAS_OPENMP)/libopenblas.so),$(OPENBLAS_OPENMP))

help:
	@echo "targets:"
	@echo "  make                 build the CPU trainers and ./tokenize, train_gpt where nvcc exists, and data/ if missing"
	@echo "  make train_gpt       CUDA build; GPU_ARCH=$(GPU_ARCH) (sm_XX + PTX), PRECISION=$(PRECISION) (BF16|FP16|FP32)"
	@echo "  make train_gpt_fp32  CUDA build in FP32 (for make test-gpu); train_gpt_fp16 likewise"
	@echo "  make train_gpt_cpu   CPU build, FP32 (OpenMP, OpenBLAS, MPI)"
	@echo "  make train_gpt_cpu_bf16, train_gpt_cpu_fp16   CPU builds storing bf16 / fp16 as the GPU does"
	@echo "  make tokenize        the GPT-2 tokenizer and shard writer (./tokenize -h)"
	@echo "  make convert_hf      GPT-2 weights: Hugging Face safetensors <-> llm.c model file (./convert_hf -h)"
	@echo "  make data            tinyshakespeare train/val shards and the decode table into data/"
	@echo "  make shakespeare     a learner's first result: a small GPT trained on tinyshakespeare (about 4 min on 2 cores)"
	@echo "                       (scripts/shakespeare.sh: samples, loss plot, validation loss against a bigram model's)"
	@echo "  make test            make data, then the CPU test suite (tests/run_tests.sh; tests/README.md); make -j2 test"
	@echo "                       builds what it tests two files at a time, then runs the checks three at a time"
	@echo "  make test-binaries   the suite's own test programs (tests/build/test_*), alone: make -j2 test-binaries"
	@echo "  make test-mutants    deliberate bugs (tests/mutants/), each caught by a check of make test; MUTANTS=\"a b\" for some"
	@echo "  make test-gpu        the GPU suite: the CUDA builds and every dev/ lab (needs a GPU; GPU_PYTHON: a python3 with torch)"
	@echo "  make dev             the dev/ kernel labs with nvcc (dev/README.md); dev-fp32: the same in fp32, into dev/fp32/"
	@echo "  make ... DEBUG=1     CUDA builds that synchronise after every kernel launch (faults reported where they happen)"
	@echo "  make print-nvcc      the nvcc the CUDA targets use (empty: none here)"
	@echo "  make print-mpi       the MPI flags of the CUDA build (pkg-config, or mpicxx -show / --showme)"
	@echo "  make emu             the emulated CUDA build: train_gpt_emu (bf16), train_gpt_emu_fp32, train_gpt_emu_fp16, the labs"
	@echo "                       and tests in tests/build/emu (tests/emu/cuda_emu.h; make test runs them)"
	@echo "  make print-openblas-dir  the OpenBLAS (OpenMP build) directory the CPU trainers link (scripts/bench_cpu.sh)"
	@echo "  make clean           remove build outputs"
	@echo "variables: PRECISION (train_gpt), GPU_ARCH, NVCC, MPICXX, PYTHON, GPU_PYTHON, DEBUG, OPENBLAS_OPENMP,"
	@echo "           MPI_CFLAGS, MPI_LDFLAGS, NCCL_CFLAGS, NCCL_LDFLAGS"

clean:
	rm -rf tokenize convert_hf train_gpt train_gpt_fp32 train_gpt_fp16 $(CPU_TRAINERS) $(EMU_TRAINERS) tests/build .precision-* $(LABS) dev/fp32 dev/ref

.PHONY: all data shakespeare test test-binaries test-mutants test-gpu help clean print-openblas-dir print-nvcc print-mpi emu dev dev-fp32

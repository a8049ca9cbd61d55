#!/usr/bin/env bash
# NCCL's sums in one order (process_grid.h: nccl_pin_sum_order), in the emulated build, whose NCCL
# reports the settings each communicator was made with (CUDA_EMU_NCCL_REPORT; tests/emu/nccl_emu.cpp):
# a dp 2 run's communicators made with NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_NVLS_ENABLE=0 and its log
# saying so; with NCCL_PROTO=LL128 set by the user, the user's value reaches NCCL and the log.
# (tests/test_emu.sh checks every communicator of its np 8 run too.)
# Usage: test_nccl_settings.sh REFERENCE_DIR
set -uo pipefail
REF=${1:?usage: test_nccl_settings.sh REFERENCE_DIR}
D=tests/build/nccl_settings; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=1
run() {  # run NAME PROTO_LINE [ENV...]: one step at dp 2; every communicator and the log name PROTO_LINE
    local name=$1 want=$2; shift 2
    env "$@" CUDA_EMU_NCCL_REPORT=1 timeout 300 mpirun -np 2 ./train_gpt_emu_fp32 -e $REF/model.bin -i $REF/train.bin \
        -b 2 -t 32 -x 1 -v 0 -s 0 > $D/$name.txt 2>&1 || { tail -n 5 $D/$name.txt; echo "FAIL: $name: the run"; exit 1; }
    local made=$(grep -c "^NCCL emulation: communicator" $D/$name.txt)
    local right=$(grep -c "^NCCL emulation: communicator.*; $want$" $D/$name.txt)
    [ "$made" -gt 0 ] && [ "$right" -eq "$made" ] && grep -q "^NCCL: $want " $D/$name.txt \
        || { echo "FAIL: $name: $right of $made communicators made with $want, or the log does not say it"; exit 1; }
    echo "ok   $name: $made communicators made with $want, and the log says so"
}
run pinned "NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_NVLS_ENABLE=0"
run user_protocol_kept "NCCL_ALGO=Ring NCCL_PROTO=LL128 NCCL_NVLS_ENABLE=0" NCCL_PROTO=LL128

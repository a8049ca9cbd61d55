#!/usr/bin/env bash
# The data-parallel reductions overlapped with the backward (overlap.h) and the pipeline's transfers with
# its compute (pipeline_links.h), -overlap 1, the default.
# Usage: test_overlap.sh REFERENCE_DIR REFERENCE_DIR_4_LAYERS (tests/reference.py's models; the
# 4-layer one with --accum 4: ZeRO-2's layers take turns in two buffers, so a buffer is reused within a
# micro-step only with three layers or more)
#  - the emulated GPU build (fp32, NCCL on a stream of its own, ordered by events), against the float64
#    trajectory (1e-4) in the emulator's adversarial stream orders and random ones (seed:1 and seed:3
#    here, seed:2-4 in tests/test_emu.sh; CUDA_EMU_STREAMS: early runs the comm stream as soon as its
#    waits allow, so a reduction without its event reads a gradient not yet written; late holds it back,
#    so the default stream rewrites a buffer a reduction has not read, or reads a sum not yet written;
#    slow starts each collective early and completes it late, so the default stream writes a buffer
#    between a reduce-scatter's read of it and the clear that follows. The random orders' interleaving
#    also depends on when the peer rank's half of a collective arrives, so a run of one seed differs
#    from the next: the mutants' checks use the adversarial orders; late and slow complete a collective
#    only when nothing else can run, which repeats while one is in flight at a time, and what early
#    shows depends only on when a collective starts):
#    dp 2 ZeRO-0 and ZeRO-1 (the last micro-step's units), dp 2 ZeRO-2 on 4 layers (every micro-step's,
#    two buffers in turn), dp 2 ZeRO-3 on 4 layers (each layer gathered on the comm stream while the one
#    before computes: early gathers into a buffer the forward still reads, late lets the forward read one
#    not yet gathered), and dp 2 x pp 2 ZeRO-3 under ZB-H1 (the reductions after the deferred weight
#    halves), seed:1 and early; and pp 2 1F1B and interleaved (early, late): the pipeline's sends and
#    receives on a stream of their own (pipeline_links.h; tests/test_emu.sh runs the other schedules in
#    random orders);
#  - the CPU build (MPI's non-blocking collectives, polled as later units start) at dp 4 on 4 layers,
#    ZeRO-2 against float64 (tests/test_zero.sh runs ZeRO 0-3 on 2 layers), and at ZeRO 0-3 -overlap 0
#    and 1 bit-identical, and at pp 2 (1F1B, interleaved: MPI_Isend / MPI_Irecv): the same reductions of the same
#    sums, only their moment moves; the log rows' split of the step (step_time.h): at -overlap 1 some
#    communication in flight beside the backward, at 0 none.
set -euo pipefail
REF=$1 REF4=${2:?usage: test_overlap.sh REFERENCE_DIR REFERENCE_DIR_4_LAYERS}; PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/overlap; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=1
MPIRUN="timeout 300 mpirun"

trajectory() {  # trajectory NAME ORDER REF ACCUM TRAINER NP FLAGS...: 3 steps against float64 (1e-4)
    local name=$1 order=$2 ref=$3 accum=$4 trainer=$5 np=$6; shift 6
    local log=$D/$(echo "$name $order" | tr -c 'a-zA-Z0-9\n' _).txt
    CUDA_EMU_STREAMS=$order $PYTHON tests/check_trajectory.py --trainer $trainer --ref $ref --accum $accum --tol 1e-4 \
        --launcher "$MPIRUN -np $np" --steps 3 --extra "$*" > $log 2>&1 \
        || { tail -n 20 $log; echo "FAIL: $name, CUDA_EMU_STREAMS=$order: the trajectory against float64"; exit 1; }
    echo "$name, CUDA_EMU_STREAMS=$order: $(tail -n 1 $log)"
}
for order in early late slow; do
    trajectory "emulated fp32, dp 2 ZeRO-2, 4 layers" $order $REF4 4 ./train_gpt_emu_fp32 2 -b 2 -z 2
done
for order in early late seed:3; do
    trajectory "emulated fp32, dp 2 ZeRO-3, 4 layers" $order $REF4 4 ./train_gpt_emu_fp32 2 -b 2 -z 3
done
trajectory "emulated fp32, dp 2 ZeRO-0" early $REF 2 ./train_gpt_emu_fp32 2 -b 2 -z 0
trajectory "emulated fp32, dp 2 ZeRO-0" late $REF 2 ./train_gpt_emu_fp32 2 -b 2 -z 0
trajectory "emulated fp32, dp 2 ZeRO-1" early $REF 2 ./train_gpt_emu_fp32 2 -b 2 -z 1
# the pipeline's sends and receives on the links stream (pipeline_links.h): early sends a tensor not yet
# written if its event is missing, late lets a forward read an input not yet received or overwrite one
# still leaving; interleaved adds the ring and its second gradient buffer, copied in on the links stream
# (tests/test_emu.sh runs 1F1B, ZB-H1 and GPipe in random orders: seed:2, seed:4, seed:3)
for order in early late; do
    trajectory "emulated fp32, pp 2 (1F1B), 4 layers" $order $REF4 4 ./train_gpt_emu_fp32 2 -b 2 -pp 2 -ps 1f1b
done
for order in early late; do
    trajectory "emulated fp32, pp 2 (interleaved, V 2), 4 layers" $order $REF4 4 ./train_gpt_emu_fp32 2 -b 2 -pp 2 \
        -ps interleaved -vp 2
done
for order in seed:1 early; do  # (early: blocks_backward_input's gathers ahead, beside the pipeline's sends)
    trajectory "emulated fp32, dp 2 x pp 2 ZeRO-3 (ZB-H1), 4 layers" $order $REF4 4 ./train_gpt_emu_fp32 4 -b 2 -pp 2 -ps zb -z 3
done

CPU="-e $REF4/model.bin -i $REF4/train.bin -b 1 -t 32 -d 512 -x 3 -l 1e-3 -u 2 -q 0.1 -c 0.1 -gc 1.0 -shuffle 0 -v 0 -s 0"
trajectory "CPU build, dp 4 ZeRO-2, 4 layers" issue $REF4 4 ./train_gpt_cpu 4 -b 1 -z 2  # (ZeRO 0-3: tests/test_zero.sh)
for z in 0 1 2 3; do
    for o in 0 1; do $MPIRUN -np 4 ./train_gpt_cpu $CPU -z $z -overlap $o -log $D/cpu_z${z}_overlap$o.jsonl > /dev/null; done
    $PYTHON tests/identical_steps.py "CPU build, dp 4 ZeRO-$z, -overlap 0 and 1" $D/cpu_z${z}_overlap0.jsonl $D/cpu_z${z}_overlap1.jsonl
done

# the pipeline's transfers posted (MPI_Isend / MPI_Irecv) or blocking: the same bytes, only their moment moves
for ps in "1f1b" "interleaved -vp 2"; do
    for o in 0 1; do $MPIRUN -np 2 ./train_gpt_cpu $CPU -pp 2 -ps $ps -overlap $o -log $D/cpu_pp_${ps%% *}_overlap$o.jsonl > /dev/null; done
    $PYTHON tests/identical_steps.py "CPU build, pp 2 ($ps), -overlap 0 and 1" $D/cpu_pp_${ps%% *}_overlap{0,1}.jsonl
done

# the step's split in those rows (tests/check_step_time.py: at -overlap 1 communication in flight
# while the backward goes on, at 0 none)
$PYTHON tests/check_step_time.py --blocking $D/cpu_z{0,1,2,3}_overlap0.jsonl --overlapped $D/cpu_z{0,1,2,3}_overlap1.jsonl

#!/usr/bin/env bash
# The host waits for the GPU at most twice a step (issue 32, item 4; staging.h): at the gradient
# norm, which the clip factor and the loss scaler's finite check decide on, and at the step's end
# (its timer). Counted by the emulated build (CUDA_EMU_WAIT_REPORT, tests/emu/cuda_emu.cpp: a
# synchronize, a poll that finds the work done, a copy with pageable host memory, each counted when
# work was queued since the last wait). One step's waits: a 3-step run's less a 1-step run's, over
# 2, on every rank: one rank, dp 2 ZeRO-2 and pp 2 (1F1B and ZB-H1) with 2 micro-steps, tp 2 -sp 1
# and cp 2 x tp 2 ZeRO-1 with 4, all over NCCL. Measured before (0ec9235, the same counter): 11 a
# step at one rank and at dp 2 (each micro-step's tokens, targets, losses and buckets, and a wait
# before and after its forward and its backward), 19 and 23 at tp 2 (also the norm read range by
# range), 23 to 27 at cp 2 x tp 2, 12 and 11 at pp 2 (the bubble timed by waiting around each
# action; now by the device's clock, pipeline.h); now 2 in each. Printed, not bounded: -comm mpi,
# whose host-staged messages wait by nature (27 before, 20 now).
# Usage: test_host_waits.sh REFERENCE_DIR
set -euo pipefail
REF=${1:?usage: test_host_waits.sh REFERENCE_DIR}; PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/host_waits; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=1
FLAGS="-e $REF/model.bin -i data/tinyshakespeare_train.bin -b 2 -t 32 -v 0 -s 0"
CASES=" ${HOST_WAITS_CASES:-} "  # (names: only those cases, for a mutant's check; default every case)
waits() {  # waits NAME BOUND NP FLAGS...: prints each rank's waits a step; fails above BOUND (0: no bound)
    local name=$1 bound=$2 np=$3; shift 3
    [ "$CASES" = "  " ] || [[ "$CASES" == *" $name "* ]] || return 0
    for n in 1 3; do
        CUDA_EMU_WAIT_REPORT=$D/$name.$n.jsonl timeout 300 mpirun -np $np ./train_gpt_emu $FLAGS "$@" -x $n > $D/$name.$n.txt 2>&1 \
            || { tail -n 5 $D/$name.$n.txt; echo "FAIL: $name: the $n-step run failed"; exit 1; }
    done
    $PYTHON - $D/$name "$name" $bound $np <<'PY'
import json, sys
path, name, bound, np = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
runs = [{r["rank"]: r["host_waits"] for r in map(json.loads, open(f"{path}.{n}.jsonl"))} for n in (1, 3)]
assert sorted(runs[0]) == sorted(runs[1]) == list(range(np)), f"FAIL: {name}: ranks reported {runs}"
per_step = [(runs[1][r] - runs[0][r]) / 2 for r in range(np)]
print(f"{name}: host waits a step, by rank: {per_step}")
assert all(w >= 1 for w in per_step), f"FAIL: {name}: no wait counted: the norm's wait at least should be"
assert bound == 0 or all(w <= bound for w in per_step), f"FAIL: {name}: more than {bound} host waits a step: {per_step}"
PY
}
waits one_rank_accum2 2 1 -d 128
waits dp2_zero2_accum2 2 2 -d 256 -z 2
waits tp2_sp_accum4 2 2 -d 256 -tp 2 -sp 1
waits cp2_tp2_zero1_accum4 2 4 -d 256 -cp 2 -tp 2 -z 1
waits pp2_1f1b_accum2 2 2 -d 128 -pp 2
waits pp2_zb_accum2 2 2 -d 128 -pp 2 -ps zb
waits dp2_comm_mpi_host_staged 0 2 -d 256 -z 3 -comm mpi
echo "ok: at most 2 host waits a step wherever no message is host-staged"

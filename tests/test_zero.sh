#!/usr/bin/env bash
# Data parallelism and ZeRO 0-3 on the CPU build under mpirun, against the float64 reference
# and the single-rank run. Usage: test_zero.sh REFERENCE_DIR
#  - losses of dp 2 and 4 x ZeRO 0..3 match tests/reference.py's float64 trajectory (same
#    total batch: B = 4/dp, 2 accumulation micro-steps; 3 steps) within 1e-4, like the single rank,
#    and their gradient norms the single rank's within 1e-5 (tests/same_norms.py);
#  - final parameters follow the single-rank run's (tests/compare_models.py says why its bounds);
#  - every rank's memory and per-collective traffic, measured in the first step, equal -plan's
#    (which allocates nothing) and the formulas of tests/accounting.py; ZeRO-3's persistent model
#    state at dp 4 is <= 27% of ZeRO-0's;
#  - bad layouts: one clear error on every rank, non-zero exit, no hang.
set -euo pipefail
REF=$1; PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/zero; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=1
MPIRUN="timeout 300 mpirun"
./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -b 4 -t 32 -d 256 -x 3 -l 1e-3 -u 2 -q 0.1 -c 0.1 -gc 1.0 \
    -shuffle 0 -v 0 -s 0 -o $D/single -log $D/single.jsonl > /dev/null
MODEL="--layers 2 --channels 64 --max-seq-len 64 --vocab 50304 --T 32 --x 4"   # tests/reference.py's model
FINAL=()  # every layout's final model, named (a glob would drop a layout that never wrote one)
for dp in 2 4; do
    for z in 0 1 2 3; do
        $PYTHON tests/check_trajectory.py --trainer ./train_gpt_cpu --ref $REF --accum 2 --tol 1e-4 --steps 3 \
            --launcher "$MPIRUN -np $dp" --extra "-b $((4 / dp)) -z $z -o $D/dp$dp-z$z" --log $D/dp$dp-z$z.jsonl > $D/dp$dp-z$z.txt
        FINAL+=($D/dp$dp-z$z/model_00000003.bin)
        $MPIRUN -np $dp ./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -b $((4 / dp)) -t 32 -d 256 -z $z -v 0 -plan 1 \
            | grep '^{' > $D/dp$dp-z$z.plan.jsonl
        echo "dp $dp ZeRO-$z: $(tail -n 1 $D/dp$dp-z$z.txt)"
        $PYTHON tests/same_norms.py $D/single.jsonl $D/dp$dp-z$z.jsonl "dp $dp ZeRO-$z"
        $PYTHON tests/accounting.py $D/dp$dp-z$z.plan.jsonl $D/dp$dp-z$z.jsonl $MODEL --B $((4 / dp)) --accum 2 \
            --dp $dp --tp 1 --zero $z
    done
done
$PYTHON tests/compare_models.py $D/single/model_00000003.bin $REF/model.bin "${FINAL[@]}"
$PYTHON - $D <<'PY'
import json, sys
d = sys.argv[1]
state = {}
for dp in (2, 4):
    for z in range(4):
        mem = json.loads(open(f"{d}/dp{dp}-z{z}.jsonl").readline())["measured"][0]["memory"]
        state[(dp, z)] = sum(mem[k] for k in ("parameters", "gradients", "optimizer"))
    print(f"dp {dp}: ZeRO-1/2/3 persistent model state = " +
          ", ".join(f"{100 * state[(dp, z)] / state[(dp, 0)]:.1f}%" for z in (1, 2, 3)) + " of ZeRO-0")
assert state[(4, 3)] <= 0.27 * state[(4, 0)], f"FAIL: ZeRO-3 model state at dp 4 is {state[(4, 3)] / state[(4, 0)]:.3f} of ZeRO-0's, over 0.27"
PY

# -plan allocates nothing: GPT-2 1.5B (d48) in bf16 under ZeRO-3 over 8 ranks plans on this
# small machine, each rank holding 16/8 = 2 bytes of persistent state per parameter
/usr/bin/time -f "%M" -o $D/plan_rss.txt $MPIRUN -np 8 ./train_gpt_cpu_bf16 -e d48 -z 3 -b 1 -t 1024 -r 3 -plan 1 \
    | grep '^{' > $D/d48.plan.jsonl
$PYTHON - $D <<'PY'
import json, sys
d = sys.argv[1]
plans = [json.loads(l) for l in open(f"{d}/d48.plan.jsonl")]
assert len(plans) == 8 and plans[0]["num_parameters"] == 1557686400, f"FAIL: d48 plans: {len(plans)} ranks, not 8, or parameters not 1557686400"
for p in plans:
    per_param = sum(p["memory"][k] for k in ("parameters", "gradients", "optimizer")) / p["num_parameters"]
    assert 2.0 <= per_param < 2.001, f"FAIL: d48 ZeRO-3 dp 8: {per_param} bytes of state per parameter on rank {p['rank']}, not 2"  # 16 / dp, plus unit padding
rss_kb = int(open(f"{d}/plan_rss.txt").read().split()[-1])
print(f"d48 bf16 ZeRO-3 dp 8: {per_param:.4f} bytes/param of persistent state per rank; -plan ran in {rss_kb / 1024:.0f} MB")
PY

# 16-bit builds through the MPI floatX sum, combined with recompute and fp32 accumulation. Each bar
# ~10x the max |diff| measured by the same command with --tol 1 (tests/README.md's table): bf16 dp 2
# ZeRO-3 2.8e-4 -> 3e-3; fp16 dp 2 ZeRO-1 3.5e-5 -> 4e-4; bf16 dp 4 ZeRO-2 -ga fp32 -r 3 2.8e-4 -> 3e-3
$PYTHON tests/check_trajectory.py --trainer ./train_gpt_cpu_bf16 --ref $REF --accum 2 --tol 3e-3 \
    --launcher "$MPIRUN -np 2" --extra "-b 2 -z 3" | tail -n 1
$PYTHON tests/check_trajectory.py --trainer ./train_gpt_cpu_fp16 --ref $REF --accum 2 --tol 4e-4 \
    --launcher "$MPIRUN -np 2" --extra "-b 2 -z 1" | tail -n 1
$PYTHON tests/check_trajectory.py --trainer ./train_gpt_cpu_bf16 --ref $REF --accum 4 --tol 3e-3 \
    --launcher "$MPIRUN -np 4" --extra "-b 1 -z 2 -ga fp32 -r 3" | tail -n 1

# bad layouts: every rank reports, the job exits non-zero
bad() {  # bad NP EXPECTED ARGS...
    local np=$1 want=$2; shift 2
    local code=0
    $MPIRUN -np $np ./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -t 32 -v 0 -s 0 "$@" > $D/bad.out 2> $D/bad.err || code=$?
    [ $code -ne 0 ] || { echo "FAIL: $* succeeded"; exit 1; }
    [ $code -ne 124 ] || { echo "FAIL: $* hung"; exit 1; }
    local count=$(grep -c -- "$want" $D/bad.err || true)
    [ "$count" -eq "$np" ] || { echo "FAIL: '$want' reported by $count of $np ranks"; cat $D/bad.err; exit 1; }
    echo "ok ($np ranks): $(grep -m1 -- "$want" $D/bad.err)"
}
bad 2 "is not a multiple of B\*T\*dp" -b 2 -d 100
bad 2 "is not a multiple of B\*T\*dp" -b 4 -d 128
bad 4 "the grid does not fit the world" -tp 3
bad 3 "the grid does not fit the world" -pp 2
bad 8 "must divide the heads NH=4" -tp 8
bad 2 "flag -z must be an integer in" -z 4

# the headline command on the CPU build with default flags (GPT-2 124M, B=4, T=1024: ~8.5 GiB per
# rank, 8 ranks on this machine): one line on every rank that it does not fit, not an OOM kill
code=0
$MPIRUN -np 8 ./train_gpt_cpu -x 1 > $D/mem.out 2> $D/mem.err || code=$?
[ $code -ne 0 ] && [ $code -ne 124 ] || { echo "FAIL: default 8-rank run exit $code"; exit 1; }
count=$(grep -c "does not fit in memory" $D/mem.err || true)
[ "$count" -eq 8 ] || { echo "FAIL: the memory line from $count of 8 ranks"; cat $D/mem.err; exit 1; }
echo "ok (8 ranks): $(head -n 1 $D/mem.err)"

# threads: each rank takes the cores of the node divided by the ranks on it; OMP_NUM_THREADS wins
cores=$(nproc); want=$(( cores / 2 > 0 ? cores / 2 : 1 ))
env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS $MPIRUN -np 2 ./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -b 1 -t 32 \
    -x 1 -v 0 -s 0 > $D/threads2.txt
grep -q "CPU, $want OpenMP threads per rank" $D/threads2.txt || { echo "FAIL: 2 ranks on $cores cores should take $want threads each"; exit 1; }
OMP_NUM_THREADS=3 ./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -b 1 -t 32 -x 1 -v 0 -s 0 > $D/threads3.txt
grep -q "CPU, 3 OpenMP threads per rank" $D/threads3.txt || { echo "FAIL: OMP_NUM_THREADS=3 not honoured"; exit 1; }
echo "ok: 2 ranks on $cores cores take $want threads each; OMP_NUM_THREADS overrides"

# OpenBLAS's kernels (kernels/common.cuh: cpu_name_blas_kernels): never its Prescott fallback on a CPU
# with AVX2 (its flags read here, apart), and what OPENBLAS_CORETYPE names when the user sets it
flags=" $(grep -m 1 '^flags' /proc/cpuinfo | cut -d: -f2) "
env -u OPENBLAS_CORETYPE ./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -b 1 -t 32 -x 1 -v 0 -s 0 > $D/blas.txt
kernels=$(grep -o "OpenBLAS [A-Za-z0-9]* kernels" $D/blas.txt) || { echo "FAIL: the header names no OpenBLAS kernels"; exit 1; }
if [[ $flags == *" avx2 "* && $flags == *" fma "* && $kernels == "OpenBLAS Prescott kernels" ]]; then
    echo "FAIL: $kernels on a CPU with AVX2"; exit 1; fi
OPENBLAS_CORETYPE=Prescott ./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -b 1 -t 32 -x 1 -v 0 -s 0 > $D/blas_set.txt
grep -q "OpenBLAS Prescott kernels" $D/blas_set.txt || { echo "FAIL: OPENBLAS_CORETYPE=Prescott not honoured"; exit 1; }
echo "ok: OPENBLAS_CORETYPE unset: $kernels; set, honoured"

# a failure on one rank only (its slice of the shard holds a token outside the vocabulary)
# takes the whole job down instead of leaving the other rank waiting in a collective
$PYTHON - $D/rank1_bad.bin <<'PY'
import sys, numpy as np
toks = np.full(64 * 20 + 1, 7, dtype=np.uint16)
toks[40::64] = 60000   # inside rank 1's half [32, 65) of every 64-token global micro-batch, never rank 0's
h = np.zeros(256, dtype=np.int32); h[:3] = [20240520, 1, len(toks)]
open(sys.argv[1], "wb").write(h.tobytes() + toks.tobytes())
PY
code=0
$MPIRUN -np 2 ./train_gpt_cpu -e $REF/model.bin -i $D/rank1_bad.bin -b 2 -t 16 -x 3 -v 0 -s 0 > $D/one.out 2> $D/one.err || code=$?
[ $code -ne 0 ] || { echo "FAIL: a bad slice on one rank went unnoticed"; exit 1; }
[ $code -ne 124 ] || { echo "FAIL: the job hung after one rank failed"; exit 1; }
grep -q "outside the vocabulary" $D/one.err || { echo "FAIL: a bad slice on one rank: no 'outside the vocabulary' line"; cat $D/one.err; exit 1; }
echo "ok: one failing rank ends the job (exit $code): $(grep -m1 'outside the vocabulary' $D/one.err)"

#!/usr/bin/env bash
# GPT-2 124M on the CPU, side by side in one run: llm.c's train_gpt2 (the binary of a checkout of
# karpathy/llm.c, built there by llm.c's own Makefile) and our train_gpt_cpu, on the same random model file, at
# B=4, T=64, fp32, with the same threads; then the floor: the step's matrix products alone in
# OpenBLAS sgemm (scripts/sgemm_floor.c). Prints the median s/step of each (first step left out),
# llm.c's time over ours, and ours over the floor.
#   LLMC_DIR=~/llm.c scripts/bench_cpu.sh         THREADS=$(nproc) STEPS=10
#   LLMC_DIR=~/llm.c LOADED=1 scripts/bench_cpu.sh  both programs again with one core kept busy by a
#                                                   spinning process (a shared machine, a laptop)
# LLMC_DIR: a checkout of karpathy/llm.c (we compare with commit f1e2ace) in which `make train_gpt2`
# was run; this script builds no other project's code. docs/cpu.md: CPU speed.
# OpenBLAS's kernels follow OPENBLAS_CORETYPE where the environment sets it (the line "blas:" says
# which ran), for the floor and for the trainer alike; llm.c, built with -march=native, uses the CPU's
# widest vectors whatever it says. `env -u OPENBLAS_CORETYPE scripts/bench_cpu.sh`: OpenBLAS's own choice.
set -euo pipefail
cd "$(dirname "$0")/.."
LLMC_DIR=${LLMC_DIR:-}
THREADS=${THREADS:-$(nproc)}
STEPS=${STEPS:-10}
[ -n "$LLMC_DIR" ] && [ -x "$LLMC_DIR/train_gpt2" ] || {
    echo "bench_cpu.sh: set LLMC_DIR to a checkout of karpathy/llm.c in which llm.c's own \`make train_gpt2\` was run"
    echo "  (a clone of karpathy/llm.c: git checkout f1e2ace, then make train_gpt2 in it)"; exit 1; }
LLMC_DIR=$(cd "$LLMC_DIR" && pwd)
[ -s data/tinyshakespeare_train.bin ] || make data
make -s train_gpt_cpu
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
export OMP_NUM_THREADS=$THREADS

# the same random GPT-2 124M for both: our d12 initialisation after one step at learning rate 0
./train_gpt_cpu -e d12 -b 4 -t 64 -x 1 -l 0 -v 0 -s 0 -o "$D/init" > "$D/init.out" 2>&1 || { tail -3 "$D/init.out"; exit 1; }

# llm.c reads gpt2_124M.bin and dev/data/tinyshakespeare/ from its working directory; it runs
# until killed here, after step STEPS (its validation and sampling are outside its step timer)
mkdir -p "$D/dev/data/tinyshakespeare"
ln -s "$PWD/data/tinyshakespeare_train.bin" "$D/dev/data/tinyshakespeare/tiny_shakespeare_train.bin"
ln -s "$PWD/data/tinyshakespeare_val.bin" "$D/dev/data/tinyshakespeare/tiny_shakespeare_val.bin"
ln -s "$D/init/model_00000001.bin" "$D/gpt2_124M.bin"
ln -s "$PWD/data/gpt2_tokenizer.bin" "$D/gpt2_tokenizer.bin"
# both programs, STEPS steps each, their outputs named with TAG (quiet, loaded)
run_both() {
    local tag=$1
    (cd "$D" && exec stdbuf -oL "$LLMC_DIR/train_gpt2" > llmc_$tag.out 2>&1) &
    local llmc=$!
    while kill -0 $llmc 2> /dev/null && ! grep -q "^step $STEPS:" "$D/llmc_$tag.out"; do sleep 1; done
    kill $llmc 2> /dev/null || true
    wait $llmc 2> /dev/null || true
    ./train_gpt_cpu -e "$D/init/model_00000001.bin" -b 4 -t 64 -x $((STEPS + 1)) -v 0 -s 0 -log "$D/ours_$tag.jsonl" > "$D/ours_$tag.out" 2>&1 \
        || { tail -3 "$D/ours_$tag.out"; exit 1; }
}
run_both quiet
if [ "${LOADED:-0}" = 1 ]; then  # a shared machine: one core kept busy by a spinning process
    sh -c 'while :; do :; done' &
    SPINNER=$!
    run_both loaded
    kill $SPINNER
fi

BLAS_DIR=$(make -s print-openblas-dir)
gcc -O2 scripts/sgemm_floor.c ${BLAS_DIR:+-L$BLAS_DIR -Wl,-rpath,$BLAS_DIR} -lopenblas -o "$D/sgemm_floor"
OPENBLAS_VERBOSE=2 "$D/sgemm_floor" 12 768 50304 4 64 > "$D/floor.out" 2>&1

python3 - "$D" "$THREADS" <<'PY'
import json, os, re, statistics, sys
d, threads = sys.argv[1], sys.argv[2]
def steps(tag):  # the median s/step of llm.c and of ours, first step left out
    llmc = [float(m.group(1)) / 1000 for m in re.finditer(r"^step \d+: train loss \S+ \(took ([0-9.]+) ms\)", open(f"{d}/llmc_{tag}.out").read(), re.M)][1:]
    ours = [json.loads(line)["ms"] / 1000 for line in open(f"{d}/ours_{tag}.jsonl")][1:]
    return statistics.median(llmc), statistics.median(ours), len(ours)
floor_text = open(d + "/floor.out").read()
core = re.search(r"Core: (\S+)", floor_text)
gflop, floor, rate = (float(x) for x in re.search(r"([0-9.]+) GFLOP per step, ([0-9.]+) s in sgemm, ([0-9.]+) GFLOP/s", floor_text).groups())
a, o, n = steps("quiet")
print(f"GPT-2 124M, B=4 T=64, fp32, {threads} threads, median of {n} steps (first left out)")
print(f"blas: OpenBLAS {core.group(1) if core else '?'} kernels, sgemm {rate:.0f} GFLOP/s on the step's shapes")
print(f"llm.c train_gpt2.c   {a:7.3f} s/step")
print(f"train_gpt_cpu        {o:7.3f} s/step")
print(f"sgemm floor          {floor:7.3f} s/step  ({gflop:.1f} GFLOP)")
print(f"llm.c / ours         {a / o:7.2f}x")
print(f"ours / floor         {o / floor:7.2f}x")
if os.path.exists(f"{d}/ours_loaded.jsonl"):  # LOADED=1: one core kept busy
    la, lo, _ = steps("loaded")
    print(f"one core kept busy:  llm.c {la:.3f} s/step ({la / a:.2f}x its quiet step), ours {lo:.3f} ({lo / o:.2f}x ours quiet), llm.c / ours {la / lo:.2f}x")
PY

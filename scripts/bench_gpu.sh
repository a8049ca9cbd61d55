#!/usr/bin/env bash
# GPT-2 124M on one GPU against three anchors, in one run: ours (train_gpt), llm.c's train_gpt2cu
# built with cuDNN (its recipe's build: USE_CUDNN=1, run at -r 0), llm.c's default build (no cuDNN,
# also -r 0), and PyTorch compiled (scripts/bench_torch_gpu.py: nanoGPT's model, fused AdamW,
# torch.compile, bf16 autocast). bf16, T 1024, each B of BATCHES; the same random model file (ours
# after one step at learning rate 0, in llm.c's bf16 format) and the same tokens (tinyshakespeare,
# read in llm.c's sequential order: ours at -shuffle 0).
# Each program's step time is the median of ITS OWN per-step times over steps 3 to STEPS (llm.c's
# "| X ms |" column, our log's "ms", PyTorch's step lines; never llm.c's tok/s column, a running
# average), tokens/s = B*T / that, MFU = ours' (mfu.h: 6N + 6LCT over the datasheet's peak) times
# our step time over theirs (the same FLOPs a step). Prints a table with the ratios to each anchor and
# writes one JSON record per B into RECORD_DIR (docs/gpu-runs/ by default; docs/gpu.md tabulates them:
# scripts/gpu_runs_table.py). A program that is not given or fails gets null and one line saying why.
#   LLMC_BIN=.gpurun/llmc/train_gpt2cu LLMC_CUDNN_BIN=.gpurun/llmc_cudnn/train_gpt2cu scripts/bench_gpu.sh
# LLMC_BIN, LLMC_CUDNN_BIN: llm.c (commit f1e2ace) built by its own Makefile (docs/gpu.md, "A GPU
# session", says how; this script builds no other project's code). CUDNN_LIB: the folder of
# libcudnn.so.9 for the cuDNN build (default: the one inside PyTorch's install). TORCH_PYTHON: a
# Python with PyTorch and CUDA (default python3; "none" skips it). COMMIT: the commit measured
# (default: git's HEAD, else .gpurun/commit, written where the binaries were built).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-12} BATCHES=${BATCHES:-16 32 64} T=1024
RECORD_DIR=${RECORD_DIR:-docs/gpu-runs} TORCH_PYTHON=${TORCH_PYTHON:-python3}
LLMC_BIN=${LLMC_BIN:-${LLMC_DIR:+$LLMC_DIR/train_gpt2cu}} LLMC_CUDNN_BIN=${LLMC_CUDNN_BIN:-}
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || cat .gpurun/commit 2>/dev/null || echo unknown)}
[ "$STEPS" -ge 4 ] || { echo "bench_gpu.sh: STEPS=$STEPS: the median is over steps 3 to STEPS, so at least 4"; exit 1; }
[ -s data/tinyshakespeare_train.bin ] || make data
make -s train_gpt
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
for bin in "$LLMC_BIN" "$LLMC_CUDNN_BIN"; do
    [ -z "$bin" ] || [ -x "$bin" ] || { echo "bench_gpu.sh: $bin: no such program (llm.c's train_gpt2cu, docs/gpu.md)"; exit 1; }
done
if [ -n "$LLMC_CUDNN_BIN" ] && [ -z "${CUDNN_LIB:-}" ]; then  # cuDNN's library from PyTorch's install
    CUDNN_LIB=$("$TORCH_PYTHON" -c 'import site, glob, os; f = [p for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/cudnn/lib/libcudnn.so.9") + glob.glob(s + "/torch/lib/libcudnn.so.9")]; print(os.path.dirname(f[0]) if f else "")' 2>/dev/null || true)
    echo "cuDNN for llm.c: ${CUDNN_LIB:-(none found in $TORCH_PYTHON's site-packages: the system's, if any)}"
fi
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)

# the same random GPT-2 124M for all: our d12 initialisation after one step at learning rate 0
./train_gpt -e d12 -b 4 -t $T -x 1 -l 0 -v 0 -s 0 -o "$D/init" > "$D/init.out" 2>&1 || { tail -3 "$D/init.out"; exit 1; }
MODEL="$D/init/model_00000001.bin"
TRAIN="$PWD/data/tinyshakespeare_train.bin" VAL="$PWD/data/tinyshakespeare_val.bin"
# llm.c: validation only past the last step (its -v 0 divides by zero), on the train shard (it asserts
# every shard holds B*T+1 tokens: tinyshakespeare's val shard has 32K), no sampling, no checkpoints
LLMC_FLAGS="-r 0 -x $STEPS -v 1000000 -s 0 -h 0 -t $T"
OURS_FLAGS="-x $STEPS -v 0 -s 0 -shuffle 0 -t $T"
TORCH_FLAGS="-x $STEPS -t $T -compile 1 -dtype bf16"

in_tmp() { (cd "$D" && exec "$@"); }  # llm.c runs in the temporary folder, where anything it writes goes
run() {  # run NAME B COMMAND...: its output in $D/NAME_bB.out, or one line saying it failed
    local name=$1 B=$2; shift 2
    echo "B $B: $name"
    "$@" > "$D/${name}_b$B.out" 2>&1 || { echo "  $name at B $B failed (exit $?): $(tail -2 "$D/${name}_b$B.out" | tr '\n' ' ')"; rm -f "$D/${name}_b$B.out"; }
}
for B in $BATCHES; do
    run ours $B ./train_gpt -e "$MODEL" -i "$TRAIN" -j "$VAL" -b $B $OURS_FLAGS -log "$D/ours_b$B.jsonl"
    [ -z "$LLMC_CUDNN_BIN" ] || run llmc_cudnn $B in_tmp env LD_LIBRARY_PATH="${CUDNN_LIB:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$(realpath "$LLMC_CUDNN_BIN")" -e "$MODEL" -i "$TRAIN" -j "$TRAIN" -b $B $LLMC_FLAGS
    [ -z "$LLMC_BIN" ] || run llmc $B in_tmp "$(realpath "$LLMC_BIN")" -e "$MODEL" -i "$TRAIN" -j "$TRAIN" -b $B $LLMC_FLAGS
    [ "$TORCH_PYTHON" = none ] || run torch $B "$TORCH_PYTHON" scripts/bench_torch_gpu.py -e "$MODEL" -i "$TRAIN" -b $B $TORCH_FLAGS
done

mkdir -p "$RECORD_DIR"
python3 scripts/bench_record.py --dir "$D" --batches "$BATCHES" --T $T --steps $STEPS --commit "$COMMIT" \
    --gpu "${GPU:-unknown}" --records "$RECORD_DIR" \
    --flags "ours=$OURS_FLAGS" "llmc_cudnn=${LLMC_CUDNN_BIN:+$LLMC_FLAGS (USE_CUDNN=1)}" "llmc=${LLMC_BIN:+$LLMC_FLAGS}" \
    "torch=$([ "$TORCH_PYTHON" = none ] || echo "$TORCH_FLAGS")"

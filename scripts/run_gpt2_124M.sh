#!/usr/bin/env bash
# scripts/run_gpt2_124M.sh: llm.c's GPT-2 124M recipe (its scripts/run_gpt2_124M.sh, the same flags)
# on this trainer: GPT-2 d12 from scratch on FineWeb's 10B-token sample, one epoch (18,865 steps of
# 524,288 tokens: B 64 x T 1024 x 8 GPUs), AdamW at lr 6e-4 after 700 warmup steps, cosine decay to
# 0, weight decay 0.1, ZeRO-1, validation and HellaSwag every 250 steps, a checkpoint every 5,000,
# under scripts/supervise.sh (a crash or a hung rank resumes from the newest checkpoint, bit for
# bit). docs/recipes.md says what to expect and what it costs.
#   bash scripts/run_gpt2_124M.sh     (NP=8 GPUs; DATA, OUT, HELLASWAG: the shards', the run's folder, the
#                                     eval file; LAUNCH, TRAINER, EXTRA: the launcher, the binary, more flags)
# It writes OUT/main.log (llm.c's), OUT/log.jsonl, the checkpoints and, at the end, OUT/DONE_%08d.
# On several nodes: scripts/run_gpt2_124M.sbatch.
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-8} DATA=${DATA:-data/fineweb10B} OUT=${OUT:-log_gpt2_124M} TRAINER=${TRAINER:-./train_gpt}
HELLASWAG=${HELLASWAG:-data/hellaswag_val.bin}
[ "$TRAINER" != ./train_gpt ] || make train_gpt  # (tests/test_recipe.sh runs it on ./train_gpt_cpu, small)
[ -f "$DATA/fineweb_val.bin" ] || bash scripts/fineweb.sh fineweb "$DATA"
[ -f "$HELLASWAG" ] || bash scripts/download_data.sh hellaswag
LAUNCH=${LAUNCH:-mpirun -np $NP}
bash scripts/supervise.sh --max-restarts 10 -- $LAUNCH $TRAINER \
    -i "$DATA/fineweb_train*.bin" -j "$DATA/fineweb_val.bin" -hf "$HELLASWAG" -o "$OUT" -log "$OUT/log.jsonl" \
    -v 250 -s 20000 -g 144 -h 1 -b 64 -t 1024 -d 524288 -r 0 -z 1 -c 0.1 -l 0.0006 -q 0.0 -u 700 \
    -n 5000 -y 1 -e d12 ${EXTRA:-}

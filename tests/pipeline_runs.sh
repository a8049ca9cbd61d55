# tests/pipeline_runs.sh: what tests/test_pp.sh and tests/test_interleaved.sh share, sourced after
# they set REF (tests/reference.py's 4-layer model) and D (a scratch directory): the launcher, the
# model's dimensions for tests/accounting.py, the reference's training flags, and the single-rank
# runs over 8 and 4 micro-batches that every layout's final model is compared with (3 steps: the
# layouts run 3 of the reference's 6, as np 8 on 2 cores is slow).
export OMP_NUM_THREADS=1
MPIRUN="timeout 300 mpirun"
MODEL="--layers 4 --channels 64 --max-seq-len 64 --vocab 50304 --T 32 --x 4"
FLAGS="-e $REF/model.bin -i $REF/train.bin -t 32 -l 1e-3 -u 2 -q 0.1 -c 0.1 -gc 1.0 -x 6 -shuffle 0 -v 0 -s 0"
./train_gpt_cpu $FLAGS -x 3 -b 4 -d 1024 -o $D/single8 > /dev/null
./train_gpt_cpu $FLAGS -x 3 -b 4 -d 512 -o $D/single4 > /dev/null

#!/usr/bin/env bash
# Bad input gets one line naming the problem and exit code 1: never a crash (signal),
# never success, never a damaged output. Usage: test_bad_input.sh TRAINER REFERENCE_DIR
set -u
TRAINER=$1; REF=$2; PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/bad; rm -rf $D; mkdir -p $D
fails=0
GOOD="-e $REF/model.bin -i $REF/train.bin -b 2 -t 16 -x 1 -v 0 -s 0"

# a refusal is one line per rank: stderr holds exactly one line for each of the RANKS ranks (default
# 1; every case here runs one process), each an `error:` line saying WANT; stdout has no error line
expect_error() {  # [RANKS=N] expect_error "EXPECTED MESSAGE PART" ARGS...
    local want=$1 ranks=${RANKS:-1}; shift
    "$@" > $D/out.txt 2> $D/err.txt
    local code=$?
    local lines=$(grep -c . $D/err.txt) errors=$(grep -c -- "^error: .*$want" $D/err.txt) stray=$(grep -c '^error:' $D/out.txt)
    if [ $code -ne 1 ] || [ "$errors" -ne $ranks ] || [ "$lines" -ne $ranks ] || [ "$stray" -ne 0 ]; then
        echo "FAIL: $* -> exit $code, $errors of $ranks rank(s) said 'error: ...$want' in $lines stderr line(s) ($stray error lines on stdout), stderr: $(head -c 300 $D/err.txt)"
        fails=$((fails + 1))
    else
        echo "ok: $(head -n 1 $D/err.txt)"
    fi
}

# model files
expect_error "cannot open model file" $TRAINER $GOOD -e $D/missing.bin
head -c 3000 /dev/urandom > $D/random.bin
expect_error "magic" $TRAINER $GOOD -e $D/random.bin
head -c 100 $REF/model.bin > $D/short_header.bin
expect_error "shorter than its 1024-byte header" $TRAINER $GOOD -e $D/short_header.bin
$PYTHON - $REF/model.bin $D <<'PY'
import sys, numpy as np
src, d = sys.argv[1], sys.argv[2]
raw = open(src, "rb").read()
h = np.frombuffer(raw[:1024], dtype=np.int32).copy()
def put(name, header, body=raw[1024:]):
    open(f"{d}/{name}", "wb").write(header.tobytes() + body)
v = h.copy(); v[1] = 7; put("version7.bin", v)
put("truncated.bin", h, raw[1024:-4096])
c = h.copy(); c[5] = 5; put("heads.bin", c)   # C=64 with NH=5
l = h.copy(); l[4] = 2**31 - 1; put("layers.bin", l)  # a damaged layer count: checked before the model is built
PY
expect_error "version 7" $TRAINER $GOOD -e $D/version7.bin
expect_error "should be" $TRAINER $GOOD -e $D/truncated.bin
expect_error "not divisible by heads" $TRAINER $GOOD -e $D/heads.bin
expect_error "should be [0-9]* bytes for this header" $TRAINER $GOOD -e $D/layers.bin  # (it crashed: the fuzz found it)

# token shards
expect_error "no token shards match" $TRAINER $GOOD -i "$D/nothing_*.bin"
expect_error "run \`make data\`" $TRAINER $GOOD -i $D/missing_train.bin
cp $REF/train.bin $D/bad_magic.bin; printf '\x01\x02\x03\x04' | dd of=$D/bad_magic.bin conv=notrunc status=none
expect_error "magic" $TRAINER $GOOD -i $D/bad_magic.bin
head -c 2000 $REF/train.bin > $D/short_shard.bin
expect_error "header says" $TRAINER $GOOD -i $D/short_shard.bin
$PYTHON - $D <<'PY'
import sys, numpy as np
d = sys.argv[1]
h = np.zeros(256, dtype=np.int32); h[:3] = [20240520, 1, 100]
toks = np.full(100, 7, dtype=np.uint16); toks[5::9] = 60000   # outside the vocabulary, in every sample
open(f"{d}/oov.bin", "wb").write(h.tobytes() + toks.tobytes())
h[2] = 10; open(f"{d}/tiny.bin", "wb").write(h.tobytes() + toks[:10].tobytes())
h[1] = 3; h[2] = 100; open(f"{d}/version3.bin", "wb").write(h.tobytes() + toks.tobytes())
PY
expect_error "outside the vocabulary" $TRAINER $GOOD -i $D/oov.bin
# the tokenizer file (samples): a token count beyond the file is refused, not allocated (fuzz_inputs.py
# once drew V = 2^31 - 1: 64 GB asked for, std::bad_alloc)
$PYTHON - $D <<'PY'
import sys, numpy as np
d = sys.argv[1]
h = np.zeros(256, dtype=np.uint32); h[:4] = [20240328, 2, 2**31 - 1, 50256]
open(f"{d}/huge_vocab_tok.bin", "wb").write(h.tobytes() + b"\x01a" * 100)
PY
expect_error "says 2147483647 tokens but holds 200 bytes" $TRAINER $GOOD -s 1 -g 4 -tok $D/huge_vocab_tok.bin
for k in 1 2 3; do  # random bytes as a shard: a clear error, never a crash
    head -c $((k * 3000)) /dev/urandom > $D/random_shard.bin
    expect_error "token shard" $TRAINER $GOOD -i $D/random_shard.bin
done
expect_error "fewer than one global micro-batch" $TRAINER $GOOD -i $D/tiny.bin
expect_error "has version 3" $TRAINER $GOOD -i $D/version3.bin

# flags
expect_error "not a multiple of B\*T\*dp" $TRAINER $GOOD -d 100
expect_error "unknown flag '-zz'" $TRAINER $GOOD -zz 1
expect_error "expects an integer" $TRAINER $GOOD -b two
expect_error "needs a value" $TRAINER $GOOD -b
expect_error "exceeds the model's maximum sequence length" $TRAINER $GOOD -t 4096
expect_error "flag -l must be a finite number" $TRAINER $GOOD -l nan
expect_error "flag -q must be a finite number in \[0, 1\]" $TRAINER $GOOD -q 1.5
expect_error "flag -b must be an integer in" $TRAINER $GOOD -b 99999999999
expect_error "overflow a 32-bit index" $TRAINER $GOOD -b 65536 -t 65536
expect_error "-x must be -1" $TRAINER $GOOD -x 0
expect_error "-comm expects nccl or mpi" $TRAINER $GOOD -comm carrier-pigeon
case "$TRAINER" in *_cpu*) expect_error "NCCL is the GPU build's backend" $TRAINER $GOOD -comm nccl ;; esac

# more memory than the machine has: refused before anything is allocated, one line that says what
# is needed and what would fit. GPT-2 124M at T=1024 plans ~1.1 GiB per sequence: B=64 (~70 GiB) fit
# an H200's 141 GB; B=1024 (~1.1 TiB) fits no GPU and no CI host (DOES_NOT_FIT_B to ask for more)
expect_error "does not fit in memory" $TRAINER $GOOD -e d12 -b ${DOES_NOT_FIT_B:-1024} -t 1024

# a launcher of another MPI (here: Open MPI's variables around an MPICH build) that started 2 ranks,
# each seeing a world of 1: one line, not two single-rank runs writing the same files
expect_error "MPI sees 1 rank but the launcher started OMPI_COMM_WORLD_SIZE=2" env OMPI_COMM_WORLD_SIZE=2 $TRAINER $GOOD

# -o checked before any work, on every rank (it used to surface at the first checkpoint, after the
# training): a regular file, a directory nobody can create, one that takes no file (/proc), and one
# without room for a checkpoint (a 1 MiB tmpfs: the model file alone is 12.7 MiB)
out_refused() {  # out_refused "EXPECTED" DIR: 2 ranks, both say it, exit 1, no step taken
    local want=$1 dir=$2 code=0
    timeout 120 mpirun -np 2 $TRAINER $GOOD -n 1 -o $dir > $D/out.txt 2> $D/err.txt || code=$?
    local count=$(grep -c -- "^error: -o $dir.*$want" $D/err.txt || true) lines=$(grep -c . $D/err.txt || true)
    if [ $code -ne 1 ] || [ "$count" -ne 2 ] || [ "$lines" -ne 2 ] || grep -q "^step" $D/out.txt; then
        echo "FAIL: -o $dir -> exit $code, $count of 2 ranks said '$want' in $lines stderr lines (want one each): $(head -c 300 $D/err.txt)"; fails=$((fails + 1))
    else echo "ok (2 ranks, before step 1): $(head -n 1 $D/err.txt)"; fi
}
touch $D/a_file
out_refused "is not a directory" $D/a_file
out_refused "cannot create the directory" /proc/no_such_dir
out_refused "cannot write a file there" /proc
mkdir -p $D/small
if mount -t tmpfs -o size=1m tmpfs $D/small; then
    out_refused "MiB free, one checkpoint needs" $D/small
    umount $D/small
else echo "FAIL: cannot mount a 1 MiB tmpfs (root is needed) for the full-disk case"; fails=$((fails + 1)); fi
expect_error "cannot create the directory" $TRAINER $GOOD -o $D/made/here  # -o two levels down: not created
[ -e $D/made ] && { echo "FAIL: -o two levels down: $D/made was created"; fails=$((fails + 1)); }

# a failing run leaves an existing model file alone
# (the file must exist and be non-empty first: two md5s of a missing file are equal too)
mkdir -p $D/out
$TRAINER $GOOD -o $D/out > /dev/null 2>&1 || { echo "FAIL: good run"; fails=$((fails + 1)); }
if [ -s $D/out/model_00000001.bin ]; then
    sum_before=$(md5sum < $D/out/model_00000001.bin)
    expect_error "outside the vocabulary" $TRAINER $GOOD -o $D/out -i $D/oov.bin
    if [ ! -s $D/out/model_00000001.bin ]; then echo "FAIL: the failing run removed or emptied the model file"; fails=$((fails + 1))
    elif [ "$(md5sum < $D/out/model_00000001.bin)" != "$sum_before" ]; then echo "FAIL: the failing run changed the model file"; fails=$((fails + 1))
    else echo "ok: the failing run left the model file as it was"; fi
else echo "FAIL: the good run wrote no model file $D/out/model_00000001.bin (nothing to keep unchanged)"; fails=$((fails + 1)); fi

# -h, docs/flags.md and the README list every flag of the option table (options.h: option_table),
# read from the table itself so that a new flag cannot be left out of the list checked
$TRAINER -h > $D/help.txt || { echo "FAIL: -h exit code"; fails=$((fails + 1)); }
table=$(grep -o '^ *{"-[a-z]*"' options.h | tr -d ' {"')
count=$(printf '%s\n' $table | wc -l)  # (echo would take the first flag, -e, as its own option)
[ $count -ge 40 ] || { echo "FAIL: read $count flags from options.h"; fails=$((fails + 1)); }
for flag in $table -h; do
    grep -q -- "^  $flag " $D/help.txt || { echo "FAIL: -h does not list $flag"; fails=$((fails + 1)); }
done
for flag in $table; do
    grep -q -- "\`$flag\`" docs/flags.md || { echo "FAIL: docs/flags.md does not explain $flag"; fails=$((fails + 1)); }
    grep -q -- "\`$flag\`" README.md || { echo "FAIL: the README's flag list lacks $flag"; fails=$((fails + 1)); }
done
echo "$fails failures"
[ $fails -eq 0 ]

#!/usr/bin/env bash
# llm.c's command line here (llmc.h, options.h), each case against llm.c's own definitions written
# out in this test, not read back from the trainer:
#  - -k cosine|linear|constant|wsd: every step's learning rate in the log equals llm.c's
#    llmc/schedulers.h formulas (computed below in float64; wsd's decay point as llm.c's float
#    product) within 1e-7 relative;
#  - -sl/-sg: the steps skipped are exactly those whose loss or norm z-score over the last 128 steps,
#    computed here from the log's values by llm.c's outlier_detector.h algorithm, is above the bound;
#    a run resumed from a checkpoint before a skip logs the same rows and ends with the same model
#    file, byte for byte (the windows are in the checkpoint);
#  - -a 1: with -l 0 every step sees the same batch (equal losses); without it they differ;
#  - -nm with -nk: the major checkpoints stay, the newest -nk others too, nothing else;
#  - -e dN, gpt2:dN, gpt3:cC: the parameter count -plan prints equals llm.c's table's model, computed
#    here (N = Vp C + maxT C + L (12 C^2 + 13 C) + 2 C);
#  - llm.c's launch flags (-pn -pr -pg -pm -pi -pf) refused in one line; -pp and -ps name both meanings;
#  - -o: llm.c's main.log lines (trl, tel) equal the JSON log's values to 4 decimals, and DONE_%08d
#    marks the finished run;
#  - -w 0 (bf16): 8 optimizer bytes a parameter in -plan, not 12; losses that part from -w 1's after the
#    first step; a bit-exact resume; a -w 1 checkpoint resumed under -w 0, a -w 0 one refused under -w 1;
#  - every flag of llm.c's five run scripts (scripts/run_gpt2_124M.sh ... run_gpt3_125M.sh), data paths
#    aside, is accepted through -plan 1 (HellaSwag itself, -h 1: tests/test_hellaswag.py).
# Usage: test_llmc_flags.sh REFERENCE_DIR
set -euo pipefail
REF=${1:?usage: test_llmc_flags.sh REFERENCE_DIR}; PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/llmc_flags; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
RUN="./train_gpt_cpu -e $REF/model.bin -i $REF/train.bin -v 0 -s 0"

# the four schedulers: 12 steps, warmup 3, decay to 0.1 of 1e-3
for k in cosine linear constant wsd; do
    $RUN -b 1 -t 16 -x 12 -u 3 -q 0.1 -l 1e-3 -k $k -log $D/k_$k.jsonl > /dev/null
done
$PYTHON - $D <<'PY'
import json, math, sys
import numpy as np
d = sys.argv[1]
lr, W, N, frac = 1e-3, 3, 12, 0.1
def llmc(kind, step):  # llm.c's llmc/schedulers.h, float64
    lr_min = lr * frac
    if kind == "constant":
        return lr
    if step < W:
        return lr * (step + 1) / W
    if kind == "wsd":
        D = int(np.float32(0.8) * np.float32(N))
        if step < D:
            return lr
        return lr_min + (1 - math.sqrt((step - D) / (N - D))) * (lr - lr_min)
    ratio = (step - W) / (N - W)
    if kind == "cosine":
        return lr_min + 0.5 * (1 + math.cos(math.pi * ratio)) * (lr - lr_min)
    return lr - ratio * (lr - lr_min)  # linear
for kind in ("cosine", "linear", "constant", "wsd"):
    rows = [json.loads(l) for l in open(f"{d}/k_{kind}.jsonl")]
    assert len(rows) == N, f"-k {kind}: {len(rows)} rows"
    for r in rows:
        want = llmc(kind, r["step"] - 1)
        assert abs(r["lr"] - want) <= 1e-7 * want, \
            f"FAIL: -k {kind} step {r['step']}: lr {r['lr']!r}, llm.c's formula {want!r}"
    print(f"-k {kind}: {N} steps equal llm.c's formula: {[round(r['lr'], 7) for r in rows]}")
PY

# -sl/-sg: 150 steps, the windows full from step 128; bounds low enough that some steps are skipped
OUT="-b 1 -t 16 -l 1e-4 -sl 0.5 -sg 0.3 -n 140"
$RUN $OUT -x 150 -o $D/whole -log $D/whole.jsonl > $D/whole.txt
mkdir -p $D/resumed && cp $D/whole/*_00000140* $D/resumed/
cp $D/whole.jsonl $D/resumed.jsonl && sed -i '141,$d' $D/resumed.jsonl  # the rows up to the checkpoint
$RUN $OUT -x 150 -o $D/resumed -y 1 -log $D/resumed.jsonl > $D/resumed.txt
grep -q "resuming from step 140" $D/resumed.txt || { echo "FAIL: -sl/-sg: did not resume from step 140"; exit 1; }
$PYTHON - $D <<'PY'
import json, math, sys
d = sys.argv[1]
W = 128
def z_scores(values):  # llm.c's llmc/outlier_detector.h: running sums, the window including the value
    buf, count, index, s, sq, out = [0.0] * W, 0, 0, 0.0, 0.0, []
    for x in values:
        if count < W:
            buf[count] = x; s += x; sq += x * x; count += 1; out.append(float("nan")); continue
        old = buf[index]; s -= old; sq -= old * old
        buf[index] = x; s += x; sq += x * x; index = (index + 1) % W
        mean = s / W; std = math.sqrt(sq / W - mean * mean)
        out.append(0.0 if std == 0.0 else (x - mean) / std)
    return out
rows = [json.loads(l) for l in open(f"{d}/whole.jsonl")]
zl, zn = z_scores([r["loss"] for r in rows]), z_scores([r["norm"] for r in rows])
want = [r["step"] for r, a, b in zip(rows, zl, zn) if a > 0.5 or b > 0.3]
got = [r["step"] for r in rows if r.get("skipped")]
assert got == want, f"FAIL: -sl 0.5 -sg 0.3: skipped steps {got}, the z-scores computed apart say {want}"
assert all(r.get("outlier") for r in rows if r.get("skipped")), "FAIL: a skipped step not marked as an outlier"
assert [s for s in got if s > 140], f"FAIL: no skip after the checkpoint (step 140) to resume across: {got}"
resumed = [json.loads(l) for l in open(f"{d}/resumed.jsonl")]
for a, b in zip(rows[140:], resumed[140:]):
    for key in ("step", "loss", "norm", "lr", "skipped"):
        assert a.get(key) == b.get(key), f"FAIL: resumed at 140: step {a['step']} {key} {a.get(key)} != {b.get(key)}"
assert len(resumed) == len(rows), f"FAIL: resumed log has {len(resumed)} rows"
print(f"-sl/-sg: skipped {got} (of {len(rows)}), as the z-scores computed apart say; resumed at 140: the same rows")
PY
cmp $D/whole/model_00000150.bin $D/resumed/model_00000150.bin || { echo "FAIL: -sl/-sg: resumed model differs"; exit 1; }

# -a 1: the first batch every step (at -l 0 the loss repeats exactly); without it the data moves on
for a in 0 1; do $RUN -b 2 -t 16 -x 4 -l 0 -a $a -log $D/a$a.jsonl > /dev/null; done
$PYTHON - $D <<'PY'
import json, sys
d = sys.argv[1]
same = [json.loads(l)["loss"] for l in open(f"{d}/a1.jsonl")]
moving = [json.loads(l)["loss"] for l in open(f"{d}/a0.jsonl")]
assert len(set(same)) == 1, f"FAIL: -a 1 at -l 0: the losses {same} should repeat (one batch)"
assert len(set(moving)) == 4 and moving[0] == same[0], f"FAIL: -a 0 at -l 0: losses {moving}"
print(f"-a 1: loss {same[0]:.6f} at every step; -a 0: {len(set(moving))} different losses")
PY

# -nm 3 -nk 2 over 8 checkpoints: 3 and 6 (major) and the newest two (7, 8) stay
$RUN -b 1 -t 16 -x 8 -n 1 -nk 2 -nm 3 -o $D/major > /dev/null
left=$(cd $D/major && ls complete_* | sed 's/complete_0*//' | sort -n | tr '\n' ' ')
[ "$left" = "3 6 7 8 " ] || { echo "FAIL: -nk 2 -nm 3: checkpoints left: $left, expected 3 6 7 8"; exit 1; }
for s in 1 2 4 5; do
    [ -z "$(ls $D/major/*_0000000${s}* 2> /dev/null)" ] || { echo "FAIL: -nk 2 -nm 3: step $s's files left"; exit 1; }
done
echo "-nk 2 -nm 3: checkpoints $left left"

# -w 0 (the bf16 build): AdamW on the bf16 weights, no fp32 master. The optimizer's bytes in -plan
# are 8 a parameter (m, v) where -w 1 keeps 12, P read from the same line; the run differs from -w 1's
# from its second step on; it resumes bit for bit; a -w 1 checkpoint resumes under -w 0 (its master left,
# as llm.c warns), a -w 0 checkpoint is refused under -w 1 in one line (llm.c refuses it too)
BF="./train_gpt_cpu_bf16 -e $REF/model.bin -i $REF/train.bin -v 0 -s 0 -b 1 -t 16"
for w in 0 1; do $BF -w $w -plan 1 | grep '^{' > $D/w$w.plan.jsonl; done
$PYTHON - $D <<'PY'
import json, sys
d = sys.argv[1]
for w, K in ((0, 8), (1, 12)):
    plan = json.loads(open(f"{d}/w{w}.plan.jsonl").readline())
    P, got = plan["num_parameters"], plan["memory"]["optimizer"]
    assert got == K * P, f"FAIL: -w {w}: -plan books {got} optimizer bytes for {P} parameters, {K} a parameter is {K * P}"
print(f"-w 0: -plan books 8 optimizer bytes a parameter, -w 1 12 ({P} parameters)")
PY
for w in 0 1; do $BF -w $w -x 4 -n 2 -o $D/w$w -log $D/w$w.jsonl > $D/w$w.txt; done
$PYTHON - $D <<'PY'
import json, sys
d = sys.argv[1]
w0, w1 = ([json.loads(l)["loss"] for l in open(f"{d}/w{w}.jsonl")] for w in (0, 1))
assert w0[0] == w1[0] and w0[1:] != w1[1:], f"FAIL: -w 0 losses {w0} against -w 1's {w1}: the same first, then not"
print(f"-w 0: losses {[round(x, 6) for x in w0]}, -w 1: {[round(x, 6) for x in w1]}")
PY
mkdir -p $D/w0_again $D/w1_to_w0 $D/w0_to_w1
cp $D/w0/*_00000002* $D/w0_again/ && cp $D/w1/*_00000002* $D/w1_to_w0/ && cp $D/w0/*_00000002* $D/w0_to_w1/
$BF -w 0 -x 4 -n 2 -o $D/w0_again -y 1 > $D/w0_again.txt
cmp $D/w0/model_00000004.bin $D/w0_again/model_00000004.bin || { echo "FAIL: -w 0 resumed at step 2: model differs"; exit 1; }
$BF -w 0 -x 4 -n 2 -o $D/w1_to_w0 -y 1 > $D/w1_to_w0.txt
grep -q "^note: .*optimizer_00000002.bin: its fp32 master weights are left (-w 0)" $D/w1_to_w0.txt && grep -q "resuming from step 2" \
    $D/w1_to_w0.txt || { cat $D/w1_to_w0.txt; echo "FAIL: a -w 1 checkpoint resumed under -w 0"; exit 1; }
code=0; $BF -w 1 -x 4 -n 2 -o $D/w0_to_w1 -y 1 > $D/w0_to_w1.txt 2>&1 || code=$?
[ $code -eq 1 ] && [ "$(grep -c error $D/w0_to_w1.txt)" -eq 1 ] && grep -q \
    "^error: .*optimizer_00000002.bin was written under -w 0 (no fp32 master weights); resume it with -w 0" $D/w0_to_w1.txt \
    || { cat $D/w0_to_w1.txt; echo "FAIL: a -w 0 checkpoint under -w 1: exit $code"; exit 1; }
echo "-w 0: resumed bit for bit; a -w 1 checkpoint resumes under -w 0; $(grep -m1 error $D/w0_to_w1.txt)"

# model descriptors: llm.c's tables (train_gpt2.cu: gpt2_set_hyperparameters, gpt3_set_hyperparameters)
while read -r name L C maxT; do
    out=$(./train_gpt_cpu -e $name -b 1 -t 64 -plan 1 2>&1) || { echo "$out" | tail -2; echo "FAIL: -e $name"; exit 1; }
    n=$(grep -m1 -o '| [0-9]* parameters' <<< "$out" | grep -o '[0-9]*')
    want=$(( 50304 * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C ))
    [ "$n" = "$want" ] || { echo "FAIL: -e $name: $n parameters, llm.c's L $L C $C T $maxT has $want"; exit 1; }
done <<'MODELS'
d6 6 384 1024
d12 12 768 1024
gpt2:d24 24 1024 1024
d36 36 1280 1024
d48 48 1600 1024
d60 60 1920 1024
d72 72 2880 1024
d84 84 3456 1024
d4 4 256 1024
gpt3:c768 12 768 2048
gpt3:c1536 24 1536 2048
gpt3:c2560 32 2560 2048
MODELS
echo "-e dN, gpt2:dN, gpt3:cC: parameter counts as llm.c's tables give them"

# llm.c's launch flags and the two letters that mean something else here
for f in -pn -pr -pg -pm -pi -pf; do
    code=0; ./train_gpt_cpu $f 1 -e d2 > $D/launch.txt 2>&1 || code=$?
    [ $code -eq 1 ] && [ "$(grep -c '^error:' $D/launch.txt)" = 1 ] && grep -q "llm.c's .* mpirun" $D/launch.txt \
        || { cat $D/launch.txt; echo "FAIL: llm.c's launch flag $f: exit $code"; exit 1; }
done
code=0; ./train_gpt_cpu -pp /tmp -e d2 > $D/pp.txt 2>&1 || code=$?
[ $code -eq 1 ] && grep -q "pipeline stages; llm.c's -pp" $D/pp.txt || { cat $D/pp.txt; echo "FAIL: -pp /tmp"; exit 1; }
code=0; ./train_gpt_cpu -ps 10.1.2.3 -e d2 -x 1 > $D/ps.txt 2>&1 || code=$?
[ $code -eq 1 ] && grep -q "llm.c's -ps, the server IP" $D/ps.txt || { cat $D/ps.txt; echo "FAIL: -ps 10.1.2.3"; exit 1; }
echo "llm.c's launch flags refused in one line each; -pp and -ps name both meanings"

# main.log and DONE
$RUN -b 1 -t 16 -x 4 -j $REF/train.bin -v 2 -m 1 -o $D/logged -log $D/logged.jsonl > /dev/null
[ -f $D/logged/DONE_00000004 ] || { ls $D/logged; echo "FAIL: no DONE_00000004 after the run"; exit 1; }
$PYTHON - $D <<'PY'
import json, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/logged.jsonl")]
want = []
for r in rows:
    want.append(f"s:{r['step'] - 1} trl:{r['loss']:.4f} lr:{r['lr']:.6f} norm:{r['norm']:.2f}")
    if "val_loss" in r:
        want.append(f"s:{r['step']} tel:{r['val_loss']:.4f}")
got = open(f"{d}/logged/main.log").read().splitlines()
assert got == want, f"FAIL: main.log {got}, expected llm.c's lines {want}"
print(f"main.log: {len(got)} lines in llm.c's format, e.g. {got[0]!r}")
PY

# every flag of llm.c's five scripts but the data paths, through -plan 1
while read -r name flags; do
    out=$(./train_gpt_cpu $flags -o $D/log_$name -plan 1 2>&1) || { echo "$out" | tail -3; echo "FAIL: llm.c's $name flags"; exit 1; }
done <<'SCRIPTS'
run_gpt2_124M -v 250 -s 20000 -g 144 -h 1 -b 64 -t 1024 -d 524288 -r 0 -z 1 -c 0.1 -l 0.0006 -q 0.0 -u 700 -n 5000 -y 1 -e d12
run_gpt2_350M -v 250 -s 100000 -g 144 -h 1 -b 64 -t 1024 -d 524288 -r 0 -z 1 -c 0.1 -l 0.0003 -q 0.0 -u 700 -n 2000 -x 60000 -y 1 -e d24
run_gpt2_774M -v 250 -s 300000 -g 144 -h 1 -b 32 -t 1024 -d 524288 -r 0 -z 1 -c 0.1 -l 0.00025 -q 0.0 -u 700 -n 4000 -x 286102 -y 1 -e d36
run_gpt2_1558M -v 250 -s 300000 -g 384 -h 1 -b 16 -t 1024 -d 1048576 -r 0 -z 1 -c 0.1 -k cosine -l 0.0006 -q 0.1 -u 700 -n 2000 -x 32000 -ge 1 -y 1 -e d48
run_gpt3_125M -v 250 -s 20000 -g 144 -h 1 -b 32 -t 2048 -d 524288 -r 0 -z 1 -c 0.1 -l 0.0006 -q 0.1 -u 700 -n 10000 -nk 5 -nm 50000 -ge 1 -sl 7.0 -sg 7.0 -y 1 -x 572204 -e gpt3:c768
SCRIPTS
echo "llm.c's five scripts' flags accepted through -plan 1"
echo "ok: llm.c's flags"

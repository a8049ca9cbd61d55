#!/usr/bin/env bash
# The kernel ledger (ledger.h, -plan 1 -gpu) against what the CUDA build's kernels really launch,
# touch and compute, measured by the emulated build (CUDA_EMU_LAUNCH_REPORT, tests/emu/cuda_emu.cpp:
# page protection counts the distinct device bytes each launch reads or writes; the emulated cuBLAS
# and cuBLASLt count each GEMM's 2 m n k from the sizes the call was given). One step is the
# difference between a 2-step and a 1-step run (start-up and the end cancel), at a size where the
# tensors span many 4 KB pages (GPT-2 d4, T 256), in bf16 at B 4, and in fp32 at B 2 with -r 2, -ge 2,
# -ga fp32 and 2 micro-steps. Asserted, for every kernel: the ledger names every kernel the step
# launches, each with the measured number of launches; its bytes (read + written + updated) within
# 5% of the touched bytes (measured within 0.7%; the page grain's share taken out where it is known,
# below); the GEMMs' FLOPs equal to the emulated cuBLAS's count, every other kernel's FLOPs equal
# to a formula written here (per launch, from the model's sizes); the d12 ledger's GEMM FLOPs =
# 6 N' per token; each row's roofline time recomputed from the datasheets' numbers (written below,
# apart from ledger.h); bad -gpu flags refused in one line a rank. Usage: test_ledger.sh
# (LEDGER_CASES=bf16: only the bf16 step, one emulated build, for a mutant's check; default all)
#
# The token file is made here: token i is i mod 1024, so each micro-batch (1024 or 512 tokens,
# starting at a multiple of its size) holds distinct tokens, consecutive wte rows. Then the rows the
# embedding's kernels read and update are the ledger's min(N, V) exactly (on text, where tokens
# repeat, that is an upper bound), and they fill whole pages (on text, 8 rows a page, one row read
# counts its page).
set -euo pipefail
PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/ledger; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=2
$PYTHON - $D/tokens.bin <<'PY'
import sys
import numpy as np
n = 64 * 1024 + 1  # 64 micro-batches of 1024 tokens, and the last target
header = np.zeros(256, np.int32)
header[:3] = (20240520, 1, n)  # llm.c's shard header (dataloader.h)
with open(sys.argv[1], "wb") as f:
    f.write(header.tobytes())
    f.write((np.arange(n) % 1024).astype(np.uint16).tobytes())
PY
case_run() {  # case_run NAME TRAINER FLAGS...: the ledger, and the launch reports of 1 and 2 steps
    local name=$1 trainer=$2; shift 2
    $trainer -e d4 -t 256 -i $D/tokens.bin -j $D/tokens.bin "$@" -plan 1 -gpu H100 | grep '^{"ledger' > $D/$name.ledger.json \
        || { echo "FAIL: $name: no ledger line from -plan 1 -gpu H100"; exit 1; }
    for n in 1 2; do
        CUDA_EMU_LAUNCH_REPORT=$D/$name.report$n.jsonl timeout 600 $trainer -e d4 -t 256 -i $D/tokens.bin -j $D/tokens.bin "$@" \
            -x $n -v 0 -s 0 > $D/$name.run$n.txt 2>&1 || { tail -n 5 $D/$name.run$n.txt; echo "FAIL: $name: the $n-step emulated run"; exit 1; }
    done
}
CASES=${LEDGER_CASES:-bf16 fp32 d12}
case_run bf16 ./train_gpt_emu -b 4
[[ $CASES != *fp32* ]] || case_run fp32 ./train_gpt_emu_fp32 -b 2 -r 2 -ga fp32 -d 1024 -ge 2
[[ $CASES != *d12* ]] || ./train_gpt_cpu_bf16 -e d12 -b 64 -t 1024 -plan 1 -gpu H100 > $D/d12.txt || { echo "FAIL: d12's -plan 1 -gpu H100"; exit 1; }

refuse() {  # refuse PATTERN NP FLAGS...: exit 1 and, on each of NP ranks, one line matching PATTERN
    local pattern=$1 np=$2; shift 2
    set +e; out=$(timeout 60 mpirun -np $np ./train_gpt_cpu -e d2 -b 2 -t 32 "$@" 2>&1); code=$?; set -e
    [ $code -eq 1 ] || { echo "$out"; echo "FAIL: $*: exit $code, not 1"; exit 1; }
    # one line a rank, each the refusal
    [ "$(echo "$out" | wc -l)" -eq $np ] && [ "$(grep -cF -- "$pattern" <<< "$out")" -eq $np ] \
        || { echo "$out"; echo "FAIL: $*: not one line a rank matching '$pattern'"; exit 1; }
}
if [[ $CASES == *d12* ]]; then
refuse "-gpu expects H100, H200 or A100, got 'V100'" 1 -plan 1 -gpu V100
refuse "add -plan 1" 1 -gpu H100
refuse "one GPU holding the whole model" 2 -plan 1 -gpu H100 -tp 2
fi

$PYTHON - $D "$CASES" <<'PY'
import json, sys
d, cases = sys.argv[1], sys.argv[2].split()
failures = []
def fail(line):  # every mismatch is printed, then the test fails
    failures.append(line)
    print("FAIL: " + line)

# datasheets, apart from ledger.h: H100 SXM5 989.4 TFLOP/s bf16 dense, 66.9 fp32, 3.35 TB/s
H100 = dict(tensor=989.4e12, fp32=66.9e12, bw=3.35e12)
PAGE = 4096

def report(path):
    return {r["kernel"]: r for r in map(json.loads, open(path))}

# GPT-2 d4 (ledger.h's sizes apart: mfu.h's convention for the parameters)
L, C, NH, Vp, maxT, T = 4, 256, 4, 50304, 1024, 256
P = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
GEMMS = ("cublasGemmStridedBatchedEx", "cublasLtMatmul")  # their FLOPs: the emulated cuBLAS's count

def flops_per_launch(k, B, X):
    """a launch's FLOPs by the ledger's convention (kernels/ledger.cuh: a multiply-add is 2), from the sizes"""
    N = B * T
    pairs = B * NH * T * (T + 1) / 2  # causal (query, key) pairs: each a dot product of hs = C / NH per product
    per_product = 2 * (C // NH) * pairs
    table = {
        "encoder_forward_kernel": N * C,                 # wte + wpe, an add an element
        "encoder_backward_wte_kernel": N * C,            # dout added into its token's row
        "encoder_backward_wpe_kernel": N * C,            # and into its position's row
        "layernorm_forward_kernel": 8 * N * C,           # mean, variance, normalise, scale and shift
        "residual_layernorm_forward_kernel": 9 * N * C,  # the residual's add, then the LayerNorm
        "layernorm_backward_kernel128": 18 * N * C,      # the input half (12) and the weight and bias sums (6)
        "gelu_forward_kernel128": 20 * 4 * N * C,        # tanh's GELU over the fc's 4C outputs
        "gelu_backward_kernel128": 25 * 4 * N * C,
        "residual_forward_kernel128": N * C,
        "bias_backward_partials_kernel": N * 9 * C,      # a block's four biases (qkv 3C, attproj C, fc 4C, fcproj C), an add a value
        "crossentropy_fused_kernel128": 6 * N * Vp,      # max, exp, sum, the loss, the gradient: ~6 a logit
        "flash_forward_wmma_kernel<HS_MAX, Out>": 2 * per_product,  # q k^T, p v
        "flash_forward_kernel<HS_MAX>": 2 * per_product,
        "flash_dq_wmma_kernel<HS_MAX, Out>": 3 * per_product,       # q k^T again, dout v^T, ds k
        "flash_dq_kernel<HS_MAX>": 3 * per_product,
        "flash_dkv_wmma_kernel<HS_MAX, Out>": 4 * per_product,      # q k^T, dout v^T, p^T dout, ds^T q
        "flash_dkv_kernel<HS_MAX>": 4 * per_product,
        "flash_row_dot_kernel128": 2 * N * C,            # D = rowsum(dout * out)
        "flash_output_kernel128": N * C,                 # the fp32 output rounded
        "flash_gradients_kernel128": 3 * N * C,          # dq, dk, dv rounded into dqkv
        "norm_partials_kernel<T>": 2 * P,                # a square and an add a gradient value
        "adamw_slices_kernel<Grad>": 15 * P,
        "gradient_accumulate_kernel<Acc>": P,            # the fp32 sum += the micro-step's gradient
        "cudaMemset": 0, "cudaMemcpyDeviceToDevice": 0,
    }
    if k not in table:
        fail(f"no FLOPs formula here for kernel {k}: add one")
        return None
    return table[k]

def page_grain(k, B, X):
    """bytes a launch is measured above what it touches, where the page grain is known: flash attention's
    WMMA backward writes column slices of dqkv (N, 3C) (dq the first C, dk dv the last 2C); a row of
    3C values is under a page, so every page of dqkv is counted (a GPU moves 32-byte sectors)"""
    N = B * T
    assert 3 * C * X < PAGE
    return {"flash_dq_wmma_kernel<HS_MAX, Out>": 2 * N * C * X, "flash_dkv_wmma_kernel<HS_MAX, Out>": N * C * X}.get(k, 0)

for name, B, X, accum in (("bf16", 4, 2, 1), ("fp32", 2, 4, 2)):
    if name not in cases: continue
    a, b = report(f"{d}/{name}.report1.jsonl"), report(f"{d}/{name}.report2.jsonl")
    measured = {}  # kernel -> (launches, bytes touched less the page grain's share, FLOPs: the GEMMs' counted, else the formula's)
    for k, r in b.items():
        r0 = a.get(k, {"launches": 0, "bytes_touched": 0, "flops": 0})
        n = r["launches"] - r0["launches"]
        if n:
            per_launch = flops_per_launch(k, B, X) if k not in GEMMS else 0
            flops = r["flops"] - r0["flops"] if k in GEMMS else None if per_launch is None else n * per_launch
            measured[k] = (n, r["bytes_touched"] - r0["bytes_touched"] - n * page_grain(k, B, X), flops)
    ledger = json.load(open(f"{d}/{name}.ledger.json"))
    declared = {}  # kernel -> (launches, bytes, FLOPs) a step
    for r in ledger["ledger"]:
        times = accum if r["per"] == "micro" else 1
        n, by, fl = declared.get(r["kernel"], (0, 0, 0))
        declared[r["kernel"]] = (n + times * r["launches"], by + times * (r["bytes_read"] + r["bytes_written"] + r["bytes_updated"]),
                                 fl + times * r["flops"])
    total_touched = sum(m[1] for m in measured.values())
    total_declared = sum(l[1] for l in declared.values())
    print(f"{name}: {'kernel':38s} launches measured/ledger, MB touched/declared, GFLOP counted or formula/ledger")
    for k in sorted(set(measured) | set(declared)):
        m, l = measured.get(k, (0, 0, 0)), declared.get(k, (0, 0, 0))
        print(f"  {k:38s} {m[0]:5d} {l[0]:5d} {m[1] / 1e6:10.3f} {l[1] / 1e6:10.3f} {(m[2] or 0) / 1e9:10.4f} {l[2] / 1e9:10.4f}")
    print(f"  sum: touched {total_touched / 1e6:.3f} MB, declared {total_declared / 1e6:.3f} MB")
    for k in sorted(set(measured) - set(declared)):
        fail(f"{name}: kernel {k} launched {measured[k][0]} times a step, not in the ledger")
    for k in sorted(set(declared) - set(measured)):
        fail(f"{name}: kernel {k} in the ledger ({declared[k][0]} launches), not launched")
    for k in sorted(set(measured) & set(declared)):
        (n, touched, want), (ln, lb, lf) = measured[k], declared[k]
        if n != ln:
            fail(f"{name}: {k}: launches a step measured {n}, ledger {ln}")
        if not abs(lb - touched) <= 0.05 * touched:
            fail(f"{name}: {k}: bytes a step declared {lb:.0f}, touched {touched:.0f} ({100 * (lb / max(touched, 1) - 1):+.1f}%, bar 5%)")
        if want is None: continue  # (failed above: no formula)
        if not abs(lf - want) <= 1e-9 * want:  # integers below 2^53 each: equal but for the sums' rounding
            fail(f"{name}: {k}: FLOPs a step ledger {lf:.0f}, {'the emulated cuBLAS counted' if k in GEMMS else 'the formula'} {want:.0f}")
    if not abs(total_declared - total_touched) <= 0.05 * total_touched:
        fail(f"{name}: bytes of the step declared {total_declared:.0f}, touched {total_touched:.0f}")

if "d12" not in cases: sys.exit(1 if failures else 0)
# the roofline, recomputed: each row max(FLOPs / peak', DRAM bytes / bandwidth), tensor-core rows at 70% of the bf16 peak
out = open(f"{d}/d12.txt").read()
led = json.loads(next(l for l in out.splitlines() if l.startswith('{"ledger"')))
micro = step = 0.0
for r in led["ledger"]:
    tc = r["kernel"].startswith("cublas") or "wmma" in r["kernel"]
    peak = 0.7 * H100["tensor"] if tc else H100["fp32"]
    ms = 1e3 * max(r["flops"] / peak, (r["bytes_read"] + r["bytes_written"] + 2 * r["bytes_updated"]) / H100["bw"])
    if not abs(ms - r["ms"]) <= 1e-4 * ms + 1e-6:
        fail(f"d12: {r['kernel']}: roofline ms {r['ms']}, recomputed {ms}")
    if r["per"] == "micro": micro += ms
    else: step += ms
roof = led["roofline"]
tokens = 64 * 1024
L, C, Vp, maxT = 12, 768, 50304, 1024
N = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
if not (abs(roof["ms_per_micro_step"] - micro) <= 1e-3 * micro and abs(roof["ms_per_step"] - (micro + step)) <= 1e-3 * micro):
    fail(f"d12: roofline ms per micro-step {roof['ms_per_micro_step']}, per step {roof['ms_per_step']}; recomputed {micro}, {micro + step}")
if not abs(roof["tokens_per_s"] - tokens / ((micro + step) / 1e3)) <= 1e-3 * roof["tokens_per_s"]:
    fail(f"d12: roofline tokens/s {roof['tokens_per_s']}, recomputed {tokens / ((micro + step) / 1e3)}")
if not abs(roof["mfu"] - (6 * N + 6 * L * C * 1024) * roof["tokens_per_s"] / H100["tensor"]) <= 1e-3:
    fail(f"d12: roofline MFU {roof['mfu']}")
gemm_flops = sum(r["flops"] for r in led["ledger"] if r["kernel"].startswith("cublas"))  # cuBLAS's and cuBLASLt's
want = 3 * 2 * tokens * (L * 12 * C * C + C * Vp)  # 6 N' per token, N' the weight matrices
if not abs(gemm_flops - want) <= 1e-6 * want:
    fail(f"d12: GEMM FLOPs of the ledger {gemm_flops:.0f}, 6 N' per token {want:.0f}")
print(f"d12 B 64 T 1024 on an H100: {roof['ms_per_micro_step']:.2f} ms per micro-step, {roof['launches_per_layer']:.1f} launches "
      f"per layer, MFU {roof['mfu']:.3f}")
sys.exit(1 if failures else 0)
PY

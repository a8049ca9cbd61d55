#!/usr/bin/env bash
# The kernel ledger (ledger.h, -plan 1 -gpu) against what the CUDA build's kernels really launch and
# touch, measured by the emulated build (CUDA_EMU_LAUNCH_REPORT, tests/emu/cuda_emu.cpp: page
# protection counts the distinct device bytes each launch reads or writes). One step is the
# difference between a 2-step and a 1-step run (start-up and the end cancel), at a size where the
# tensors span many 4 KB pages (GPT-2 d4, T 256), in bf16 at B 4, and in fp32 at B 2 with -r 2,
# -ga fp32 and 2 micro-steps. Asserted: the ledger names every kernel the step launches, each with the
# measured number of launches; the declared bytes (read + written + updated) within 15% of the
# touched bytes summed over the kernels, and for each kernel holding over 2% of them; each row's
# roofline time recomputed here from the datasheets' numbers (written below, apart from ledger.h);
# bad -gpu flags refused in one line. Usage: test_ledger.sh
set -euo pipefail
PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/ledger; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=2
case_run() {  # case_run NAME TRAINER FLAGS...: the ledger, and the launch reports of 1 and 2 steps
    local name=$1 trainer=$2; shift 2
    $trainer -e d4 -t 256 "$@" -plan 1 -gpu H100 | grep '^{"ledger' > $D/$name.ledger.json
    for n in 1 2; do
        CUDA_EMU_LAUNCH_REPORT=$D/$name.report$n.jsonl timeout 600 $trainer -e d4 -t 256 "$@" -x $n -v 0 -s 0 > $D/$name.run$n.txt
    done
}
case_run bf16 ./train_gpt_emu -b 4
case_run fp32 ./train_gpt_emu_fp32 -b 2 -r 2 -ga fp32 -d 1024
./train_gpt_cpu_bf16 -e d12 -b 64 -t 1024 -plan 1 -gpu H100 > $D/d12.txt

refuse() {  # refuse PATTERN NP FLAGS...: exit 1 and one line matching PATTERN
    local pattern=$1 np=$2; shift 2
    set +e; out=$(timeout 60 mpirun -np $np ./train_gpt_cpu -e d2 -b 2 -t 32 "$@" 2>&1); code=$?; set -e
    [ $code -eq 1 ] || { echo "$*: exit $code, not 1"; echo "$out"; exit 1; }
    echo "$out" | grep -qF -- "$pattern" || { echo "$*: no line matching '$pattern'"; echo "$out"; exit 1; }
}
refuse "-gpu expects H100, H200 or A100, got 'V100'" 1 -plan 1 -gpu V100
refuse "add -plan 1" 1 -gpu H100
refuse "one GPU holding the whole model" 2 -plan 1 -gpu H100 -tp 2

$PYTHON - $D <<'PY'
import json, re, sys
d = sys.argv[1]
# datasheets, apart from ledger.h: H100 SXM5 989.4 TFLOP/s bf16 dense, 66.9 fp32, 3.35 TB/s
H100 = dict(tensor=989.4e12, fp32=66.9e12, bw=3.35e12)

def report(path):
    return {r["kernel"]: r for r in map(json.loads, open(path))}

for name, accum in (("bf16", 1), ("fp32", 2)):
    a, b = report(f"{d}/{name}.report1.jsonl"), report(f"{d}/{name}.report2.jsonl")
    measured = {}
    for k, r in b.items():
        n = r["launches"] - a.get(k, {"launches": 0})["launches"]
        if n: measured[k] = (n, r["bytes_touched"] - a.get(k, {"bytes_touched": 0})["bytes_touched"])
    ledger = json.load(open(f"{d}/{name}.ledger.json"))
    declared = {}
    for r in ledger["ledger"]:
        times = accum if r["per"] == "micro" else 1
        n, by = declared.get(r["kernel"], (0, 0))
        declared[r["kernel"]] = (n + times * r["launches"], by + times * (r["bytes_read"] + r["bytes_written"] + r["bytes_updated"]))
    total_touched = sum(t for _, t in measured.values())
    total_declared = sum(t for _, t in declared.values())
    print(f"{name}: {'kernel':40s} launches measured/ledger, MB touched/declared")
    for k in sorted(set(measured) | set(declared)):
        m, l = measured.get(k, (0, 0)), declared.get(k, (0, 0))
        print(f"  {k:40s} {m[0]:5d} {l[0]:5d} {m[1] / 1e6:10.3f} {l[1] / 1e6:10.3f}")
    print(f"  sum: touched {total_touched / 1e6:.3f} MB, declared {total_declared / 1e6:.3f} MB")
    assert set(measured) == set(declared), (name, "kernels launched, not in the ledger:", set(measured) - set(declared),
                                            "in the ledger, not launched:", set(declared) - set(measured))
    for k in measured:
        assert measured[k][0] == declared[k][0], (name, k, "launches measured", measured[k][0], "ledger", declared[k][0])
        if measured[k][1] > 0.02 * total_touched:
            assert abs(declared[k][1] - measured[k][1]) <= 0.15 * measured[k][1], (name, k, declared[k][1], measured[k][1])
    assert abs(total_declared - total_touched) <= 0.15 * total_touched, (name, total_declared, total_touched)

# the roofline, recomputed: each row max(FLOPs / peak', DRAM bytes / bandwidth), tensor-core rows at 70% of the bf16 peak
out = open(f"{d}/d12.txt").read()
led = json.loads(next(l for l in out.splitlines() if l.startswith('{"ledger"')))
micro = step = 0.0
for r in led["ledger"]:
    tc = r["kernel"].startswith("cublas") or "wmma" in r["kernel"]
    peak = 0.7 * H100["tensor"] if tc else H100["fp32"]
    ms = 1e3 * max(r["flops"] / peak, (r["bytes_read"] + r["bytes_written"] + 2 * r["bytes_updated"]) / H100["bw"])
    assert abs(ms - r["ms"]) <= 1e-4 * ms + 1e-6, (r["kernel"], ms, r["ms"])
    if r["per"] == "micro": micro += ms
    else: step += ms
roof = led["roofline"]
assert abs(roof["ms_per_micro_step"] - micro) <= 1e-3 * micro, (roof, micro)
assert abs(roof["ms_per_step"] - (micro + step)) <= 1e-3 * micro
tokens = 64 * 1024
assert abs(roof["tokens_per_s"] - tokens / ((micro + step) / 1e3)) <= 1e-3 * roof["tokens_per_s"]
L, C, Vp, maxT = 12, 768, 50304, 1024
N = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
assert abs(roof["mfu"] - (6 * N + 6 * L * C * 1024) * roof["tokens_per_s"] / H100["tensor"]) <= 1e-3
gemm_flops = sum(r["flops"] for r in led["ledger"] if r["kernel"].startswith("cublas"))  # cuBLAS's and cuBLASLt's
want = 3 * 2 * tokens * (L * 12 * C * C + C * Vp)  # 6 N' per token, N' the weight matrices
assert abs(gemm_flops - want) <= 1e-6 * want, (gemm_flops, want)
print(f"d12 B 64 T 1024 on an H100: {roof['ms_per_micro_step']:.2f} ms per micro-step, {roof['launches_per_layer']:.1f} launches "
      f"per layer, MFU {roof['mfu']:.3f}")
PY

#!/usr/bin/env bash
# The time ledger of the data-parallel communication (comm_time.h: -plan 1 -gpu H100 -nodes N) against
# formulas computed here: GPT-2 124M (d12, bf16 build, B 64, T 1024) at dp 8 on one node, 2 x 8
# on two and 2 x 2 on two (where the network, not NVLink, sets the ring's pace), ZeRO 0-3, -overlap 1
# and 0. ZeRO 2-3 reduce-scatter every micro-step (one here) and ZeRO-3
# gathers each layer before its forward and its backward, each pass's first layer posted ahead (zero.h:
# zero_prefetch_unit), and the two ends once a step after AdamW, the embeddings' beside AdamW on the
# other units (zero_gather_after_update; that AdamW's time: the kernel ledger's row, over the rank's
# shard of them); ZeRO 1-2 all-gather the updated parameters, a unit each, the embeddings' likewise
# beside AdamW and the others beside the next step's forward (-overlap 1). The units (wte + wpe, 12 layers of 12 C^2 + 13 C, the
# final LayerNorm's 2 C; ZeRO-1 pads each to a multiple of dp), each reduced by a ring (all-reduce
# 2 S (p-1)/p, reduce-scatter S (p-1)/p) at NCCL's ring bandwidth on NVLink, 370 GB/s, or across
# nodes at min(370, 47 GB/s an InfiniBand adapter x the node's GPUs, an adapter each), plus 10 or
# 20 us; the loss and norm scalars after.
# Exposed without overlap: everything. With it: a layer's reduction (70 us on NVLink, 0.3 ms over
# two adapters) is far shorter than a layer's backward (~13 ms calibrated), so the layers' reductions
# hide but for what layer 0's outlasts the embeddings' backward (the kernel ledger's encoder_backward
# rows), and the embeddings' reduction (the last unit, the largest) and what follows are exposed: to 1 us.
set -euo pipefail
PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/comm_time; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=1
for z in 0 1 2 3; do
    for o in 0 1; do
        timeout 300 mpirun -np 8 ./train_gpt_cpu_bf16 -e d12 -b 64 -t 1024 -z $z -overlap $o -plan 1 -gpu H100 \
            | grep '^{"ledger"' > $D/np8_z${z}_o$o.json
        for np in 16 4; do
            timeout 300 mpirun -np $np ./train_gpt_cpu_bf16 -e d12 -b 64 -t 1024 -z $z -overlap $o -nodes 2 -plan 1 -gpu H100 \
                | grep '^{"ledger"' > $D/np${np}_z${z}_o$o.json
        done
    done
done
# -ga fp32: the shard sums in fp32, but each micro-step's unit gradients are reduced in floatX, as made
timeout 300 mpirun -np 8 ./train_gpt_cpu_bf16 -e d12 -b 64 -t 1024 -z 3 -ga fp32 -plan 1 -gpu H100 \
    | grep '^{"ledger"' > $D/np8_z3_o1_ga_fp32.json
# B 32: two micro-steps, the ends gathered once (before the first), the layers in each; the first
# micro-step's last reductions run on beside the second's forward (zero_begin_micro_step waits)
for z in 2 3; do
    timeout 300 mpirun -np 8 ./train_gpt_cpu_bf16 -e d12 -b 32 -t 1024 -d 524288 -z $z -plan 1 -gpu H100 \
        | grep '^{"ledger"' > $D/np8_z${z}_o1_g2.json
done
$PYTHON - $D <<'PY'
import json, sys
D = sys.argv[1]
C, L, Vp, T0, X = 768, 12, 50304, 1024, 2
def ring(b, p): return b * (p - 1) // p
def pad(n, s): return (n + s - 1) // s * s
for nodes, p in ((1, 8), (2, 16), (2, 4)):
    # NCCL's ring: NVLink's 370 GB/s, or across nodes the node's adapters (47 GB/s each, one a GPU) if slower
    bw, alpha = (370e9, 10e-6) if nodes == 1 else (min(370e9, p // nodes * 47e9), 20e-6)
    t = lambda sent: 1e3 * (alpha + sent / bw)
    for z in (0, 1, 2, 3):
        s = 1 if z == 0 else p
        E, Lu, H = pad(Vp * C + T0 * C, s), pad(12 * C * C + 13 * C, s), pad(2 * C, s)
        reduce = lambda n: t((2 if z == 0 else 1) * ring(X * n, p))
        gather = lambda n: t(ring(X * n, p))  # ZeRO-3: before each use (the layers twice, the ends once)
        after = 2 * t(ring(8, p))  # the loss and the norm
        # ZeRO-3 gathers the layers before their forward and their backward, the ends once; ZeRO 1-2 the
        # updated parameters after AdamW, a unit each
        gathers = gather(E) + gather(H) + (2 if z == 3 else 1) * L * gather(Lu) if z > 0 else 0
        total = reduce(E) + L * reduce(Lu) + reduce(H) + gathers + after
        for o in (0, 1):
            label = f"{p} GPUs on {nodes} node(s), ZeRO-{z}, -overlap {o}"
            plan = json.load(open(f"{D}/np{p}_z{z}_o{o}.json"))
            comm = plan["roofline"]["comm"]
            # the embeddings' backward and forward (the kernel ledger's rows, calibrated): all that runs after
            # layer 0's backward, and all that runs before layer 0's forward once the ends are gathered
            rows = lambda name: sum(r["ms"] * r["slowdown"] for r in plan["ledger"] if r["kernel"].startswith(name))
            embed_backward, embed_forward = rows("encoder_backward"), rows("encoder_forward")
            def adamw_rest(plan):  # AdamW on the shard of the units after the embeddings
                adamw = [r for r in plan["ledger"] if r["kernel"].startswith("adamw")]
                assert len(adamw) == 1, f"{label}: AdamW's rows {adamw}"
                # the ledger's row is AdamW over the whole model (flops 15 a parameter): scaled to the shard
                return adamw[0]["ms"] * adamw[0]["slowdown"] * (L * Lu + H) / p / (adamw[0]["flops"] / 15)
            layer = comm["backward_ms"] / (L + 1)
            assert reduce(Lu) + gather(Lu) < layer, f"{label}: a layer's collectives outlast a layer's backward"
            # exposed with overlap: each layer's collectives hide behind the next layer's compute; the final
            # LayerNorm's and the first layer's gathers behind the embeddings' forward, as far as it lasts;
            # the embeddings' gather behind AdamW on the rest; the embeddings' reduction at the end cannot hide.
            # ZeRO 1-2: the layers' gathers (after the embeddings', the final LayerNorm's last) behind the
            # next step's forward, the first layer's behind the embeddings' forward
            ends_exposed = lambda plan: max(0.0, gather(E) - adamw_rest(plan)) if z > 0 else 0
            first_layer = gather(H) + gather(Lu) if z == 3 else gather(Lu)  # what runs beside the embeddings' forward
            gathers_exposed = ends_exposed(plan) + max(0.0, first_layer - embed_forward) if z > 0 else 0
            exposed = total if o == 0 else gathers_exposed + max(0.0, reduce(Lu) - embed_backward) + reduce(E) + after
            assert comm["dp"] == p and comm["nodes"] == nodes, (label, comm)
            assert abs(comm["comm_ms"] - total) < 1e-3, f"FAIL: {label}: comm_ms {comm['comm_ms']}, formula {total:.4f}"
            assert abs(comm["comm_exposed_ms"] - exposed) < 1e-3, \
                f"FAIL: {label}: comm_exposed_ms {comm['comm_exposed_ms']}, formula {exposed:.4f}"
            want = (gathers, gathers if o == 0 else gathers_exposed)
            got = (comm["gather_ms"], comm["gather_exposed_ms"])
            assert max(abs(a - b) for a, b in zip(got, want)) < 1e-3, f"FAIL: {label}: gathers {got}, formulas {want}"
            if (p, z, o) == (8, 3, 1):  # -ga fp32: the same collectives (AdamW reads fp32 gradients: longer)
                plan32 = json.load(open(f"{D}/np8_z3_o1_ga_fp32.json"))
                fp32, exposed32 = plan32["roofline"]["comm"], exposed - ends_exposed(plan) + ends_exposed(plan32)
                assert abs(fp32["comm_ms"] - total) < 1e-3 and abs(fp32["comm_exposed_ms"] - exposed32) < 1e-3, \
                    f"FAIL: {label}, -ga fp32: {fp32}, formulas {total:.4f}, {exposed32:.4f} (floatX reductions)"
            if p == 8 and z in (2, 3) and o == 1:  # two micro-steps: the second has no ends to wait for
                plan2 = json.load(open(f"{D}/np8_z{z}_o1_g2.json"))
                c2, rows2 = plan2["roofline"]["comm"], lambda name: sum(
                    r["ms"] * r["slowdown"] for r in plan2["ledger"] if r["kernel"].startswith(name))
                # what a micro-step's reductions have left when its backward ends: the first layer's beyond
                # the embeddings' backward, then the embeddings'. After the first micro-step it runs beside
                # the second's forward: ZeRO-3's first layer's gather queues behind it, ZeRO-2's forward
                # (each layer about 4 ms) hides it; after the last it is exposed
                tail = max(0.0, reduce(Lu) - rows2("encoder_backward")) + reduce(E)
                first = ends_exposed(plan2) + max(0.0, first_layer - rows2("encoder_forward"))
                second = max(0.0, tail + gather(Lu) - rows2("encoder_forward")) if z == 3 else 0.0
                gathers2 = gather(E) + gather(H) + (4 if z == 3 else 1) * L * gather(Lu)
                want2 = (gathers2 + 2 * (reduce(E) + L * reduce(Lu) + reduce(H)) + after,
                         first + second + tail + after, first + second)
                got2 = (c2["comm_ms"], c2["comm_exposed_ms"], c2["gather_exposed_ms"])
                count2 = 2 * 14 + 2 + (2 * 24 + 2 if z == 3 else 14)
                assert max(abs(a - b) for a, b in zip(got2, want2)) < 1e-3 and c2["collectives"] == count2, \
                    f"FAIL: {label}, B 32 (2 micro-steps): {c2}, formulas {want2} (comm, exposed, gathers exposed)"
            share = f", gathers {gathers_exposed / gathers:.0%} exposed" if z > 0 and o == 1 else ""
            print(f"ok {label}: {total:.3f} ms of communication a step, {exposed:.3f} exposed{share} (formulas here)")
PY
# ranks that do not split into nodes of equal size: one line on every rank, exit 1
if timeout 60 mpirun -np 8 ./train_gpt_cpu_bf16 -e d12 -b 64 -t 1024 -nodes 3 -plan 1 -gpu H100 > $D/bad.txt 2>&1 \
   || [ "$(grep -c '^error: -nodes 3 does not divide the 8 ranks into nodes of equal size' $D/bad.txt)" != 8 ]; then
    cat $D/bad.txt; echo "FAIL: -nodes 3 at 8 ranks: not one line on every rank"; exit 1; fi
echo "ok -nodes 3 at 8 ranks: refused in one line on every rank"

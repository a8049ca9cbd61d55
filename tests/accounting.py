#!/usr/bin/python3
"""
tests/accounting.py: what each rank should hold and send, from formulas written here
(zero.h's and tp.h's header comments, DESIGN's layout), independent of the trainer.

-plan and the first step's "measured" both come from the trainer's buffer lists and its
collectives' ledgers; this checks both against these formulas, rank by rank:

    check_accounting.py PLAN_JSONL LOG_JSONL --layers L --channels C --max-seq-len T0 --vocab Vp
                        --B B --T T --accum G --dp DP --tp TP --zero Z --x X [--ga-fp32] [--recompute R]

Per-rank units (elements): embeddings E = Vp/tp*C + T0*C, a layer
12 C^2/tp + 7 C/tp + 6 C (qkv and fc cut by rows with their biases, attproj and fcproj by
columns, LayerNorms and row-parallel biases whole), the head H = 2 C; each padded to a
multiple of the ZeRO shards (dp from stage 1 on).
"""
import argparse
import json
import sys


def ring(b, p):
    return b * (p - 1) // p


def padded(n, shards):
    return -(-n // shards) * shards


def state_memory(L, C, T0, Vp, tp, dp, zero, X, grads_fp32):
    """parameters, gradients and optimizer state per rank (zero.h's formulas)"""
    shards = 1 if zero == 0 else dp
    E = padded(Vp // tp * C + T0 * C, shards)
    Lu = padded(12 * C * C // tp + 7 * C // tp + 6 * C, shards)
    H = padded(2 * C, shards)
    Psi = E + L * Lu + H
    P = Psi // shards
    K = 8 if X == 4 else 12           # m, v (+ the fp32 master in 16-bit builds)
    G = 4 if grads_fp32 else X        # the gradient sum's element
    full_grads = X * Psi + (4 * Psi if grads_fp32 else 0)
    m = {"parameters": X * (P if zero == 3 else Psi), "optimizer": K * P,
         "parameters_transient": X * (E + Lu + H) if zero == 3 else 0,
         "gradients": full_grads if zero == 0 else full_grads + G * P if zero == 1 else G * P,
         "gradients_transient": X * (E + Lu + H) + X * max(E, Lu, H) // dp if zero >= 2 else 0}
    return m, Psi, E, H


def comm_bytes(L, C, T0, Vp, tp, dp, zero, X, grads_fp32, B, T, g, recompute):
    """bytes sent per step over the DP group (zero.h) and the TP group (tp.h)"""
    _, Psi, E, H = state_memory(L, C, T0, Vp, tp, dp, zero, X, grads_fp32)
    G = 4 if grads_fp32 else X
    d = dict(all_reduce=0, reduce_scatter=0, all_gather=0, broadcast=0, send=0, scalars=0)
    if zero == 0: d["all_reduce"] = 2 * ring(G * Psi, dp)
    if zero == 1: d["reduce_scatter"] = ring(G * Psi, dp)
    if zero == 2: d["reduce_scatter"] = g * ring(X * Psi, dp)
    if zero in (1, 2): d["all_gather"] = ring(X * Psi, dp)
    if zero == 3:
        d["all_gather"] = g * (ring(X * Psi, dp) + ring(X * (Psi - E - H), dp))
        d["reduce_scatter"] = g * ring(X * Psi, dp)
    d["scalars"] = 2 * ring(8, dp) * (1 if zero == 0 else 2)   # the loss; the norm when sharded
    N = B * T
    per_block = 2 * (2 if recompute == 3 else 1) + 2          # g twice per forward, f twice backward
    t = dict(all_reduce=0, reduce_scatter=0, all_gather=0, broadcast=0, send=0, scalars=0)
    t["all_reduce"] = g * ((per_block * L + 2) * 2 * ring(N * C * X, tp) + 3 * 2 * ring(N * 4, tp))
    t["scalars"] = 2 * ring(8, tp)                              # the squared norm
    return {"dp": d, "tp": t}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plan")
    ap.add_argument("log")
    for k in ("layers", "channels", "max_seq_len", "vocab", "B", "T", "accum", "dp", "tp", "zero", "x"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, required=True)
    ap.add_argument("--recompute", type=int, default=0)
    ap.add_argument("--ga-fp32", action="store_true")
    a = ap.parse_args()
    plans = sorted((json.loads(l) for l in open(a.plan) if l.startswith("{")), key=lambda p: p["rank"])
    first = json.loads(open(a.log).readline())
    world = a.dp * a.tp
    assert len(plans) == world and len(first["measured"]) == world, (len(plans), len(first["measured"]))
    args = (a.layers, a.channels, a.max_seq_len, a.vocab, a.tp, a.dp, a.zero, a.x, a.ga_fp32)
    want_state, _, _, _ = state_memory(*args)
    want_comm = comm_bytes(*args, a.B, a.T, a.accum, a.recompute)
    N, X = a.B * a.T, a.x
    for plan, measured in zip(plans, first["measured"]):
        r = plan["rank"]
        assert plan["memory"] == measured["memory"], (r, plan["memory"], measured["memory"])
        assert plan["comm"] == measured["comm"], (r, plan["comm"], measured["comm"])
        for k, v in want_state.items():
            assert measured["memory"][k] == v, f"rank {r} {k}: {measured['memory'][k]}, formula {v}"
        assert measured["memory"]["logits"] == N * a.vocab // a.tp * X, (r, measured["memory"]["logits"])
        assert measured["comm"] == want_comm, (r, measured["comm"], want_comm)
    m = first["measured"][0]
    print(f"dp {a.dp} tp {a.tp} ZeRO-{a.zero}: every rank's memory and traffic = plan = formulas; "
          f"state {sum(m['memory'][k] for k in ('parameters', 'gradients', 'optimizer'))} bytes, "
          f"logits {m['memory']['logits']} bytes, sent {m['comm']}")


if __name__ == "__main__":
    sys.exit(main())

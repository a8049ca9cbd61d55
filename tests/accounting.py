#!/usr/bin/python3
"""
tests/accounting.py: what each rank should hold and send, from formulas written here
(zero.h's, tp.h's and pipeline.h's header comments, docs/design.md's parallel layout), independent of the
trainer.

-plan and the first step's "measured" both come from the trainer's buffer lists and its
collectives' ledgers; this checks both against these formulas, rank by rank:

    accounting.py PLAN_JSONL LOG_JSONL --layers L --channels C --max-seq-len T0 --vocab Vp
                  --B B --T T --accum M --dp DP --tp TP [--pp PP --schedule 1f1b|gpipe|zb|interleaved
                  --chunks V] --zero Z --x X [--ga-fp32] [--recompute R] [--sp 1] [--cp C] [--heads NH]

Rank r sits at pp_rank = r // (dp cp tp), its place in the dp group (dp x cp ranks holding the same
parameters, ZeRO's shards) r // tp % (dp cp), tp_rank = r % tp. Stage s holds
L_s = L/p layers (the first L % p stages one more), or with V chunks (interleaved 1F1B) virtual
stages s, s + p, ..., s + (V-1)p of the model cut the same way into pV; its units (elements): the embedding unit
E = Vp/tp*C + T0*C on the first and the last stage (the tied wte's two copies), a layer
12 C^2/tp + 7 C/tp + 6 C (qkv and fc cut by rows with their biases, attproj and fcproj by
columns, LayerNorms and row-parallel biases whole), the head H = 2 C on the last stage; each
padded to a multiple of the ZeRO shards (dp x cp from stage 1 on).

Context parallelism (--cp c, cp.h): a rank holds T/c of every sequence (every per-token tensor and
message is of B*T/c tokens); ring attention sends per layer and micro-batch (c-1) blocks of k and v
(B T/c 2C/tp floatX: the queries stay home) forward, per rerun of the forward and backward, plus c
sums of dk, dv (B T/c 2C/tp fp32). Attention (flash, at every cp) keeps 4 bytes of log-sum-exp per
token and head, never the (T,T) probabilities: every kept tensor is per token.

Sequence parallelism (--sp 1, tp.h): the LayerNorms and the residual stream hold N/tp of a
micro-batch's N tokens (a layer's activations, the stage's input and output, the pipeline's
messages); f and g move an all-gather or a reduce-scatter of N tokens each in place of an
all-reduce, the backward gathers each LayerNorm output once more, and the LayerNorms' gradients
(each TP rank's tokens) are all-reduced over TP once a step, slice by slice of the part this rank
holds. With --heads, each layer's kept activation bytes are checked against recompute.h's table.
"""
import argparse
import json
import sys


def ring(b, p):
    return 0 if p <= 1 else b * (p - 1) // p


def padded(n, shards):
    return -(-n // shards) * shards


def stage_layers(L, p, s, split=None, V=1):
    """layers of stage s: -pl's split when given, else L // p, the first L % p stages one more;
    with V chunks the sum of its virtual stages' (v p + s for v < V) of the model cut into pV"""
    if split:
        return split[s]
    n = p * V
    return sum(L // n + (1 if v * p + s < L % n else 0) for v in range(V))


def interleaved_held(p, m, V, s):
    """the most chunk-forwards stage s holds at once under interleaved 1F1B, in all and of its last
    chunk (the head's on the last stage), from the schedule's rule (Megatron-LM's): chunk-forwards in
    groups of p micro-batches, chunk 0 first, chunk-backwards in the same groups from the last chunk;
    a warmup of 2(p - s - 1) + (V - 1)p chunk-forwards, then one forward and one backward in turn,
    the next forward's input received between them (so it travels while the backward computes), then
    the remaining backwards. A chunk-forward holds its set from its input's arrival (its forward on
    the model's first chunk, which receives none) to its backward; in the warmup an input arrives
    just before its forward, with nothing between, so the walk takes those sets at the forward.
    pipeline.h states the first as
    min(2(p - s - 1) + (V - 1)p + 1 + (1 if two or more backwards are in the steady phase), mV)"""
    total = m * V
    warmup = min(2 * (p - s - 1) + (V - 1) * p, total)
    order = [("forward", i) for i in range(warmup)]
    for j in range(total - warmup):
        order += [("forward", warmup + j)]
        if warmup + j + 1 < total:
            order += [("input", warmup + j + 1)]
        order += [("backward", j)]
    order += [("backward", j) for j in range(total - warmup, total)]
    held, most = [0] * V, [0] * V
    in_all = most_in_all = 0
    taken = set()
    for what, i in order:
        v = (i % (p * V)) // p
        v = V - 1 - v if what == "backward" else v
        if what == "input" and s == 0 and v == 0:
            continue  # the model's first chunk: no input arrives
        if what == "forward":
            held[v] += 1
        elif what == "backward":
            held[v] -= 1
        if what != "backward" and i not in taken:
            taken.add(i)
            in_all += 1
        if what == "backward":
            in_all -= 1
        most[v], most_in_all = max(most[v], held[v]), max(most_in_all, in_all)
    steady = total - warmup
    assert most_in_all == min(warmup + 1 + (1 if steady > 1 else 0), m * V), (p, m, V, s, most_in_all)
    return most_in_all, most[-1]


def units(a, s):
    """padded embedding, layer and head units of stage s, and the layer count"""
    shards = 1 if a.zero == 0 else a.replicas
    first, last = s == 0, s == a.pp - 1
    C = a.channels
    E = padded(a.vocab // a.tp * C + a.max_seq_len * C, shards) if first or last else 0
    Lu = padded(12 * C * C // a.tp + 7 * C // a.tp + 6 * C, shards)
    H = padded(2 * C, shards) if last else 0
    return E, Lu, H, stage_layers(a.layers, a.pp, s, a.stage_layers, a.chunks)


def state_memory(a, s):
    """parameters, gradients and optimizer state of a rank of stage s (zero.h's formulas)"""
    E, Lu, H, Ls = units(a, s)
    shards = 1 if a.zero == 0 else a.replicas
    X, zero = a.x, a.zero
    Psi = E + Ls * Lu + H
    P = Psi // shards
    K = 8 if X == 4 or a.no_master else 12  # m, v (+ the fp32 master in 16-bit builds, unless -w 0)
    G = 4 if a.ga_fp32 else X         # the gradient sum's element
    full_grads = X * Psi + (4 * Psi if a.ga_fp32 else 0)
    return {"parameters": X * (P if zero == 3 else Psi), "optimizer": K * P,
            "parameters_transient": X * (E + Lu + H) + (X * Lu if overlapped_layers(a, Ls) else 0) if zero == 3 else 0,
            "gradients": full_grads if zero == 0 else full_grads + G * P if zero == 1 else G * P,
            "gradients_transient": X * (E + Lu + H) + X * max(E, Lu, H) // a.replicas
                                   + (X * Lu if overlapped_layers(a, Ls) else 0) if zero >= 2 else 0}


def overlapped_layers(a, Ls):
    """overlap.h under ZeRO-2 and 3: the layers take turns in two gradient slots (and ZeRO-3's in two
    gathered slots; the second one exists with two layers or more on the stage)"""
    return a.overlap and a.zero >= 2 and a.replicas > 1 and Ls >= 2


def layernorm_slices(a, s, dp_rank):
    """elements of each LayerNorm weight or bias that a rank of stage s and DP rank dp_rank holds of
    the step's gradient: ln1w, ln1b, ln2w, ln2b of each layer unit, lnfw, lnfb of the head's unit"""
    E, Lu, H, Ls = units(a, s)
    shards, C, tp = (1 if a.zero == 0 else a.replicas), a.channels, a.tp
    ln2 = 2 * C + 3 * C * C // tp + 3 * C // tp + C * C // tp + C   # after ln1, qkvw, qkvb, attprojw, attprojb
    def held(unit, begin, n):
        lo, hi = max(begin, dp_rank * unit // shards), min(begin + n, (dp_rank + 1) * unit // shards)
        return [hi - lo] if hi > lo else []
    out = []
    for _ in range(Ls):
        for begin in (0, C, ln2, ln2 + C): out += held(Lu, begin, C)
    if H:
        for begin in (0, C): out += held(H, begin, C)
    return out


def layer_activation_bytes(a, NH):
    """what one layer keeps (recompute.h's table); -sp: the LayerNorms' and residuals' N/tp tokens"""
    N, C, tp, X = a.B * a.T_rank, a.channels, a.tp, a.x
    Nh = N // tp if a.sp else N
    region = {"ln1": Nh * C * X, "residual2": Nh * C * X, "ln2": Nh * C * X, "residual3": Nh * C * X, "stats": 4 * Nh * 4}
    pairs = {"qkv": 3 * N * C // tp * X, "atty": N * C // tp * X, "lse": N * (NH // tp) * 4,  # flash attention: no (T, T) term
             "fch": 4 * N * C // tp * X, "fch_gelu": 4 * N * C // tp * X}
    r = a.recompute
    dropped = {1: {"fch_gelu"}, 2: {"fch_gelu", "ln1", "ln2"}}.get(r, set())
    if r == 3: dropped = (set(region) | set(pairs)) - {"residual3"}
    kept = {k: v for k, v in {**region, **pairs}.items() if k not in dropped}
    return sum(kept.values()), sum(v for k, v in kept.items() if k in region)


def comm_bytes(a, s, dp_rank=0):
    """bytes a rank of stage s sends per step over its DP (zero.h), TP (tp.h), PP and embedding groups"""
    E, Lu, H, Ls = units(a, s)
    first, last = s == 0, s == a.pp - 1
    Psi, X, g, dp, zero = E + Ls * Lu + H, a.x, a.accum, a.replicas, a.zero
    G = 4 if a.ga_fp32 else X
    kinds = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "send", "scalars")
    d, t, p, e = (dict.fromkeys(kinds, 0) for _ in range(4))
    if zero == 0: d["all_reduce"] = 2 * (ring(G * E, dp) + Ls * ring(G * Lu, dp) + ring(G * H, dp))  # unit by unit
    if zero == 1: d["reduce_scatter"] = ring(G * Psi, dp)
    if zero == 2: d["reduce_scatter"] = g * ring(X * Psi, dp)
    if zero in (1, 2): d["all_gather"] = ring(X * Psi, dp)
    w_recomputes = a.schedule == "zb" and 0 < s   # ZB-H1's deferred W rebuilds what -r dropped again
    if zero == 3:
        regathers = 2 if w_recomputes and a.recompute >= 2 else 1   # the layers: backward, and W at -r >= 2
        # the ends once a step, after AdamW (their slots keep them); the layers before each forward and backward
        d["all_gather"] = ring(X * (E + H), dp) + g * (1 + regathers) * ring(X * (Psi - E - H), dp)
        d["reduce_scatter"] = g * ring(X * Psi, dp)
    d["scalars"] = 2 * ring(8, dp) * (1 if zero == 0 else 2)   # the loss; the norm when sharded
    N = a.B * a.T_rank
    forwards = 1 + (a.recompute == 3) + (a.recompute == 3 and w_recomputes)
    per_block = 2 * forwards + 2                                # g twice per forward, f twice backward
    reduces = per_block * Ls + first + last                     # + the embedding's g, the head's f
    loss = 3 * 2 * ring(N * 4, a.tp) if last else 0            # max, sum of exponentials, target logit
    activation = ring(N * a.channels * X, a.tp)                 # an all-gather or reduce-scatter of N tokens
    if a.sp:  # f and g: all-gather and reduce-scatter; the backward gathers ln1, ln2 and lnf again
        t["all_gather"] = g * (2 * forwards * Ls + 4 * Ls + first + 2 * last) * activation
        t["reduce_scatter"] = g * reduces * activation          # where the all-reduces were
        t["all_reduce"] = g * loss + sum(2 * ring(G * n, a.tp) for n in layernorm_slices(a, s, dp_rank))
    else:
        t["all_reduce"] = g * (reduces * 2 * activation + loss)
    t["scalars"] = 2 * ring(8, a.tp)                            # the squared norm
    V = a.chunks  # each chunk's activations on and gradients back, but past the model's last chunk and first
    p["send"] = g * (N // a.tp if a.sp else N) * a.channels * X * ((V - last) + (V - first))
    p["scalars"] = 2 * 2 * ring(8, a.pp)                        # the loss and the squared norm
    if a.pp > 1 and (first or last):
        e["all_reduce"] = 2 * ring(G * E // (1 if zero == 0 else dp), 2)  # the tied embedding's gradient shard
    c = dict.fromkeys(kinds, 0)                                 # -cp: each layer's ring, forward and backward
    if a.cp > 1:
        block, dkv = N * 2 * a.channels // a.tp * X, N * 2 * a.channels // a.tp * 4  # [k | v] rows travel; q stays home
        c["send"] = g * Ls * ((forwards + 1) * (a.cp - 1) * block + a.cp * dkv)
    return {"dp": d, "tp": t, "pp": p, "embedding": e, "cp": c}


def activation_sets(a, s, schedule=None):
    """micro-batches stage s holds from forward to the end of the backward; ZB-H1: p on every stage"""
    schedule = schedule or a.schedule
    if a.pp == 1: return 1
    if schedule == "interleaved" and a.chunks > 1: return interleaved_held(a.pp, a.accum, a.chunks, s)[0]
    if schedule == "zb": return min(a.pp, a.accum)
    return a.accum if schedule == "gpipe" else min(a.pp - s, a.accum)


def head_sets(a, s):
    """micro-batches between forward and B, which hold logits: under ZB-H1 as many as under 1F1B;
    interleaved: those of the last chunk (the head's)"""
    if a.schedule == "interleaved" and a.chunks > 1 and a.pp > 1:
        return interleaved_held(a.pp, a.accum, a.chunks, s)[1]
    return activation_sets(a, s, "1f1b" if a.schedule == "zb" else a.schedule)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plan")
    ap.add_argument("log")
    for k in ("layers", "channels", "max_seq_len", "vocab", "B", "T", "accum", "dp", "tp", "zero", "x"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, required=True)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--schedule", default="1f1b")
    ap.add_argument("--chunks", type=int, default=1)
    ap.add_argument("--recompute", type=int, default=0)
    ap.add_argument("--sp", type=int, default=0)
    ap.add_argument("--cp", type=int, default=1)
    ap.add_argument("--heads", type=int, default=0)
    ap.add_argument("--ga-fp32", action="store_true")
    ap.add_argument("--no-master", action="store_true")  # -w 0
    ap.add_argument("--overlap", type=int, default=1)     # -overlap (overlap.h)
    ap.add_argument("--stage-layers", type=lambda v: [int(x) for x in v.split(",")], default=None)
    a = ap.parse_args()
    plans = sorted((json.loads(l) for l in open(a.plan) if l.startswith("{")), key=lambda p: p["rank"])
    first = json.loads(open(a.log).readline())
    a.replicas, a.T_rank = a.dp * a.cp, a.T // a.cp  # the dp group is dp x cp; a rank holds T/cp of a sequence
    world = a.replicas * a.tp * a.pp
    assert len(plans) == world and len(first["measured"]) == world, (len(plans), len(first["measured"]))
    N = a.B * a.T_rank
    for plan, measured in zip(plans, first["measured"]):
        r = plan["rank"]
        s = r // (a.replicas * a.tp)
        assert plan["pp_rank"] == s and plan["activation_sets"] == activation_sets(a, s), (r, plan)
        slots = min(s + 1, a.accum) if a.schedule == "zb" and 0 < s else 0  # ZB-H1: B done, W waiting
        assert plan["weight_slots"] == slots, (r, plan["weight_slots"], slots)
        assert plan["memory"] == measured["memory"], (r, plan["memory"], measured["memory"])
        assert plan["comm"] == measured["comm"], (r, plan["comm"], measured["comm"])
        for k, v in state_memory(a, s).items():
            assert measured["memory"][k] == v, f"rank {r} {k}: {measured['memory'][k]}, formula {v}"
        logits = N * a.vocab // a.tp * a.x * head_sets(a, s) if s == a.pp - 1 else 0
        assert measured["memory"]["logits"] == logits, (r, measured["memory"]["logits"], logits)
        want = comm_bytes(a, s, r // a.tp % a.replicas)
        assert measured["comm"] == want, (r, measured["comm"], want)
        if a.heads:
            per_layer, region = layer_activation_bytes(a, a.heads)
            assert plan["activations_per_layer"] == per_layer, (r, plan["activations_per_layer"], per_layer)
    m = first["measured"][0]
    if a.heads:
        print(f"kept per layer: {per_layer} bytes, of them LayerNorms and residual stream {region}"
              + (f" (-sp: 1/{a.tp} of the tokens)" if a.sp else ""))
    print(f"dp {a.dp}{f' cp {a.cp}' if a.cp > 1 else ''} tp {a.tp}{' -sp' if a.sp else ''} pp {a.pp} ZeRO-{a.zero}: every rank's memory and traffic = plan = formulas; "
          f"rank 0: state {sum(m['memory'][k] for k in ('parameters', 'gradients', 'optimizer'))} bytes, "
          f"sent {dict((g, {k: v for k, v in c.items() if v}) for g, c in m['comm'].items())}")


if __name__ == "__main__":
    sys.exit(main())

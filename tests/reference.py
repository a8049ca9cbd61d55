#!/usr/bin/python3
"""
tests/reference.py: an independent GPT-2 in PyTorch, float64, the oracle of the trainer.

It makes a tiny GPT-2 with GPT-2's real vocabulary sizes (V=50257, Vp=50304; --vocab: others) and
writes, into --out DIR:
  model.bin         the model as an llm.c file (fp32, version 3): what the trainer loads
  train.bin         a token shard (llm.c format) of structured random tokens
  debug_state.bin   for the first micro-batch: inputs, targets, logits, loss, every
                    gradient; then the losses of --debug-steps AdamW steps (one
                    micro-batch per step, in shard order), with clipping and decay
  trajectory_K.txt  the per-step losses of the flags-driven run with K accumulation
                    micro-steps (see TRAJECTORY), one per line
  params_K.npy      that run's parameters after its last step: float64, flat, in the model
                    file's order (tests/check_trajectory.py --params compares them tensor by
                    tensor with the trainer's final model file: the loss alone barely sees a
                    wrong weight decay)

Everything follows docs/design.md's numerical conventions and nothing here comes from
the C++ code: the model is written from the GPT-2 definition, AdamW is
torch.optim.AdamW, the LR schedule and clipping are re-derived from docs/design.md's text.
Computation is float64 on fp32-representable weights, so the only difference from
the trainer is the trainer's own fp32 rounding.
"""
import argparse
import math
import os
import struct

import numpy as np
import torch

torch.set_default_dtype(torch.float64)

V, VP = 50257, 50304  # GPT-2's; --vocab sets others (a model whose layers outweigh its LM head)
NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
         "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}

# the flags the trajectory runs use; tests/run_tests.sh passes exactly these
TRAJECTORY = dict(B=4, T=32, lr=1e-3, warmup=2, final_frac=0.1, wd=0.1, clip=1.0, steps=6)


def shapes(L, C, maxT):
    return {"wte": (VP, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C),
            "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
            "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
            "lnfw": (C,), "lnfb": (C,)}


def init_params(L, C, maxT, seed):
    g = torch.Generator().manual_seed(seed)
    p = {}
    for name, shape in shapes(L, C, maxT).items():
        if name in ("ln1w", "ln2w", "lnfw"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=g)  # not exactly 1: makes the LN weight path matter
        elif name.endswith("b"):
            t = 0.02 * torch.randn(shape, generator=g)       # nonzero biases: every bias gradient path is checked
        else:
            std = 0.02 / math.sqrt(2 * L) if name in ("attprojw", "fcprojw") else 0.02
            t = std * torch.randn(shape, generator=g)
        if name == "wte":
            t[V:] = 0.0  # padded vocabulary rows are zero in files
        p[name] = t.float().double()  # fp32-representable values: the file stores fp32
    return p


def layernorm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(p, idx, NH):
    """logits (B,T,Vp) of GPT-2: pre-LN blocks, causal attention, tied head."""
    B, T = idx.shape
    L, C = p["ln1w"].shape
    hs = C // NH
    x = p["wte"][idx] + p["wpe"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        h = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = [t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        x = x + gelu(h @ p["fcw"][l].T + p["fcb"][l]) @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = layernorm(x, p["lnfw"], p["lnfb"])
    return x @ p["wte"].T


def token_losses(logits, targets):
    """cross-entropy over the first V columns only"""
    logp = torch.log_softmax(logits[..., :V], dim=-1)
    return -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def learning_rate(step, lr, warmup, max_steps, final_frac):
    """docs/design.md: linear warmup lr*(step+1)/warmup, then cosine from lr to lr*final_frac at max_steps"""
    if step < warmup:
        return lr * (step + 1) / warmup
    lr_min = lr * final_frac
    progress = min(1.0, (step - warmup) / max(1, max_steps - warmup))
    return lr_min + (lr - lr_min) * 0.5 * (1.0 + math.cos(math.pi * progress))


def batch(tokens, i, B, T):
    """global micro-step i of a single rank, shuffling off: B*T+1 tokens from i*B*T"""
    chunk = torch.from_numpy(tokens[i * B * T: i * B * T + B * T + 1].astype(np.int64))
    return chunk[:-1].view(B, T), chunk[1:].view(B, T)


def train(p0, tokens, NH, B, T, accum, steps, lr, warmup, final_frac, wd, clip):
    """losses, grad norms and final parameters of `steps` optimizer steps; each step averages over accum micro-batches"""
    p = {k: v.clone().requires_grad_(True) for k, v in p0.items()}
    groups = [{"params": [p[n] for n in NAMES if n in DECAYED], "weight_decay": wd},
              {"params": [p[n] for n in NAMES if n not in DECAYED], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    losses, norms = [], []
    for step in range(steps):
        opt.zero_grad()
        total = 0.0
        for micro in range(accum):
            x, y = batch(tokens, step * accum + micro, B, T)
            loss = token_losses(forward(p, x, NH), y).mean() / accum
            loss.backward()
            total += loss.item()
        norm = math.sqrt(sum(float((t.grad ** 2).sum()) for t in p.values()))
        if clip > 0 and norm > clip:
            for t in p.values():
                t.grad.mul_(clip / norm)
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, lr, warmup, steps, final_frac)
        opt.step()
        losses.append(total)
        norms.append(norm)
    return losses, norms, {k: v.detach() for k, v in p.items()}


def write_model(path, p, L, NH, C, maxT):
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [20240326, 3, maxT, V, L, NH, C, VP]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for name in NAMES:
            f.write(p[name].numpy().astype(np.float32).tobytes())


def write_shard(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(np.uint16).tobytes())


def make_tokens(n, seed):
    """learnable structure: a random walk over 300 token ids, with EOT documents"""
    rng = np.random.default_rng(seed)
    ids = rng.choice(V - 1, size=300, replace=False)
    walk = np.cumsum(rng.integers(-2, 3, size=n)) % 300
    tokens = ids[walk]
    tokens[rng.random(n) < 0.02] = V - 1  # GPT-2's EOT, 50256, is its last token
    tokens[0] = V - 1
    return tokens


def main():
    global V, VP
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--max-seq-len", type=int, default=64)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--debug-steps", type=int, default=10)
    ap.add_argument("--accum", default="1,2,4", help="accumulation counts of the trajectory files")
    ap.add_argument("--vocab", type=int, default=None, help="V (default GPT-2's); Vp is V rounded up to a multiple of 64")
    a = ap.parse_args()
    if a.vocab:
        V, VP = a.vocab, (a.vocab + 63) // 64 * 64
    os.makedirs(a.out, exist_ok=True)
    L, C, NH, maxT = a.layers, a.channels, a.heads, a.max_seq_len
    B, T = TRAJECTORY["B"], TRAJECTORY["T"]
    accums = [int(k) for k in a.accum.split(",")]
    need = max(TRAJECTORY["steps"] * max(accums), a.debug_steps) * B * T + 1
    tokens = make_tokens(need + 1000, a.seed)
    p = init_params(L, C, maxT, a.seed)
    write_model(os.path.join(a.out, "model.bin"), p, L, NH, C, maxT)
    write_shard(os.path.join(a.out, "train.bin"), tokens)

    # debug state: one micro-batch through forward and backward
    x, y = batch(tokens, 0, B, T)
    q = {k: v.clone().requires_grad_(True) for k, v in p.items()}
    logits = forward(q, x, NH)
    loss = token_losses(logits, y).mean()
    loss.backward()
    hp = dict(lr=1e-3, wd=0.1, clip=1.0)
    losses, norms, _ = train(p, tokens, NH, B, T, 1, a.debug_steps, hp["lr"], 0, 1.0, hp["wd"], hp["clip"])
    with open(os.path.join(a.out, "debug_state.bin"), "wb") as f:
        f.write(struct.pack("<8i", 20241122, B, T, a.debug_steps, L, NH, C, maxT))
        f.write(struct.pack("<3f", hp["lr"], hp["wd"], hp["clip"]))
        f.write(x.numpy().astype(np.int32).tobytes())
        f.write(y.numpy().astype(np.int32).tobytes())
        f.write(logits.detach().numpy().astype(np.float32).tobytes())
        f.write(struct.pack("<f", loss.item()))
        for name in NAMES:
            f.write(q[name].grad.numpy().astype(np.float32).tobytes())
        f.write(np.array(losses, dtype=np.float32).tobytes())
        f.write(np.array(norms, dtype=np.float32).tobytes())
    print(f"reference: L={L} C={C} NH={NH} B={B} T={T}, loss {loss.item():.6f}, "
          f"{a.debug_steps} AdamW steps: {losses[0]:.4f} -> {losses[-1]:.4f}, norms {norms[0]:.3f} .. {norms[-1]:.3f}")

    tr = TRAJECTORY
    for accum in accums:
        losses, norms, final = train(p, tokens, NH, B, T, accum, tr["steps"], tr["lr"], tr["warmup"], tr["final_frac"],
                                     tr["wd"], tr["clip"])
        clipped = sum(n > tr["clip"] for n in norms)
        with open(os.path.join(a.out, f"trajectory_{accum}.txt"), "w") as f:
            f.write("".join(f"{l:.12f}\n" for l in losses))
        flat = np.concatenate([final[n].numpy().ravel() for n in NAMES])  # float64, the model file's order
        np.save(os.path.join(a.out, f"params_{accum}.npy"), flat)
        print(f"trajectory accum={accum}: " + " ".join(f"{l:.5f}" for l in losses) + f" (clipped {clipped}/{tr['steps']} steps)")


if __name__ == "__main__":
    main()

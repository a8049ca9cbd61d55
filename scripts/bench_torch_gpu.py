#!/usr/bin/env python3
"""GPT-2 trained by PyTorch as a user of it would write it: the third anchor of scripts/bench_gpu.sh.

nanoGPT's model (Karpathy's model.py, rewritten here in its shape: F.scaled_dot_product_attention
with is_causal, the tied lm_head, tanh GELU as llm.c's), fused AdamW, torch.compile and bf16
autocast, on the same model file and tokens as our train_gpt and llm.c's train_gpt2cu:

    /usr/bin/python3 scripts/bench_torch_gpu.py -e MODEL.bin -i SHARD.bin -b 64 -t 1024 -x 12

- MODEL.bin: an llm.c model file (fp32 version 3 or bf16 version 5), such as our
  `-l 0` step's model_00000001.bin (bench_gpu.sh makes one): its tensors in llm.c's order.
- SHARD.bin: an llm.c token shard; step s trains on tokens [s*B*T, (s+1)*B*T + 1), as llm.c's
  loader (and ours at -shuffle 0) read them at one rank.
- Each step prints `step S/N | loss L | M ms | K tok/s` and, with -log, writes a JSON line
  {"step", "loss", "ms", "tok_per_s"}: the time of that step alone (CUDA synchronised at both
  ends), not a running average, so bench_gpu.sh takes the median of steps 3 to 12.
- The loss is the mean cross-entropy over the real vocabulary (the padded columns of wte cut off
  before the softmax, as llm.c and ours), so step 1's loss is the same number the other two print
  on that model and those tokens (tests/test_bench_torch.sh holds it to ours on the CPU).
- -device cpu -compile 0 -dtype fp32 runs it here, without a GPU, for that check.
"""
import argparse
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

V = 50257  # GPT-2's vocabulary; the model file's rows past it are padding


def read_model(path):
    """(config, tensors) of an llm.c model file, float32, in the file's order"""
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype=np.int32)
    if h[0] != 20240326 or h[1] not in (3, 5):
        sys.exit(f"bench_torch_gpu.py: {path}: not an llm.c model file (header {h[:2].tolist()})")
    maxT, vocab, L, NH, C, VP = (int(x) for x in h[2:8])
    if h[1] == 3:
        flat = np.frombuffer(raw[1024:], dtype=np.float32)
    else:  # bf16: the top half of an fp32
        flat = (np.frombuffer(raw[1024:], dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    shapes = [("wte", (VP, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
              ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)),
              ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
              ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]
    out, at = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = torch.from_numpy(flat[at:at + n].copy()).reshape(shape)
        at += n
    if at != flat.size:
        sys.exit(f"bench_torch_gpu.py: {path}: {flat.size} parameters, its header's shapes hold {at}")
    return dict(maxT=maxT, L=L, NH=NH, C=C, VP=VP), out


def attention(q, k, v):
    """causal softmax(q k^T / sqrt(hs)) v: PyTorch's fused kernel (flash attention on a GPU) where it has
    one (2.0 and later), else the same product written out (this machine's Debian PyTorch is 1.13)"""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return att.softmax(dim=-1) @ v


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = attention(q, k, v)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, cfg, p):
        super().__init__()
        L, C = cfg["L"], cfg["C"]
        self.wte, self.wpe = nn.Embedding(cfg["VP"], C), nn.Embedding(cfg["maxT"], C)
        self.h = nn.ModuleList(Block(C, cfg["NH"]) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        with torch.no_grad():
            self.wte.weight.copy_(p["wte"]), self.wpe.weight.copy_(p["wpe"])
            for l, b in enumerate(self.h):
                for mod, w, bias in ((b.ln_1, "ln1w", "ln1b"), (b.c_attn, "qkvw", "qkvb"),
                                     (b.attn_proj, "attprojw", "attprojb"), (b.ln_2, "ln2w", "ln2b"),
                                     (b.c_fc, "fcw", "fcb"), (b.mlp_proj, "fcprojw", "fcprojb")):
                    mod.weight.copy_(p[w][l]), mod.bias.copy_(p[bias][l])
            self.ln_f.weight.copy_(p["lnfw"]), self.ln_f.bias.copy_(p["lnfb"])

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied lm_head
        return F.cross_entropy(logits[..., :V].float().flatten(0, 1), targets.flatten())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-e", required=True, help="llm.c model file")
    ap.add_argument("-i", required=True, help="llm.c token shard")
    ap.add_argument("-b", type=int, default=64, help="batch B")
    ap.add_argument("-t", type=int, default=1024, help="sequence length T")
    ap.add_argument("-x", type=int, default=12, help="steps")
    ap.add_argument("-l", type=float, default=3e-4, help="learning rate (AdamW, betas 0.9 0.95, no weight decay)")
    ap.add_argument("-device", default="cuda")
    ap.add_argument("-compile", type=int, default=1, help="1: torch.compile the model")
    ap.add_argument("-dtype", default="bf16", choices=["bf16", "fp32"], help="bf16: autocast, fp32 masters")
    ap.add_argument("-log", help="JSON lines, one a step")
    a = ap.parse_args()

    cfg, p = read_model(a.e)
    tokens = np.memmap(a.i, dtype=np.uint16, mode="r", offset=1024)
    need = a.x * a.b * a.t + 1
    if tokens.size < need:
        sys.exit(f"bench_torch_gpu.py: {a.i} holds {tokens.size} tokens, {a.x} steps of B {a.b} x T {a.t} read {need}")
    if a.t > cfg["maxT"]:
        sys.exit(f"bench_torch_gpu.py: -t {a.t} is longer than the model's {cfg['maxT']} positions")
    dev = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = a.dtype == "bf16"  # as nanoGPT; fp32 here means exact fp32
    model = GPT(cfg, p).to(dev)
    fused = dict(fused=True) if dev.type == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=a.l, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, **fused)
    step_fn = torch.compile(model) if a.compile else model
    log = open(a.log, "w") if a.log else None
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for s in range(a.x):
        chunk = torch.from_numpy(tokens[s * a.b * a.t: (s + 1) * a.b * a.t + 1].astype(np.int64))
        x, y = chunk[:-1].view(a.b, a.t).to(dev), chunk[1:].view(a.b, a.t).to(dev)
        sync()
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        ms = 1e3 * (time.perf_counter() - t0)
        lv = loss.item()
        print(f"step {s + 1:4d}/{a.x} | loss {lv:.6f} | {ms:.2f} ms | {a.b * a.t / (ms / 1e3):.0f} tok/s", flush=True)
        if log:
            log.write(json.dumps({"step": s + 1, "loss": lv, "ms": ms, "tok_per_s": a.b * a.t / (ms / 1e3)}) + "\n")
        if not math.isfinite(lv):
            sys.exit(f"bench_torch_gpu.py: step {s + 1}: the loss is {lv}")


if __name__ == "__main__":
    main()

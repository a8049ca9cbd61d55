#!/usr/bin/python3
"""
dev/pytorch_ref.py: PyTorch's answers for every kernel family, the outside reference of
the dev/ labs and of the host twins (make test).

For each op it writes OUT_DIR/<op>.bin holding, for a few sizes, the inputs and what
PyTorch computes from them: outputs and gradients. Two precisions per size:
  fp32/<k>/...   inputs rounded to fp32, everything computed in float64
  bf16/<k>/...   inputs rounded to bf16, computed by PyTorch in bf16 (as a bf16 model
                 runs), and beside each output NAME the float64 result of the same bf16
                 inputs, NAME_f64; adamw and global_norm, which the trainer computes in
                 fp32 (fp32 moments, an fp32 sum), hold float64 results only
Nothing here comes from the C++ code: every op is PyTorch's own (F.layer_norm, F.gelu,
F.cross_entropy, torch.optim.AdamW, autograd) or written from GPT-2's definition
(the embedding sum, causal attention with heads side by side in the qkv rows).

File format (little-endian), read by dev/pytorch_ref.h:
  8 bytes "OPREF001", int32 count, then per tensor:
  int32 name length, name bytes, int32 dtype (0 float64, 1 float32, 2 int32),
  int32 ndim, int64 dims[ndim], the values
"""
import argparse
import math
import os
import struct

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

DTYPES = {torch.float64: (0, "d"), torch.float32: (1, "f"), torch.int32: (2, "i")}


class RefFile:
    def __init__(self):
        self.tensors = []

    def add(self, name, t):
        t = t.detach()
        if t.dtype == torch.bfloat16:
            t = t.float()  # exact: a bf16 value is an fp32 value
        if t.dtype == torch.int64:
            t = t.int()
        self.tensors.append((name, t.contiguous()))

    def write(self, path):
        with open(path, "wb") as f:
            f.write(b"OPREF001")
            f.write(struct.pack("<i", len(self.tensors)))
            for name, t in self.tensors:
                code, fmt = DTYPES[t.dtype]
                f.write(struct.pack("<i", len(name)) + name.encode())
                f.write(struct.pack("<ii", code, t.dim()))
                f.write(struct.pack("<%dq" % t.dim(), *t.shape))
                f.write(t.numpy().astype("<" + fmt).tobytes())


def randn(gen, *shape, scale=1.0):
    return scale * torch.randn(*shape, generator=gen)


def grads(outputs, inputs, douts):
    return torch.autograd.grad(outputs, inputs, douts)


# ---------------------------------------------------------------- the ops
# Each op is two functions: NAME_inputs(gen, *sizes) draws float64 inputs (ints stay ints),
# and NAME_outputs(x, sizes) computes PyTorch's outputs and gradients from inputs x, in
# whatever dtype x holds (float64, or bf16).

def encoder_inputs(gen, B, T, C, V):
    tokens = torch.randint(0, V, (B, T), generator=gen)
    tokens[0, : min(T, 3)] = 1  # repeated tokens: the backward's scatter-add collides
    return dict(tokens=tokens, wte=randn(gen, V, C), wpe=randn(gen, T, C), dout=randn(gen, B, T, C))


def encoder_outputs(x, sizes):
    B, T, C, V = sizes
    wte, wpe = x["wte"].clone().requires_grad_(), x["wpe"].clone().requires_grad_()
    out = wte[x["tokens"]] + wpe[torch.arange(T)]  # GPT-2's embedding: token row plus position row
    dwte, dwpe = grads(out, (wte, wpe), x["dout"])
    return dict(out=out, dwte=dwte, dwpe=dwpe)


def layernorm_inputs(gen, N, C):
    return dict(inp=randn(gen, N, C, scale=2.0) + 0.5, weight=1.0 + randn(gen, C, scale=0.1),
                bias=randn(gen, C, scale=0.1), dout=randn(gen, N, C))


def layernorm_outputs(x, sizes):
    N, C = sizes
    inp, w, b = (x[k].clone().requires_grad_() for k in ("inp", "weight", "bias"))
    out = F.layer_norm(inp, (C,), w, b, eps=1e-5)
    dinp, dw, db = grads(out, (inp, w, b), x["dout"])
    xd = x["inp"].double()
    rstd = 1.0 / torch.sqrt(xd.var(-1, unbiased=False) + 1e-5)
    return dict(out=out, mean=xd.mean(-1), rstd=rstd, dinp=dinp, dweight=dw, dbias=db)


def matmul_inputs(gen, N, C, OC):
    return dict(inp=randn(gen, N, C), weight=randn(gen, OC, C, scale=1.0 / math.sqrt(C)),
                bias=randn(gen, OC, scale=0.1), dout=randn(gen, N, OC))


def matmul_outputs(x, sizes):
    inp, w, b = (x[k].clone().requires_grad_() for k in ("inp", "weight", "bias"))
    out = F.linear(inp, w, b)
    dinp, dw, db = grads(out, (inp, w, b), x["dout"])
    return dict(out=out, dinp=dinp, dweight=dw, dbias=db)


def attention_inputs(gen, B, T, C, NH):
    return dict(qkv=randn(gen, B, T, 3 * C), dout=randn(gen, B, T, C))


def attention_outputs(x, sizes):
    B, T, C, NH = sizes
    hs = C // NH
    qkv = x["qkv"].clone().requires_grad_()
    q, k, v = (qkv[:, :, i * C:(i + 1) * C].reshape(B, T, NH, hs).transpose(1, 2) for i in range(3))
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hs))
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    masked = scores.masked_fill(~causal, float("-inf"))
    att = torch.softmax(masked, dim=-1)
    lse = torch.logsumexp(masked, dim=-1).transpose(1, 2)  # (B, T, NH): flash attention's, as the trainer keeps it
    out = (att @ v).transpose(1, 2).reshape(B, T, C)
    (dqkv,) = grads(out, (qkv,), x["dout"])
    return dict(out=out, att=att, lse=lse, dqkv=dqkv)


def gelu_inputs(gen, n):
    return dict(inp=randn(gen, n, scale=2.0), dout=randn(gen, n))


def gelu_outputs(x, sizes):
    inp = x["inp"].clone().requires_grad_()
    out = F.gelu(inp, approximate="tanh")  # GPT-2's tanh approximation
    (dinp,) = grads(out, (inp,), x["dout"])
    return dict(out=out, dinp=dinp)


def crossentropy_inputs(gen, N, V, Vp):
    return dict(logits=randn(gen, N, Vp, scale=3.0), targets=torch.randint(0, V, (N,), generator=gen),
                dloss=torch.tensor([1.0 / 8]))  # d(mean loss)/d(token loss), 1/tokens: 8 here, exact in bf16


def crossentropy_outputs(x, sizes):
    N, V, Vp = sizes
    logits = x["logits"].clone().requires_grad_()
    losses = F.cross_entropy(logits[:, :V], x["targets"], reduction="none")  # the padded columns are no class
    (dlogits,) = grads(losses, (logits,), torch.full_like(losses, x["dloss"].item()))
    return dict(losses=losses, dlogits=dlogits)


ADAMW_HYPER = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, wd=0.1, t=5, grad_scale=0.5)


def adamw_inputs(gen, n):
    h = ADAMW_HYPER
    return dict(params=randn(gen, n, scale=0.1), grads=randn(gen, n, scale=0.1),
                m=randn(gen, n, scale=0.01), v=randn(gen, n, scale=0.01) ** 2,
                hyper=torch.tensor([h["lr"], h["beta1"], h["beta2"], h["eps"], h["wd"], h["t"], h["grad_scale"]]))


def adamw_outputs(x, sizes):
    """one torch.optim.AdamW step from moments m, v after t - 1 steps; always float64 (fp32 state)"""
    h = ADAMW_HYPER
    param = x["params"].double().clone().requires_grad_()
    opt = torch.optim.AdamW([param], lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"],
                            weight_decay=h["wd"], foreach=False)
    param.grad = x["grads"].double() * h["grad_scale"]  # the trainer folds clipping and unscaling into it
    opt.state[param] = {"step": torch.tensor(float(h["t"] - 1)), "exp_avg": x["m"].double().clone(),
                        "exp_avg_sq": x["v"].double().clone()}
    opt.step()
    return dict(params_out=param, m_out=opt.state[param]["exp_avg"], v_out=opt.state[param]["exp_avg_sq"])


def global_norm_inputs(gen, n):
    return dict(inp=randn(gen, n, scale=0.1))


def global_norm_outputs(x, sizes):
    inp = x["inp"].double()  # an fp32 sum in the trainer: float64 here in both precisions
    return dict(norm_squared=(inp * inp).sum().reshape(1))


FP32_STATE = {"m", "v", "hyper", "dloss"}  # inputs the trainer holds in fp32 whatever floatX is


def write_case(ref, key, precision, op, sizes, gen):
    x = globals()[op + "_inputs"](gen, *sizes)
    outputs = globals()[op + "_outputs"]
    for name, t in x.items():  # the inputs, rounded to what the build stores
        if t.is_floating_point():
            t = t.float().double() if precision == "fp32" or name in FP32_STATE else t.bfloat16()
        x[name] = t
    ref.add(f"{key}/sizes", torch.tensor(sizes))
    for name, t in x.items():
        ref.add(f"{key}/{name}", t)
    for name, t in outputs(x, sizes).items():
        ref.add(f"{key}/{name}", t)
    if precision == "bf16" and op not in ("adamw", "global_norm"):  # the same bf16 inputs in float64: the exact answer beside PyTorch's bf16 one
        exact = {k: (t.double() if t.is_floating_point() else t) for k, t in x.items()}
        for name, t in outputs(exact, sizes).items():
            ref.add(f"{key}/{name}_f64", t)


# the sizes of each op's cases: small enough for a file of a few MB at most, odd where a
# kernel's tiling could miss an edge
CASES = {
    "encoder": [(2, 4, 8, 16), (3, 33, 48, 64)],
    "layernorm": [(8, 32), (65, 96)],
    "matmul": [(8, 16, 24), (33, 64, 96)],
    "attention": [(2, 8, 16, 2), (1, 33, 48, 4), (2, 17, 32, 2), (1, 70, 128, 2)],  # head sizes 8, 12, 16, 64
    "gelu": [(1000,), (4099,)],
    "crossentropy": [(4, 50, 64), (7, 1000, 1024)],
    "adamw": [(1000,), (4099,)],
    "global_norm": [(1000,), (100003,)],
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="dev/ref", help="directory for <op>.bin (default dev/ref)")
    parser.add_argument("--ops", default=",".join(CASES), help="comma-separated ops (default: all)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for op in args.ops.split(","):
        sizes = CASES[op]
        ref = RefFile()
        for precision in ("fp32", "bf16"):
            gen = torch.Generator().manual_seed(1234)
            for k, size in enumerate(sizes):
                write_case(ref, f"{precision}/{k}", precision, op, size, gen)
        ref.write(os.path.join(args.out, op + ".bin"))
        print(f"{op}: {len(sizes)} sizes x 2 precisions -> {os.path.join(args.out, op + '.bin')}")


if __name__ == "__main__":
    main()

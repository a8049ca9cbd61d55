"""tests/test_convert_hf.py: ./convert_hf against an independent reading of both formats.

An llm.c model file (the reference model) goes to Hugging Face's layout and back:
- to-hf, run as Hugging Face runs it: hf_gpt2_logits below is GPT-2's forward written from
  Hugging Face's conventions alone (transformers' modeling_gpt2: Conv1D y = x @ W + b with W
  stored (in, out), c_attn split into q, k, v, the causal mask from the "attn.bias" buffer where
  a file has one, gelu_new, ln_f, the LM head tied to wte) on the exported tensors by name, with
  torch's own layer_norm and gelu; its logits must equal the float64 reference's
  (tests/reference.py's forward, llm.c's (out, in) layout) on the llm.c file. Nothing in that
  path goes through this script's name map, so an exported matrix left untransposed (or a map
  wrong both ways, which round-trips byte for byte) changes the logits;
- to-hf: this script's own safetensors reader (the 8-byte length, the JSON header, numpy)
  finds exactly GPT-2's tensor names, shapes (Conv1D weights (in, out), wte without padding)
  and values, and config.json's shape;
- from-hf of that export gives the original file byte for byte;
- from-hf of files this script writes itself, as the hub has them ("transformer." prefixes,
  tensors in another order, the "attn.bias" mask buffers, F16 values): the same parameters
  (F16: rounded as numpy rounds), and the hub-like file runs to the same logits;
- transformers' own GPT2LMHeadModel (from_pretrained, fp32) on the export: the float64 reference's
  logits within 1e-5; a checkpoint transformers saved (save_pretrained), imported by from-hf and
  trained from: ./train_gpt_cpu's first loss is transformers' on the same batch within 1e-5;
- bad files: one error line, exit 1.
Usage: test_convert_hf.py REFERENCE_DIR   (CONVERT_HF=path: another build of ./convert_hf)"""
import json, os, shutil, struct, subprocess, sys, tempfile
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(__file__))
import reference


def transformers_version():
    import transformers
    return transformers.__version__

ref = sys.argv[1]
work = tempfile.mkdtemp(prefix="convert_hf_", dir="tests/build")

def read_llmc(path):
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype=np.int32)
    maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
    assert h[0] == 20240326 and h[1] == 3, "fp32 llm.c model file expected"
    params, at = {}, 1024
    for name, shape in reference.shapes(L, C, maxT).items():
        n = int(np.prod(shape))
        params[name] = np.frombuffer(raw[at:at + 4 * n], dtype=np.float32).reshape(shape)
        at += 4 * n
    assert at == len(raw)
    return params, dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp)

def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    dtypes = {"F32": np.float32, "F16": np.float16}
    return {name: np.frombuffer(data[t["data_offsets"][0]:t["data_offsets"][1]], dtype=dtypes[t["dtype"]]).reshape(t["shape"])
            for name, t in header.items()}

def write_safetensors(path, tensors, dtype):
    header, body = {}, b""
    for name, t in tensors.items():
        b = np.ascontiguousarray(t, dtype={"F32": np.float32, "F16": np.float16}[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [len(body), len(body) + len(b)]}
        body += b
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + body)

# llm.c name -> (HF name, transposed), per layer where the name has %d
MAP = {"wte": ("wte.weight", False), "wpe": ("wpe.weight", False), "ln1w": ("h.%d.ln_1.weight", False),
       "ln1b": ("h.%d.ln_1.bias", False), "qkvw": ("h.%d.attn.c_attn.weight", True), "qkvb": ("h.%d.attn.c_attn.bias", False),
       "attprojw": ("h.%d.attn.c_proj.weight", True), "attprojb": ("h.%d.attn.c_proj.bias", False),
       "ln2w": ("h.%d.ln_2.weight", False), "ln2b": ("h.%d.ln_2.bias", False), "fcw": ("h.%d.mlp.c_fc.weight", True),
       "fcb": ("h.%d.mlp.c_fc.bias", False), "fcprojw": ("h.%d.mlp.c_proj.weight", True),
       "fcprojb": ("h.%d.mlp.c_proj.bias", False), "lnfw": ("ln_f.weight", False), "lnfb": ("ln_f.bias", False)}

def to_hf_tensors(p, cfg):  # what the hub's gpt2 holds, computed here from llm.c's arrays
    out = {}
    for name, (hf, transposed) in MAP.items():
        for l in range(cfg["L"]) if "%d" in hf else [None]:
            t = p[name] if l is None else p[name][l]
            if name == "wte": t = t[:cfg["V"]]
            out[hf % l if l is not None else hf] = t.T if transposed else t
    return out

def from_hf_tensors(tensors, cfg, prefix=""):  # llm.c's arrays from HF tensors
    p = {}
    for name, (hf, transposed) in MAP.items():
        get = lambda n: tensors[prefix + n].T if transposed else tensors[prefix + n]
        if "%d" in hf: p[name] = np.stack([get(hf % l) for l in range(cfg["L"])])
        else: p[name] = get(hf)
    p["wte"] = np.concatenate([p["wte"], np.zeros((cfg["Vp"] - cfg["V"], cfg["C"]), np.float32)])
    return p

def convert(*args):
    return subprocess.run([os.environ.get("CONVERT_HF", "./convert_hf"), *args], capture_output=True, text=True)

def hf_gpt2_logits(tensors, config, idx, prefix=""):
    """GPT2LMHeadModel's logits (float64) from a safetensors file's tensors, in Hugging Face's
    conventions only (modeling_gpt2, eager attention): nothing here knows llm.c's layout"""
    t = lambda name: torch.tensor(np.array(tensors[prefix + name]), dtype=torch.float64)
    B, T = idx.shape
    C, NH, eps = config["n_embd"], config["n_head"], config["layer_norm_epsilon"]
    assert config["activation_function"] == "gelu_new"
    conv1d = lambda x, name: x @ t(name + ".weight") + t(name + ".bias")  # Conv1D: weight (in, out)
    heads = lambda x: x.view(B, T, NH, C // NH).permute(0, 2, 1, 3)
    h = t("wte.weight")[idx] + t("wpe.weight")[torch.arange(T)]
    for i in range(config["n_layer"]):
        a = F.layer_norm(h, (C,), t(f"h.{i}.ln_1.weight"), t(f"h.{i}.ln_1.bias"), eps)
        q, k, v = (heads(x) for x in conv1d(a, f"h.{i}.attn.c_attn").split(C, dim=2))
        w = q @ k.transpose(-1, -2) / float(v.size(-1)) ** 0.5
        buffer = prefix + f"h.{i}.attn.bias"  # the causal mask buffer, (1, 1, n_positions, n_positions)
        causal = t(f"h.{i}.attn.bias")[:, :, :T, :T].bool() if buffer in tensors else torch.ones(T, T).tril().bool()
        w = torch.where(causal, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype)).softmax(dim=-1)
        y = (w @ v).permute(0, 2, 1, 3).reshape(B, T, C)
        h = h + conv1d(y, f"h.{i}.attn.c_proj")
        m = F.layer_norm(h, (C,), t(f"h.{i}.ln_2.weight"), t(f"h.{i}.ln_2.bias"), eps)
        h = h + conv1d(F.gelu(conv1d(m, f"h.{i}.mlp.c_fc"), approximate="tanh"), f"h.{i}.mlp.c_proj")
    h = F.layer_norm(h, (C,), t("ln_f.weight"), t("ln_f.bias"), eps)
    return h @ t("wte.weight").T  # lm_head tied to wte: (B, T, vocab_size)

def check_hf_logits(tensors, config, what, prefix=""):
    """Hugging Face's logits from `tensors` against the float64 reference's on the llm.c file"""
    diff = (hf_gpt2_logits(tensors, config, idx, prefix) - logits_llmc).abs().max().item()
    assert diff < 1e-12, f"{what}: Hugging Face's logits differ from the llm.c model's by {diff:.3g}"
    print(f"ok: {what} run as Hugging Face runs GPT-2 (Conv1D, tied head) gives the llm.c file's float64 "
          f"logits (max |diff| {diff:.1e}, bar 1e-12: float64 round-off)")

params, cfg = read_llmc(f"{ref}/model.bin")
r = convert("to-hf", f"{ref}/model.bin", f"{work}/hf")
assert r.returncode == 0, r.stderr
got = read_safetensors(f"{work}/hf/model.safetensors")
config = json.load(open(f"{work}/hf/config.json"))
# the float64 reference's logits of the llm.c file (its own forward, llm.c's (out, in) layout)
idx = torch.tensor(np.random.default_rng(0).integers(0, cfg["V"], size=(2, 16)))
logits_llmc = reference.forward({k: torch.tensor(np.array(v), dtype=torch.float64) for k, v in params.items()},
                                idx, cfg["NH"])[..., :cfg["V"]]
check_hf_logits(got, config, "the export")

want = to_hf_tensors(params, cfg)
assert sorted(got) == sorted(want), f"names: {sorted(set(got) ^ set(want))}"
for name in want:
    assert got[name].shape == want[name].shape, f"{name}: shape {got[name].shape}, want {want[name].shape}"
    assert np.array_equal(got[name], want[name]), f"{name}: values differ"
assert (config["n_layer"], config["n_head"], config["n_embd"], config["n_positions"], config["vocab_size"]) == \
    (cfg["L"], cfg["NH"], cfg["C"], cfg["maxT"], cfg["V"]) and config["model_type"] == "gpt2"
print(f"ok: to-hf: {len(want)} tensors with GPT-2's names, shapes (Conv1D (in, out)) and values; config.json")

r = convert("from-hf", f"{work}/hf/model.safetensors", f"{work}/back.bin")
assert r.returncode == 0, r.stderr
assert open(f"{work}/back.bin", "rb").read() == open(f"{ref}/model.bin", "rb").read(), "round trip changed the file"
print("ok: from-hf of the export is the original llm.c file, byte for byte")

mask = np.tril(np.ones((cfg["maxT"], cfg["maxT"]), np.float32))[None, None]  # the hub's gpt2 keeps these buffers
for dtype, prefix, buffers in (("F32", "transformer.", True), ("F16", "", False)):
    os.makedirs(f"{work}/{dtype}", exist_ok=True)
    tensors = dict(reversed([(prefix + k, v) for k, v in want.items()]))  # another order than ours
    if buffers:
        tensors.update({f"{prefix}h.{l}.attn.bias": mask for l in range(cfg["L"])})
    write_safetensors(f"{work}/{dtype}/model.safetensors", tensors, dtype)
    json.dump(config, open(f"{work}/{dtype}/config.json", "w"))
    r = convert("from-hf", f"{work}/{dtype}/model.safetensors", f"{work}/{dtype}.bin")
    assert r.returncode == 0, r.stderr
    back, _ = read_llmc(f"{work}/{dtype}.bin")
    expect = from_hf_tensors({k: v.astype(np.float16).astype(np.float32) if dtype == "F16" else v for k, v in tensors.items()},
                             cfg, prefix)
    for name in expect:
        assert np.array_equal(back[name], expect[name]), f"{dtype}: {name} differs"
    print(f"ok: from-hf of a file written here ({dtype}, prefix '{prefix}', reversed order"
          f"{', attn.bias buffers' if buffers else ''}): the same parameters")
    if buffers:
        check_hf_logits(tensors, config, f"the hub-like file ({dtype}, prefix '{prefix}', attn.bias buffers)", prefix)

# Hugging Face transformers' own GPT2LMHeadModel (scripts/install_deps.sh installs it), in fp32: the
# export loaded by from_pretrained runs to the float64 reference's logits of the llm.c file
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
torch.set_default_dtype(torch.float32)  # (tests/reference.py sets float64): transformers' models in fp32
hf = GPT2LMHeadModel.from_pretrained(f"{work}/hf", local_files_only=True, torch_dtype=torch.float32).eval()
assert hf.transformer.wte.weight.dtype == torch.float32
with torch.no_grad():
    diff = (hf(idx).logits.double()[..., :cfg["V"]] - logits_llmc).abs().max().item()
assert diff < 1e-5, f"FAIL: transformers' GPT2LMHeadModel on the export: logits {diff:.3g} off the float64 reference's"
print(f"ok: transformers {transformers_version()} GPT2LMHeadModel.from_pretrained of the export (fp32): logits within "
      f"{diff:.1e} of the float64 reference's on the llm.c file (bar 1e-5)")

# a checkpoint transformers saved (save_pretrained: its safetensors and config.json) imported by
# ./convert_hf and trained from by ./train_gpt_cpu: the first step's loss (before its update) is
# transformers' loss of the same batch (the shard's first B T + 1 tokens, -shuffle 0), in fp32
torch.manual_seed(7)
saved = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=64, vocab_size=cfg["V"])).eval()
saved.save_pretrained(f"{work}/saved", safe_serialization=True)
r = convert("from-hf", f"{work}/saved/model.safetensors", f"{work}/saved.bin")
assert r.returncode == 0, r.stderr
tokens = np.frombuffer(open(f"{ref}/train.bin", "rb").read()[1024:], dtype=np.uint16).astype(np.int64)
B, T = 2, 32
x, y = torch.tensor(tokens[:B * T].reshape(B, T)), torch.tensor(tokens[1:B * T + 1].reshape(B, T))
with torch.no_grad():
    want = F.cross_entropy(saved(x).logits.double().view(-1, cfg["V"]), y.view(-1)).item()
r = subprocess.run(["./train_gpt_cpu", "-e", f"{work}/saved.bin", "-i", f"{ref}/train.bin", "-b", str(B), "-t", str(T),
                    "-x", "1", "-shuffle", "0", "-v", "0", "-s", "0", "-log", f"{work}/saved.jsonl"],
                   capture_output=True, text=True)
assert r.returncode == 0, r.stdout[-500:] + r.stderr[-500:]
got = json.loads(open(f"{work}/saved.jsonl").readline())["loss"]
assert abs(got - want) < 1e-5, f"FAIL: trained from transformers' checkpoint: loss {got:.7f}, transformers' {want:.7f}"
print(f"ok: a checkpoint transformers saved, through ./convert_hf from-hf: our first loss {got:.7f}, transformers' "
      f"{want:.7f} (|diff| {abs(got - want):.1e}, bar 1e-5)")

raw = open(f"{work}/hf/model.safetensors", "rb").read()
os.makedirs(f"{work}/bad", exist_ok=True)
json.dump(config, open(f"{work}/bad/config.json", "w"))
for what, data, message in (("truncated", raw[:len(raw) // 2], "bad data_offsets"), ("no header", raw[:5], "8-byte"),
                            ("header past the end", struct.pack("<Q", 10**9) + raw[8:100], "past the end"),
                            ("junk header", struct.pack("<Q", 20) + b"{not json at all....", "malformed JSON")):
    open(f"{work}/bad/model.safetensors", "wb").write(data)
    r = convert("from-hf", f"{work}/bad/model.safetensors", f"{work}/bad.bin")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and message in lines[0], (what, r.returncode, r.stderr)
    print(f"ok: {what}: {lines[0]}")
assert not os.path.exists(f"{work}/bad.bin")
shutil.rmtree(work)  # passed: its ~70 MB of model files prove nothing more

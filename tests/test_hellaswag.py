#!/usr/bin/python3
"""
tests/test_hellaswag.py: -h 1 (hellaswag.h) against llm.c's completion-style scoring computed apart.

1. 41 HellaSwag-shaped examples (JSON lines: ctx, 4 endings, label) made from tinyshakespeare's
   lines; `./tokenize hellaswag` must write, byte for byte, the file that llm.c's write_evalfile
   (dev/data/data_common.py, written out below) makes of GPT-2's ids from OpenAI's encoder
   (tests/gpt2_encoder_reference.py), the context's and " " + each ending's;
2. tests/reference.py's model (its model.bin, read here as float64) scores every ending in
   PyTorch float64: the mean cross-entropy over the ending's tokens, each predicted by the token
   before it; the answer is the lowest mean (the first on a tie); accuracy = answers right;
3. the trainer, at one rank, dp 2, tp 2, pp 2 and cp 2 (B 4 T 64, -x 1 at -l 0: the model as read),
   logs hellaswag_correct and _total, and writes each ending's mean loss (TRAIN_GPT_HELLASWAG_SCORES):
   the count must equal the reference's exactly, every mean loss within 1e-5 (fp32's sums: measured
   ~1e-6); main.log holds llm.c's "s:1 eval:ACC" line.
Also: a damaged eval file and -b 3 are refused in one line.
Usage: test_hellaswag.py REFERENCE_DIR
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import reference  # noqa: E402  (tests/reference.py: the float64 GPT-2)
from gpt2_encoder_reference import Encoder  # noqa: E402

REF = sys.argv[1]
D = "tests/build/hellaswag"
shutil.rmtree(D, ignore_errors=True)
os.makedirs(D)


def write_evalfile(filename, datas):
    """llm.c's dev/data/data_common.py write_evalfile, as it is there"""
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240522, 1, len(datas)
    longest, full = 0, []
    for idx, data in enumerate(datas):
        stream = [2**16 - 1, 0, idx, data["label"], len(data["ending_tokens"])]
        stream.append(len(data["ctx_tokens"]))
        stream.extend(data["ctx_tokens"])
        for end_tokens in data["ending_tokens"]:
            stream.append(len(end_tokens))
            stream.extend(end_tokens)
        stream[1] = len(stream) * 2
        longest = max(longest, stream[1])
        full.extend(stream)
    header[3] = longest
    with open(filename, "wb") as f:
        f.write(header.tobytes())
        f.write(np.array(full, dtype=np.uint16).tobytes())


# 1. the examples: short lines of tinyshakespeare (T 64 holds context + ending)
rng = random.Random(1234)
lines = [l.strip() for l in open("data/tinyshakespeare.txt", encoding="utf-8") if 10 < len(l.strip()) < 60]
examples = []
for i in range(41):
    examples.append({"ind": i, "ctx": rng.choice(lines) + " " + rng.choice(lines).split(" ")[0],
                     "endings": [rng.choice(lines) for _ in range(4)], "label": rng.randrange(4)})
with open(f"{D}/examples.jsonl", "w", encoding="utf-8") as f:
    for x in examples:
        f.write(json.dumps(x) + "\n")
enc = Encoder("data/gpt2")
datas = [{"label": x["label"], "ctx_tokens": enc.encode_text(x["ctx"]),
          "ending_tokens": [enc.encode_text(" " + e) for e in x["endings"]]} for x in examples]
write_evalfile(f"{D}/expected.bin", datas)
subprocess.run(["./tokenize", "hellaswag", f"{D}/examples.jsonl", f"{D}/eval.bin"], check=True, capture_output=True)
if open(f"{D}/eval.bin", "rb").read() != open(f"{D}/expected.bin", "rb").read():
    sys.exit("FAIL: ./tokenize hellaswag's file differs from llm.c's write_evalfile of the same examples")
print(f"./tokenize hellaswag: {len(examples)} examples, byte for byte llm.c's write_evalfile")

# 2. the float64 reference's scores
raw = open(f"{REF}/model.bin", "rb").read()
h = struct.unpack("<256i", raw[:1024])
maxT, V, L, NH, C, Vp = h[2], h[3], h[4], h[5], h[6], h[7]
reference.V, reference.VP = V, Vp
flat = np.frombuffer(raw[1024:], dtype=np.float32).astype(np.float64)
p, at = {}, 0
for name, shape in reference.shapes(L, C, maxT).items():
    n = int(np.prod(shape))
    p[name] = torch.from_numpy(flat[at:at + n].reshape(shape).copy())
    at += n
want_scores, want_right = {}, 0
with torch.no_grad():
    for e, d in enumerate(datas):
        means = []
        for j, ending in enumerate(d["ending_tokens"]):
            row = torch.tensor([d["ctx_tokens"] + ending])
            losses = reference.token_losses(reference.forward(p, row[:, :-1], NH), row[:, 1:])[0]
            means.append(losses[len(d["ctx_tokens"]) - 1:].mean().item())
            want_scores[(e, j)] = means[-1]
        want_right += int(np.argmin(means)) == d["label"]
print(f"float64 reference: {want_right} of {len(datas)} right")

# 3. the trainer under each layout
flags = ["-e", f"{REF}/model.bin", "-i", f"{REF}/train.bin", "-j", f"{REF}/train.bin", "-b", "4", "-t", "64",
         "-x", "1", "-l", "0", "-v", "1", "-m", "1", "-s", "0", "-h", "1", "-hf", f"{D}/eval.bin"]
layouts = {"one rank": (1, []), "dp 2": (2, []), "tp 2": (2, ["-tp", "2"]), "pp 2": (2, ["-pp", "2"]),
           "cp 2": (2, ["-cp", "2"])}
for label, (np_, extra) in layouts.items():
    tag = label.replace(" ", "")
    env = dict(os.environ, TRAIN_GPT_HELLASWAG_SCORES=f"{D}/{tag}.scores", OMP_NUM_THREADS="1")
    cmd = ["timeout", "300", "mpirun", "-np", str(np_), "./train_gpt_cpu"] + flags + extra + \
          ["-o", f"{D}/{tag}", "-log", f"{D}/{tag}.jsonl"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {label}: exit {r.returncode}: {r.stdout[-500:]} {r.stderr[-500:]}")
    row = json.loads(open(f"{D}/{tag}.jsonl").readline())
    got = {}
    for k in range(np_):
        path = f"{D}/{tag}.scores.{k}"
        for line in open(path) if os.path.exists(path) else []:
            e, j, s = line.split()
            got[(int(e), int(j))] = float(s)
    assert sorted(got) == sorted(want_scores), f"FAIL: {label}: scores of {len(got)} endings, not {len(want_scores)}"
    worst = max(abs(got[k] - want_scores[k]) if got[k] == got[k] else float("inf") for k in got)
    assert worst < 1e-5, f"FAIL: {label}: an ending's mean loss {worst:.2e} off the float64 reference's"
    assert (row["hellaswag_correct"], row["hellaswag_total"]) == (want_right, len(datas)), \
        f"FAIL: {label}: hellaswag_correct {row['hellaswag_correct']} of {row['hellaswag_total']}, " \
        f"the float64 reference {want_right} of {len(datas)}"
    main_log = open(f"{D}/{tag}/main.log").read()
    assert f"s:1 eval:{want_right / len(datas):.4f}" in main_log, f"FAIL: {label}: main.log {main_log!r}"
    print(f"{label}: {row['hellaswag_correct']} of {row['hellaswag_total']} right, every ending's mean loss "
          f"within {worst:.1e} of float64")

# refusals: a damaged file, one without examples, and B under 4
bad = bytearray(open(f"{D}/eval.bin", "rb").read())
bad[1024 + 4] ^= 0xFF  # the first example's index word
open(f"{D}/bad.bin", "wb").write(bad)
empty = bytearray(open(f"{D}/eval.bin", "rb").read()[:1024])
empty[8:12] = (0).to_bytes(4, "little")  # the header's example count
open(f"{D}/empty.bin", "wb").write(empty)
for what, args, message in (("a damaged file", ["-hf", f"{D}/bad.bin"], "example 0 is damaged"),
                            ("no examples", ["-hf", f"{D}/empty.bin"], "0 examples: an eval file holds at least one"),
                            ("-b 3", ["-b", "3"], "-h 1 needs -b >= 4")):
    r = subprocess.run(["./train_gpt_cpu"] + flags + args, capture_output=True, text=True)
    errors = [l for l in (r.stdout + r.stderr).splitlines() if l.startswith("error:")]
    assert r.returncode == 1 and len(errors) == 1 and message in errors[0], \
        f"FAIL: {what}: exit {r.returncode}, {errors}"
    print(f"{what}: {errors[0]}")
print("ok: HellaSwag")

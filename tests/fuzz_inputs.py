"""tests/fuzz_inputs.py: random and truncated inputs never crash the programs.

The trainer's flag parser gets random flags with random values (numbers out of range, nan,
inf, huge integers, words, empty strings, random bytes); its readers get the reference model
file, a token shard and the tokenizer file cut at random lengths and with random header
words; ./tokenize gets JSON lines of random bytes and cut lines. Every run must end with exit
0, or exit 1 and one line on stderr that starts with "error:" -- never a signal, never
another code, never a traceback of lines.
Usage: fuzz_inputs.py TRAINER REFERENCE_DIR [SEED]"""
import os, random, shutil, subprocess, sys, tempfile, time

trainer, ref = sys.argv[1], sys.argv[2]
seed = int(sys.argv[3]) if len(sys.argv) > 3 else int(time.time())
rng = random.Random(seed)
print(f"fuzz seed {seed} (pass it as the third argument to repeat this run)")
work = tempfile.mkdtemp(prefix="fuzz_", dir="tests/build")
base = ["-e", f"{ref}/model.bin", "-i", f"{ref}/train.bin", "-b", "2", "-t", "16", "-x", "1", "-v", "0", "-s", "0"]
failures = 0

def run(args, what):
    global failures
    p = subprocess.run(args, capture_output=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    lines = [l for l in p.stderr.decode(errors="replace").splitlines() if l.strip()]
    ok = p.returncode == 0 or (p.returncode == 1 and len(lines) == 1 and lines[0].startswith("error:"))
    if not ok:
        failures += 1
        print(f"FAIL {what}: exit {p.returncode}, stderr {lines[:3]}\n  {' '.join(args)}")
    return p.returncode

# flags: the real ones from -h, values from a box of bad and good ones; -plan 1 last, so that
# every accepted combination stops after the checks, before any training
help_text = subprocess.run([trainer, "-h"], capture_output=True, text=True).stdout
flags = [l.split()[0] for l in help_text.splitlines() if l.startswith("  -") and l.split()[0] != "-h"]
values = ["", "nan", "-nan", "inf", "-inf", "1e40", "-1e40", "99999999999999999999", "-99999999999", "2147483648",
          "-2147483649", "0", "-1", "1", "2", "3", "7", "0.5", "1e-9", "abc", "0x10", "1.5.2", "--", "\xff\xfe", "d0",
          "d99999", "mpi", "nccl", "gpipe", "fp32", "dynamic", "off", "/nonexistent/x.bin"]
codes = {0: 0, 1: 0}
for k in range(150):
    extra = []
    for _ in range(rng.randint(1, 3)):
        extra += [rng.choice(flags + ["-zz", "--b"]), rng.choice(values + [str(rng.randint(-10**6, 10**6))])]
    code = run([trainer] + base + extra + ["-plan", "1"], f"flags {extra}")
    codes[code] = codes.get(code, 0) + 1
print(f"flags: 150 random command lines: {codes.get(0, 0)} accepted, {codes.get(1, 0)} refused with one line")

def mangled(src, name, k):  # the file cut short, or with a random header word
    raw = bytearray(open(src, "rb").read())
    if k % 2 == 0:
        raw = raw[:rng.randrange(len(raw))]
    else:
        at = rng.randrange(0, 1024, 4)
        raw[at:at + 4] = rng.choice([0, 1, 3, 5, 7, 0x7FFFFFFF, 0xFFFFFFFF, rng.randrange(2**32)]).to_bytes(4, "little")
    path = f"{work}/{name}"
    open(path, "wb").write(raw)
    return path

for k in range(24):
    run([trainer] + base + ["-e", mangled(f"{ref}/model.bin", f"model_{k}.bin", k)], f"model file {k}")
    run([trainer] + base + ["-i", mangled(f"{ref}/train.bin", f"shard_{k}.bin", k)], f"token shard {k}")
    run([trainer] + base + ["-s", "1", "-g", "4", "-tok", mangled("data/gpt2_tokenizer.bin", f"tok_{k}.bin", k)],
        f"tokenizer file {k}")
print("readers: 24 mangled model files, token shards and tokenizer files")

lines = ['{"text": "fine"}', '{"text": "\\ud83d\\ude00 ok"}', "{}", "[]", "null", '{"text": 1}', '"text"', '{"text": "a"']
with open(f"{work}/random.jsonl", "wb") as f:
    for k in range(300):
        pick = rng.random()
        if pick < 0.4: f.write(rng.choice(lines).encode())
        elif pick < 0.7: f.write(bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))).replace(b"\n", b""))
        else: f.write(rng.choice(lines).encode()[:rng.randint(0, 12)])
        f.write(b"\n")
run(["./tokenize", "shards", "-o", f"{work}/out", "--jsonl", "--skip-bad-lines", f"{work}/random.jsonl"], "JSON lines, skipping")
run(["./tokenize", "shards", "-o", f"{work}/out", "--jsonl", f"{work}/random.jsonl"], "JSON lines")
print("tokenize: 300 random JSON lines, with and without --skip-bad-lines")
if failures:
    sys.exit(f"{failures} runs crashed or did not say what was wrong (inputs kept in {work})")
shutil.rmtree(work)  # ~250 MB of model files: CI's disk is shared by the whole suite
print("ok: no crash, every refusal one line")

#!/usr/bin/python3
"""
tests/make_byte_shard.py: a stand-in tokenizer for tests: writes TEXT as llm.c token
shards using GPT-2's single-byte tokens (each UTF-8 byte becomes the GPT-2 token of
that byte, via encoder.json and GPT-2's bytes_to_unicode table). Real text, real
token ids, no BPE merges.

    make_byte_shard.py ENCODER_JSON TEXT OUT_PREFIX [VAL_BYTES]   ->  OUT_PREFIX_train.bin, OUT_PREFIX_val.bin
"""
import json
import sys

import numpy as np


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def write(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.array(tokens, dtype=np.uint16).tobytes())


def main():
    encoder = json.load(open(sys.argv[1]))
    data = open(sys.argv[2], "rb").read()
    val_bytes = int(sys.argv[4]) if len(sys.argv) > 4 else 32768
    b2u = bytes_to_unicode()
    ids = [encoder[b2u[b]] for b in data]
    eot = encoder["<|endoftext|>"]
    write(sys.argv[3] + "_val.bin", [eot] + ids[:val_bytes])
    write(sys.argv[3] + "_train.bin", [eot] + ids[val_bytes:])


if __name__ == "__main__":
    main()

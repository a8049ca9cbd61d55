#!/usr/bin/python3
"""
tests/gpt2_encoder_reference.py: GPT-2's encoder as OpenAI's encoder.py defines it, the
oracle of ./tokenize. Written from that algorithm: bytes_to_unicode, the pre-split
pattern through Python's `regex` module (where \\s is Unicode White_Space), and BPE
merging the lowest-ranked pair until none applies. Nothing here comes from the C++ code.

One rule beyond encoder.py, which only sees valid text: a byte that is not part of
valid UTF-8 is a chunk of its own (its single-byte token), and the pattern runs on the
valid stretches between such bytes. ./tokenize documents the same rule.

    gpt2_encoder_reference.py VOCAB_DIR FILE...   -> prints each file's ids, space-separated, a line a file
"""
import json
import sys

import regex

PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


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


class Encoder:
    def __init__(self, vocab_dir):
        self.encoder = json.load(open(f"{vocab_dir}/encoder.json", encoding="utf-8"))
        merges = open(f"{vocab_dir}/vocab.bpe", encoding="utf-8").read().split("\n")[1:-1]
        self.ranks = {tuple(m.split()): i for i, m in enumerate(merges)}
        self.byte_encoder = bytes_to_unicode()
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        while len(word) > 1:
            pairs = set(zip(word, word[1:]))
            bigram = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if bigram not in self.ranks:
                break
            first, second = bigram
            new, i = [], 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    new.extend(word[i:])
                    break
                new.extend(word[i:j])
                i = j
                if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                    new.append(first + second)
                    i += 2
                else:
                    new.append(word[i])
                    i += 1
            word = tuple(new)
        self.cache[token] = word
        return word

    def encode_text(self, text):
        ids = []
        for chunk in regex.findall(PATTERN, text):
            unicode_chunk = "".join(self.byte_encoder[b] for b in chunk.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(unicode_chunk))
        return ids

    def encode_bytes(self, data):
        """valid UTF-8 stretches through encode_text; any other byte alone"""
        ids, i = [], 0
        while i < len(data):
            j = i
            while j < len(data):
                for n in (1, 2, 3, 4):
                    try:
                        data[j:j + n].decode("utf-8")
                        break
                    except UnicodeDecodeError:
                        continue
                else:
                    break
                j += n
            ids.extend(self.encode_text(data[i:j].decode("utf-8")))
            if j < len(data):
                ids.append(self.encoder[self.byte_encoder[data[j]]])
            i = j + 1
        return ids


if __name__ == "__main__":
    enc = Encoder(sys.argv[1])
    for path in sys.argv[2:]:  # a line each: one start-up for many files
        print(" ".join(map(str, enc.encode_bytes(open(path, "rb").read()))))

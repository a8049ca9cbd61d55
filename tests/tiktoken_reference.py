#!/usr/bin/python3
"""
tests/tiktoken_reference.py: the ids of FILE's text by tiktoken's "gpt2" encoding (OpenAI's own
tokenizer library; scripts/install_deps.sh installs it), a second reference for ./tokenize beside
tests/gpt2_encoder_reference.py. tiktoken fetches GPT-2's encoder.json and vocab.bpe from the web;
here its cache (TIKTOKEN_CACHE_DIR, keyed by the URL's SHA-1) is filled from VOCAB_DIR first, and
tiktoken checks each file against the SHA-256 it expects, so these are GPT-2's files. "<|endoftext|>"
in the text is text (disallowed_special=()), as ./tokenize reads it.

    tiktoken_reference.py VOCAB_DIR FILE...   -> prints each file's ids, space-separated, a line a file
                                                (each FILE valid UTF-8)
"""
import hashlib
import os
import shutil
import sys
import tempfile

URLS = {"vocab.bpe": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
        "encoder.json": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json"}


def encoding(vocab_dir):
    cache = tempfile.mkdtemp(prefix="tiktoken_")
    for name, url in URLS.items():
        shutil.copy(os.path.join(vocab_dir, name), os.path.join(cache, hashlib.sha1(url.encode()).hexdigest()))
    os.environ["TIKTOKEN_CACHE_DIR"] = cache
    import tiktoken
    try:
        return tiktoken.get_encoding("gpt2")
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    enc = encoding(sys.argv[1])
    for path in sys.argv[2:]:  # a line each: one start-up for many files
        text = open(path, "rb").read().decode("utf-8")
        print(" ".join(map(str, enc.encode(text, disallowed_special=()))))

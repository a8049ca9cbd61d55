#!/usr/bin/env bash
# ./tokenize against GPT-2's own algorithm (tests/gpt2_encoder_reference.py, Python `regex`) and,
# on every text that is valid UTF-8, against tiktoken's gpt2 encoding (tests/tiktoken_reference.py):
# exact ids on the fixture texts (every case: contractions, Unicode letters and numbers,
# whitespace runs, emoji, "<|endoftext|>" as text, invalid UTF-8), on texts generated fresh
# for this run (a new seed each time, printed), and on all of tinyshakespeare; `text` gives
# the bytes back exactly; shards hold [EOT] + ids of each document; bad input is an error.
# Usage: test_tokenizer.sh VOCAB_DIR TINYSHAKESPEARE_TXT (make data puts them in data/)
set -euo pipefail
VOCAB=$1; SHAKESPEARE=$2; PYTHON=${PYTHON:-/usr/bin/python3}
D=tests/build/tokenizer; rm -rf $D; mkdir -p $D
TOK="./tokenize --vocab $VOCAB"
SEED=${TOKENIZER_TEST_SEED:-$(date +%s)}
echo "fresh texts from seed $SEED (TOKENIZER_TEST_SEED=$SEED reproduces them)"
$PYTHON - $D $SEED <<'PY'
import random, sys
d, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
pieces = ["I'm", "you'll", "it's", "we'd", "they've", "'re", "'S", "Don't", " ", "  ", "\t", "\n", "\n\n", "\r\n",
          "\u00a0", "\u2003", "\u3000", "\u0085", "hello", "Straße", "naïve", "Ελλάδα", "Москва", "東京", "한국",
          "مرحبا", "שלום", "हिन्दी", "42", "3.14", "٣", "½", "Ⅻ", "x²", "👋🏽", "🚀", "👨‍👩‍👧", "🇯🇵", "❤️", "!!!",
          "...", "—", "«»", "<|endoftext|>", "$", "#", "()", "{}", "\\", "\"", "'", "’", "`"]
for k in range(30):
    text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 80)))
    if k % 5 == 0:
        text = text.encode("utf-8") + bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
        open(f"{d}/fresh_{k}.txt", "wb").write(text)
    else:
        open(f"{d}/fresh_{k}.txt", "w", encoding="utf-8").write(text)
PY
# the references read every file in one start-up each (a line a file); tiktoken takes str, so
# only the texts that are valid UTF-8
files=(tests/fixtures/tok_*.txt $D/fresh_*.txt $SHAKESPEARE) utf8=()
for f in "${files[@]}"; do iconv -f UTF-8 -t UTF-8 $f > /dev/null 2>&1 && utf8+=($f); done
$PYTHON tests/gpt2_encoder_reference.py $VOCAB "${files[@]}" > $D/ref_all.txt
$PYTHON tests/tiktoken_reference.py $VOCAB "${utf8[@]}" > $D/tiktoken_all.txt
n=0 k=0
for f in "${files[@]}"; do
    $TOK ids $f > $D/ours.txt
    n=$((n + 1))
    sed -n "${n}p" $D/ref_all.txt > $D/ref.txt
    cmp -s $D/ours.txt $D/ref.txt || { echo "FAIL: ids of $f differ from GPT-2's"; diff <(tr ' ' '\n' < $D/ours.txt) <(tr ' ' '\n' < $D/ref.txt) | head; exit 1; }
    $TOK text $D/ours.txt > $D/back.txt
    cmp -s $D/back.txt $f || { echo "FAIL: ./tokenize text does not give back $f"; exit 1; }
    if [ $k -lt ${#utf8[@]} ] && [ "${utf8[$k]}" = $f ]; then  # tiktoken, OpenAI's library
        k=$((k + 1))
        sed -n "${k}p" $D/tiktoken_all.txt | cmp -s $D/ours.txt - || { echo "FAIL: ids of $f differ from tiktoken's gpt2 encoding"; exit 1; }
    fi
done
[ $(wc -l < $D/ref_all.txt) -eq $n ] && [ $(wc -l < $D/tiktoken_all.txt) -eq $k ] && [ $k -gt 0 ] \
    || { echo "FAIL: the references gave $(wc -l < $D/ref_all.txt) and $(wc -l < $D/tiktoken_all.txt) lines for $n and $k files"; exit 1; }
echo "ok: $n texts: ids equal GPT-2's, $k of them (the valid UTF-8 ones) tiktoken's too; text round-trips byte for byte ($(wc -w < $D/ours.txt) tokens in tinyshakespeare)"

# shards: documents split on blank lines, EOT first, val then train, written and read back
printf 'First para.\n\nSecond one, longer.\n\n\nThird\n' > $D/doc.txt
$TOK shards -o $D/sh --val-tokens 5 --split-on-blank-lines $D/doc.txt > /dev/null 2> $D/progress.txt
grep -q "^progress\|documents" $D/progress.txt
$PYTHON - $D $VOCAB <<'PY'
import sys, numpy as np
sys.path.insert(0, "tests")
from gpt2_encoder_reference import Encoder
d, vocab = sys.argv[1], sys.argv[2]
enc = Encoder(vocab)
docs = ["First para.\n\n", "Second one, longer.\n\n", "\nThird\n"]
want = [t for doc in docs for t in [50256] + enc.encode_text(doc)]
def read(path):
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype=np.int32)
    assert h[0] == 20240520 and h[1] == 1 and h[2] * 2 + 1024 == len(raw), f"{path}: bad header"
    return list(np.frombuffer(raw[1024:], dtype=np.uint16))
got = read(f"{d}/sh_val.bin") + read(f"{d}/sh_train.bin")
assert len(read(f"{d}/sh_val.bin")) == 5 and got == want, (got, want)
print("ok: shards hold [EOT] + ids of each blank-line document,", len(want), "tokens")
PY
$TOK shards -o $D/multi --shard-tokens 7 --threads 2 $D/doc.txt $D/doc.txt > /dev/null 2>&1
[ -f $D/multi_train_000000.bin ] && [ -f $D/multi_train_000001.bin ]
# memory stays bounded by --read-ahead-bytes: 60 MB of text read 1 MB ahead peaks near 19 MB,
# across 300 files of 200 kB (a read-ahead that grew over files held all 60 MB: 77 MB) and
# within one 60 MB file
peak_under_40mb() {  # WHAT FILES...: ./tokenize shards on FILES, 1 MB ahead, peaks under 40 MB
    local what=$1; shift
    /usr/bin/time -f "%M" -o $D/rss.txt $TOK shards -o $D/rss_out --read-ahead-bytes 1000000 "$@" > /dev/null 2>&1
    local rss; rss=$(cat $D/rss.txt); rm -f $D/rss_out*
    [ "$rss" -lt 40000 ] || { echo "FAIL: $what read 1 MB ahead peaked at $rss kB (bound: 40000)"; exit 1; }
    echo "ok: $what read 1 MB ahead: peak memory $rss kB"
}
mkdir -p $D/many; for i in $(seq 300); do head -c 200000 $SHAKESPEARE > $D/many/f$i.txt; done
peak_under_40mb "300 small files" $D/many/f*.txt; rm -rf $D/many
for i in $(seq 60); do head -c 1000000 $SHAKESPEARE; done > $D/large60.txt
peak_under_40mb "one 60 MB file" $D/large60.txt; rm -f $D/large60.txt

# bad input: one line, exit 1
expect() { local want=$1; shift; if "$@" > /dev/null 2> $D/err.txt; then echo "FAIL: $* succeeded"; exit 1; fi
           grep -q -- "$want" $D/err.txt || { echo "FAIL: $*: $(cat $D/err.txt)"; exit 1; }; echo "ok: $(head -n1 $D/err.txt)"; }
echo "1 2 x3" > $D/bad_ids.txt; echo "99999" > $D/oov_ids.txt
expect "cannot open" $TOK ids $D/missing.txt
expect "is not a token id" $TOK text $D/bad_ids.txt
expect "outside the vocabulary" $TOK text $D/oov_ids.txt
expect "cannot open" ./tokenize --vocab $D/nowhere ids $D/doc.txt
expect "unknown command" $TOK frobnicate
head -c 5000 /dev/urandom > $D/encoder.json; cp $VOCAB/vocab.bpe $D/
expect "malformed JSON" ./tokenize --vocab $D ids $D/doc.txt
for bad in 0 -1; do expect "must be at least 1" $TOK shards -o $D/bad_ahead --read-ahead-bytes $bad $D/doc.txt; done

# shards read as streams: tinyshakespeare as blank-line documents, read and encoded in small
# jobs, 50 kB ahead (--read-ahead-bytes), with long documents cut (--piece-bytes), gives `make data`'s shards
$TOK shards -o $D/stream --val-tokens 32768 --split-on-blank-lines --read-ahead-bytes 50000 --piece-bytes 300 \
    --threads 2 $SHAKESPEARE > /dev/null 2>&1
cmp -s $D/stream_val.bin data/tinyshakespeare_val.bin && cmp -s $D/stream_train.bin data/tinyshakespeare_train.bin \
    || { echo "FAIL: streamed blank-line shards differ from make data's"; exit 1; }
echo "ok: blank-line documents streamed 50 kB ahead in 300-byte jobs give make data's shards"

# one large document cut at safe places and encoded on 1, 2 and 4 threads: the single-threaded ids
$TOK ids $SHAKESPEARE > $D/whole_ids.txt
for threads in 1 2 4; do
    $TOK shards -o $D/large$threads --threads $threads --piece-bytes 4096 --read-ahead-bytes 200000 $SHAKESPEARE > /dev/null 2> $D/large.txt
    $PYTHON - $D/large${threads}_train.bin $D/whole_ids.txt <<'PY'
import sys, numpy as np
got = np.fromfile(sys.argv[1], dtype=np.uint16)[512:]
want = np.array([50256] + [int(x) for x in open(sys.argv[2]).read().split()], dtype=np.uint16)
assert len(got) == len(want) and (got == want).all(), f"{sys.argv[1]}: {len(got)} tokens, want {len(want)}"
PY
done
echo "ok: one large file in 4 kB pieces on 1, 2, 4 threads: the ids of the whole ($(wc -w < $D/whole_ids.txt) tokens)"

# JSON lines: escapes, Unicode, \u surrogate pairs, embedded newlines, <|endoftext|> as text, a
# blank line, another field name; each document's ids equal those of its text given as a file
$PYTHON - $D <<'PY'
import json, sys
d = sys.argv[1]
texts = ["Plain text.", "Tab\there, \"quotes\", back\\slash, /slash", "two\nlines\n\nand a blank one\r\n",
         "Straße, naïve, Ελλάδα, 東京, 👋🏽 and 🚀 (astral: surrogate pairs when escaped)", "<|endoftext|> inside text",
         "", "\u00a0\u3000 odd spaces \u0085", "x" * 5000 + " long " + "word " * 3000]
with open(f"{d}/docs.jsonl", "w", encoding="utf-8") as f:
    for k, text in enumerate(texts):
        f.write(json.dumps({"id": k, "body": text}, ensure_ascii=(k % 2 == 0)) + "\n")  # \uXXXX escapes on even lines
        if k == 2: f.write("\n")
        open(f"{d}/doc_{k}.txt", "w", encoding="utf-8").write(text)
PY
$TOK shards -o $D/fromjson --jsonl --field body --piece-bytes 1000 $D/docs.jsonl > /dev/null 2>&1
$TOK shards -o $D/fromfiles $(for k in 0 1 2 3 4 5 6 7; do echo $D/doc_$k.txt; done) > /dev/null 2>&1
cmp -s $D/fromjson_train.bin $D/fromfiles_train.bin || { echo "FAIL: JSON lines give other ids than the same texts as files"; exit 1; }
echo "ok: 8 JSON-lines documents (escapes, surrogate pairs, newlines, EOT text) = the same texts as files"
# gzip inputs are decompressed on the fly (zlib): the same shards as the plain files; the last
# line without its newline is still a line; a damaged .gz is an error naming the file
gzip -c $D/docs.jsonl > $D/docs.jsonl.gz
$TOK shards -o $D/fromgz --jsonl --field body $D/docs.jsonl.gz > /dev/null 2>&1
cmp -s $D/fromgz_train.bin $D/fromjson_train.bin || { echo "FAIL: docs.jsonl.gz gives other ids than docs.jsonl"; exit 1; }
head -c -1 $D/docs.jsonl > $D/no_last_newline.jsonl
$TOK shards -o $D/nonewline --jsonl --field body $D/no_last_newline.jsonl > /dev/null 2>&1
cmp -s $D/nonewline_train.bin $D/fromjson_train.bin || { echo "FAIL: a last line without its newline"; exit 1; }
gzip -c $D/doc_3.txt > $D/doc_3.txt.gz
$TOK shards -o $D/textgz $D/doc_3.txt.gz > /dev/null 2>&1; $TOK shards -o $D/text $D/doc_3.txt > /dev/null 2>&1
cmp -s $D/textgz_train.bin $D/text_train.bin || { echo "FAIL: doc_3.txt.gz gives other ids than doc_3.txt"; exit 1; }
echo "ok: .gz inputs (JSON lines and text) give the shards of the plain files; a last line without newline counts"

# bad lines: one message naming the file and line, exit 1; or counted and skipped
printf '{"text": "good"}\n{"text": "unterminated\n{"other": "x"}\n{"text": 5}\n[1, 2]\n{"text": "bad \xff byte"}\n{"text": "\\ud800 lone"}\n' > $D/bad.jsonl
for line in 2 3 4 5 6 7; do
    { head -n1 $D/bad.jsonl; sed -n ${line}p $D/bad.jsonl; } > $D/bad_one.jsonl
    expect "bad_one.jsonl:2:" $TOK shards -o $D/bad --jsonl $D/bad_one.jsonl
done
$TOK shards -o $D/skipped --jsonl --skip-bad-lines $D/bad.jsonl > /dev/null 2> $D/skip.txt
grep -q "skipped 6 bad lines" $D/skip.txt || { echo "FAIL: --skip-bad-lines: $(cat $D/skip.txt)"; exit 1; }
echo "ok: --skip-bad-lines skipped the 6 bad lines"
gzip -c $D/bad.jsonl | head -c 40 > $D/cut.jsonl.gz
expect "cut.jsonl.gz" $TOK shards -o $D/cutgz --jsonl --skip-bad-lines $D/cut.jsonl.gz
if ls $D/cutgz* > /dev/null 2>&1; then echo "FAIL: a failed run left $(ls $D/cutgz*)"; exit 1; fi
# a .gz cut in its middle, after shards have been written (a short read-ahead, small shards): the
# error, the shards completed before it stay whole (count in the header = tokens in the file),
# and no .tmp is left behind
gzip -c $SHAKESPEARE > $D/whole.txt.gz; head -c 200000 $D/whole.txt.gz > $D/half.txt.gz
expect "half.txt.gz" $TOK shards -o $D/halfgz --threads 2 --shard-tokens 20000 --read-ahead-bytes 20000 --piece-bytes 5000 $D/half.txt.gz
if ls $D/halfgz*.tmp > /dev/null 2>&1; then echo "FAIL: a run that failed after writing shards left $(ls $D/halfgz*.tmp)"; exit 1; fi
$PYTHON - $D/halfgz_train_*.bin <<'PY'
import os, sys
import numpy as np
assert len(sys.argv) > 2, "no complete shard before the cut: the test does not test it"
for path in sys.argv[1:]:
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[0] == 20240520 and header[2] == 20000 and os.path.getsize(path) == 1024 + 2 * header[2], path
PY
echo "ok: a .gz cut after $(ls $D/halfgz_train_*.bin | wc -l) shards were written: they are whole, no .tmp left"

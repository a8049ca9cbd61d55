"""scripts/bigram_loss.py: the loss a bigram model gets on the validation tokens: the bar a trained
GPT must clear to have learnt more than which token follows which.

    python3 scripts/bigram_loss.py TRAIN.bin VAL.bin --targets N

Counts every (previous, next) pair of the training shard, then the mean cross-entropy, in nats,
of the validation shard's first N targets (tokens 1..N, each after its predecessor: the tokens
train_gpt's validation covers with -m batches of B x T, N = m B T), under

    p(b | a) = (count(a, b) + alpha p(b)) / (count(a) + alpha)     p(b) = (count(b) + 1/2) / (n + V/2)

the pair counts smoothed towards the unigram p(b) (Dirichlet; a pair never seen in training still
has the unigram's probability). alpha is chosen as a model's settings are, without the validation
tokens: the grid's best on the last tenth of the training shard, counted from the first nine
tenths; then the counts are taken over the whole shard. The line also gives the best alpha on the
validation targets themselves (on tinyshakespeare both are 100: 5.1115 nats at 30720 targets, where
the unigram gives 6.61). Prints one line each for the unigram and the bigram. Independent of the trainer: the shards
read here with numpy (llm.c's format: a 256 int32 header, then uint16 tokens)."""
import argparse
import numpy as np

V = 50257  # GPT-2's vocabulary

def tokens(path):
    header = np.fromfile(path, dtype=np.int32, count=256)
    if header[0] != 20240520:
        raise SystemExit(f"{path}: not an llm.c token shard (magic {header[0]})")
    data = np.fromfile(path, dtype=np.uint16, offset=1024)
    if len(data) != header[2]:
        raise SystemExit(f"{path}: {len(data)} tokens, the header says {header[2]}")
    return data.astype(np.int64)

parser = argparse.ArgumentParser(description="a bigram model's validation loss")
parser.add_argument("train")
parser.add_argument("val")
parser.add_argument("--targets", type=int, required=True, help="validation targets: -m x B x T of the run")
args = parser.parse_args()
train, val = tokens(args.train), tokens(args.val)
if args.targets + 1 > len(val):
    raise SystemExit(f"{args.val}: {len(val)} tokens, fewer than the {args.targets} targets + 1")
prev, nxt = val[:args.targets], val[1:args.targets + 1]

def bigram(train):  # p(b | a) for given (a, b) arrays and alpha, from the pairs of `train`
    unigram = (np.bincount(train, minlength=V) + 0.5) / (len(train) + 0.5 * V)
    keys, counts = np.unique(train[:-1] * V + train[1:], return_counts=True)  # sorted pair -> its count
    from_count = np.bincount(train[:-1], minlength=V)
    def p(a, b, alpha):
        at = np.clip(np.searchsorted(keys, a * V + b), 0, len(keys) - 1)
        pair = np.where(keys[at] == a * V + b, counts[at], 0)
        return (pair + alpha * unigram[b]) / (from_count[a] + alpha)
    return p, unigram

GRID = (0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000)
cut = len(train) * 9 // 10
p_fit, _ = bigram(train[:cut])
held = train[cut:]
alpha = min(GRID, key=lambda al: -np.log(p_fit(held[:-1], held[1:], al)).mean())
p, unigram = bigram(train)
loss = -np.log(p(prev, nxt, alpha)).mean()
best = min((-np.log(p(prev, nxt, al)).mean(), al) for al in GRID)
print(f"unigram: {-np.log(unigram[nxt]).mean():.4f} nats on {args.targets} validation targets")
print(f"bigram: {loss:.4f} nats on {args.targets} validation targets (alpha {alpha:g}, chosen on held-out training "
      f"tokens; the best alpha on these targets, {best[1]:g}, would give {best[0]:.4f})")

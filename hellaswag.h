/*
hellaswag.h: HellaSwag (Zellers et al. 2019) as llm.c scores it during training, "completion style":
each example is a context and four endings, one right (its label); the model reads each
context + ending as a row, and the ending it finds likeliest, the one whose tokens have the
lowest mean loss, is its answer. Accuracy = answers right / examples (llm.c reports it as
acc_norm; GPT-2 124M scores 0.2955 on the 10,042 validation examples, GPT-2 XL 0.4893).

    row 4e + j of a micro-batch:   [ context ........ | ending j ...... | (unused) ]
    targets, the next token:          . . . . . . . c0 | e1 e2 ...  eK  |
    mask (the ending's tokens):       0 0 0 0 0 0 0  1 |  1  1 ...   1  | 0 0 0
    score(j) = sum of masked losses / count;   answer = argmin_j score(j)   (the first on a tie)

The file is llm.c's eval format (dev/data/data_common.py's write_evalfile), which ./tokenize
hellaswag writes from the dataset's JSON lines (the context, then " " + each ending, GPT-2's
tokens): int32 header[256] = {20240522, 1, examples, longest example's bytes}, then per example
the uint16 words 65535, its bytes, its index, its label, 4, the context's length and tokens, and
each ending's length and tokens. The examples are split over the data-parallel ranks as llm.c
splits them (rank r: examples [r ceil(N/dp), (r + 1) ceil(N/dp))), B/4 to a micro-batch; every
rank runs the same number of micro-batches (ceil(ceil(N/dp) / (B/4)): collectives, ZeRO-3's
gathers), a rank past its examples with empty rows. Costs one forward of B x T tokens per B/4
examples: the 10,042 of the validation set are 2,511 rows of T at B 64, about 1.5% of GPT-2 124M's
training tokens between two evaluations every 250 steps.
Applied in train_gpt.cu: gpt2_hellaswag; tokenizer/tokenize.cpp: main (./tokenize hellaswag).
*/
#pragma once
// defines: EVAL_MAGIC, EVAL_VERSION, EVAL_ENDINGS, EvalExample, eval_file_write, eval_file_read, EvalBatch,
//          eval_longest, eval_rank_examples, eval_batches_per_rank, eval_batch_fill, eval_batch_answers,
//          eval_scores_file
#include <stdint.h>  // defines: uint16_t
#include <algorithm> // defines: std::max, std::min
#include <stdio.h>   // defines: fopen, fwrite
#include <stdlib.h>  // defines: getenv
#include <string>    // defines: std::string
#include <vector>    // defines: std::vector
#include "base.h"    // defines: fail, read_whole_file, WholeFile

#define EVAL_MAGIC 20240522
#define EVAL_VERSION 1
#define EVAL_ENDINGS 4  // HellaSwag's, and all that llm.c's format is used with

struct EvalExample {
    int label;
    std::vector<int> context;
    std::vector<std::vector<int>> endings;  // EVAL_ENDINGS
};

// llm.c's write_evalfile: refuses what its asserts refuse (a token id of 65535, an example over 64 KiB)
inline void eval_file_write(const char* path, const std::vector<EvalExample>& examples) {
    std::vector<uint16_t> stream;
    int32_t header[256] = {EVAL_MAGIC, EVAL_VERSION, (int32_t)examples.size(), 0};
    if (examples.size() >= 65535) fail("%s: %zu examples, more than llm.c's format holds", path, examples.size());
    for (size_t e = 0; e < examples.size(); e++) {
        const EvalExample& x = examples[e];
        size_t start = stream.size();
        stream.insert(stream.end(), {65535, 0, (uint16_t)e, (uint16_t)x.label, (uint16_t)x.endings.size()});
        for (int part = -1; part < (int)x.endings.size(); part++) {
            const std::vector<int>& tokens = part < 0 ? x.context : x.endings[part];
            stream.push_back((uint16_t)tokens.size());
            for (int t : tokens) {
                if (t < 0 || t >= 65535) fail("%s: example %zu holds token %d, outside llm.c's uint16 ids", path, e, t);
                stream.push_back((uint16_t)t);
            }
        }
        size_t bytes = 2 * (stream.size() - start);
        if (bytes >= 65536) fail("%s: example %zu is %zu bytes, over llm.c's 65,535", path, e, bytes);
        stream[start + 1] = (uint16_t)bytes;
        header[3] = std::max(header[3], (int32_t)bytes);
    }
    WholeFile w = whole_file_open(path, "eval file");
    whole_file_write(&w, header, sizeof(header));
    whole_file_write(&w, stream.data(), stream.size() * sizeof(uint16_t));
    whole_file_commit(&w);
}

// the whole file (HellaSwag's validation set is 3.6 MB); every inconsistency one line naming it
inline std::vector<EvalExample> eval_file_read(const char* path) {
    std::string bytes = read_whole_file(path, "HellaSwag file (-hf; ./tokenize hellaswag writes it)");
    if (bytes.size() < 1024) fail("%s: %zu bytes, shorter than an eval file's header", path, bytes.size());
    const int32_t* header = (const int32_t*)bytes.data();
    if (header[0] != EVAL_MAGIC || header[1] != EVAL_VERSION)
        fail("%s: not an llm.c eval file (magic %d, version %d)", path, header[0], header[1]);
    if (header[2] <= 0) fail("%s: %d examples: an eval file holds at least one", path, header[2]);
    const uint16_t* w = (const uint16_t*)(bytes.data() + 1024);
    size_t words = (bytes.size() - 1024) / 2, at = 0;
    std::vector<EvalExample> examples(header[2]);
    for (size_t e = 0; e < examples.size(); e++) {
        if (at + 5 > words || w[at] != 65535 || w[at + 2] != (uint16_t)e || w[at + 1] % 2 || w[at + 4] != EVAL_ENDINGS)
            fail("%s: example %zu is damaged (its header words)", path, e);
        size_t end = at + w[at + 1] / 2, p = at + 5;
        if (end > words || w[at + 3] >= EVAL_ENDINGS) fail("%s: example %zu runs past the file or its label", path, e);
        examples[e].label = w[at + 3];
        for (int part = -1; part < EVAL_ENDINGS; part++) {
            size_t n = p < end ? w[p] : 0;
            if (n == 0 || p + 1 + n > end) fail("%s: example %zu: a part empty or past the example's bytes", path, e);
            std::vector<int> tokens(w + p + 1, w + p + 1 + n);
            if (part < 0) examples[e].context = tokens;
            else examples[e].endings.push_back(tokens);
            p += 1 + n;
        }
        if (p != end) fail("%s: example %zu: %zu words left over", path, e, end - p);
        at = end;
    }
    if (at != words) fail("%s: %zu words after the last of its %zu examples", path, words - at, examples.size());
    return examples;
}

// the most tokens one row needs: the context and its longest ending
inline size_t eval_longest(const std::vector<EvalExample>& examples) {
    size_t longest = 0;
    for (const EvalExample& x : examples)
        for (const std::vector<int>& ending : x.endings) longest = std::max(longest, x.context.size() + ending.size());
    return longest;
}

// a micro-batch's rows: inputs, targets and mask of B x T tokens; answer rows e: example or -1
struct EvalBatch {
    std::vector<int> inputs, targets, mask;
    std::vector<int> example;  // which example rows 4e..4e+3 hold (-1: none)
};

// this data-parallel rank's examples [*first, *end)
inline void eval_rank_examples(size_t n, int dp, int dp_rank, size_t* first, size_t* end) {
    size_t per_rank = (n + dp - 1) / dp;
    *first = std::min(n, per_rank * dp_rank);
    *end = std::min(n, per_rank * (dp_rank + 1));
}
inline size_t eval_batches_per_rank(size_t n, int dp, int B) {
    size_t per_rank = (n + dp - 1) / dp, per_batch = B / EVAL_ENDINGS;
    return (per_rank + per_batch - 1) / per_batch;
}

// examples [first, first + B/4) of [.., end) into B x T rows (unused places: token 0, mask 0)
inline void eval_batch_fill(EvalBatch* b, const std::vector<EvalExample>& examples, size_t first, size_t end, int B,
                            int T) {
    b->inputs.assign((size_t)B * T, 0);
    b->targets.assign((size_t)B * T, 0);
    b->mask.assign((size_t)B * T, 0);
    b->example.assign(B / EVAL_ENDINGS, -1);
    for (int e = 0; e < B / EVAL_ENDINGS && first + e < end; e++) {
        const EvalExample& x = examples[first + e];
        b->example[e] = (int)(first + e);
        for (int j = 0; j < EVAL_ENDINGS; j++) {
            size_t row = (size_t)(EVAL_ENDINGS * e + j) * T, c = x.context.size(), n = x.endings[j].size();
            if (c + n > (size_t)T)
                fail("HellaSwag example %zu: %zu tokens, more than -t %d holds", first + e, c + n, T);
            for (size_t i = 0; i < c; i++) b->inputs[row + i] = x.context[i];
            for (size_t i = 0; i < n; i++) {
                b->inputs[row + c + i] = x.endings[j][i];
                b->targets[row + c + i - 1] = x.endings[j][i];  // the token before predicts it
                b->mask[row + c + i - 1] = 1;
            }
        }
    }
}

// each held example's answer from its rows' masked loss sums and counts (B of each); the mean
// losses into `scores` (4 per example slot); returns the answers that are right
inline int eval_batch_answers(const EvalBatch& b, const std::vector<EvalExample>& examples,
                              const std::vector<double>& sums, const std::vector<double>& counts,
                              std::vector<double>* scores) {
    int right = 0;
    scores->assign(b.example.size() * EVAL_ENDINGS, 0.0);
    for (size_t e = 0; e < b.example.size(); e++) {
        if (b.example[e] < 0) continue;
        int answer = 0;
        for (int j = 0; j < EVAL_ENDINGS; j++) {
            size_t row = EVAL_ENDINGS * e + j;
            (*scores)[row] = sums[row] / counts[row];
            if ((*scores)[row] < (*scores)[EVAL_ENDINGS * e + answer]) answer = j;
        }
        right += answer == examples[b.example[e]].label;
    }
    return right;
}

// a test's window on the scores (tests/test_hellaswag.py): with TRAIN_GPT_HELLASWAG_SCORES=PREFIX set,
// the file PREFIX.DP_RANK that this rank appends "example ending mean_loss" lines to (`writer`: one
// rank of each data-parallel rank's group); NULL otherwise
inline FILE* eval_scores_file(int dp_rank, bool writer) {
    const char* prefix = getenv("TRAIN_GPT_HELLASWAG_SCORES");
    if (!prefix || !writer) return NULL;
    std::string path = std::string(prefix) + "." + std::to_string(dp_rank);
    FILE* f = fopen(path.c_str(), "a");
    if (!f) fail("cannot append to %s", path.c_str());
    return f;
}

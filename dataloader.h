/*
dataloader.h: reads llm.c token shards for B x T micro-batches, distributed over
the data-parallel ranks, in llm.c's order or a seeded shuffle, and resumable.

Shard format: int32 header[256] = {20240520, 1, ntok}, then ntok uint16 tokens.
A shard holds S = (ntok - 1) / (dp*B*T) samples; sample s of a shard is one global
micro-batch: DP rank r reads the B*T+1 tokens starting at s*dp*B*T + r*B*T (inputs
are the first B*T, targets the last B*T). Without shuffling samples go in order
and shards in sorted-name order, so global micro-step i reads sample i of the
concatenation, which is llm.c's order. With shuffling, each epoch permutes the
shard order and each shard's samples with an Rng seeded from (seed, epoch, shard),
identical on every rank, so ranks still read disjoint slices of one global batch.
The position is (epoch, shard_index, sample_index): three integers to checkpoint.
A shard's tokens past its last whole sample (fewer than dp*B*T + 1) are not read: a sample never
crosses into the next shard, llm.c's choice too, which costs at most one sample's tokens a shard
(llm.c's 100M-token shards: under 0.1%). So one epoch is the shards' samples: -x -1 runs
dataloader_epoch_samples / (samples a step) steps, every sample once.
*/
#pragma once
// defines: DataLoader, dataloader_init, dataloader_smallest_shard, dataloader_next_batch, dataloader_reset,
//          dataloader_free, shard_read_header, SHARD_MAGIC, SHARD_HEADER_BYTES, SHARD_VERSION, dataloader_fisher_yates,
//          dataloader_open_shard, dataloader_seek, dataloader_start_epoch, dataloader_epoch_samples,
//          dataloader_shard_samples
#include <glob.h>     // defines: glob
#include <stdio.h>    // defines: FILE, fopen, fread, fseeko
#include <stdint.h>   // defines: uint16_t
#include <stdlib.h>   // defines: malloc
#include <algorithm>  // defines: std::min, std::max
#include <sys/stat.h> // defines: stat
#include "base.h"  // defines: fail
#include "random.h"   // defines: Rng

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_BYTES (256 * sizeof(int32_t))

// validates the header against the file size; returns the token count
inline size_t shard_read_header(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) fail("cannot open token shard %s", path);
    int32_t header[256];
    size_t got = fread(header, sizeof(int32_t), 256, f);
    fclose(f);
    if (got != 256) fail("token shard %s is shorter than its 1024-byte header", path);
    if (header[0] != SHARD_MAGIC)
        fail("token shard %s has magic %d, expected %d (not an llm.c shard?)", path, header[0], SHARD_MAGIC);
    if (header[1] != SHARD_VERSION) fail("token shard %s has version %d, expected %d", path, header[1], SHARD_VERSION);
    if (header[2] < 0) fail("token shard %s has a negative token count %d", path, header[2]);
    struct stat st;
    stat(path, &st);
    size_t ntok = (size_t)header[2];
    size_t expected = SHARD_HEADER_BYTES + ntok * sizeof(uint16_t);
    if ((size_t)st.st_size != expected)
        fail("token shard %s: header says %zu tokens (%zu bytes) but the file has %lld bytes", path, ntok, expected,
             (long long)st.st_size);
    return ntok;
}

struct DataLoader {
    int B, T, rank, ranks, vocab_size;
    bool shuffle;
    uint64_t seed;
    glob_t files;
    int num_shards;
    size_t* shard_tokens;     // per shard
    int* shard_order;         // this epoch's order
    size_t* sample_order;     // this shard's sample order (shuffle) or NULL
    size_t total_tokens;
    // position
    int epoch, shard_index;   // shard_index: position in shard_order
    size_t sample_index, num_samples;
    FILE* file;               // the current shard
    uint16_t* buffer;         // B*T+1
    int* inputs;              // (B,T)
    int* targets;             // (B,T)
};

template <typename Index>
inline void dataloader_fisher_yates(Index* a, size_t n, Rng* rng) {
    for (size_t i = n; i > 1; i--) {
        size_t j = rng_next(rng) % i;
        Index t = a[i - 1]; a[i - 1] = a[j]; a[j] = t;
    }
}

// the whole samples (global micro-batches of dp*B*T + 1 tokens) shard s holds
inline size_t dataloader_shard_samples(const DataLoader* d, int s) {
    return (d->shard_tokens[s] - 1) / ((size_t)d->ranks * d->B * d->T);
}

inline void dataloader_open_shard(DataLoader* d) {
    int shard = d->shard_order[d->shard_index];
    if (d->file) fclose(d->file);
    d->file = fopen(d->files.gl_pathv[shard], "rb");
    if (!d->file) fail("cannot open token shard %s", d->files.gl_pathv[shard]);
    d->num_samples = dataloader_shard_samples(d, shard);
    for (size_t s = 0; s < d->num_samples; s++) d->sample_order[s] = s;
    if (d->shuffle) {
        Rng rng = {d->seed * 1000003ull + (uint64_t)d->epoch * 7919ull + (uint64_t)shard + 1};
        dataloader_fisher_yates(d->sample_order, d->num_samples, &rng);
    }
}

inline void dataloader_start_epoch(DataLoader* d, int epoch) {
    d->epoch = epoch;
    for (int s = 0; s < d->num_shards; s++) d->shard_order[s] = s;
    if (d->shuffle) {
        Rng rng = {d->seed * 2654435761ull + (uint64_t)epoch};
        dataloader_fisher_yates(d->shard_order, d->num_shards, &rng);
    }
}

// position at (epoch, shard_index, sample_index); (0,0,0) is the start
inline void dataloader_seek(DataLoader* d, int epoch, int shard_index, size_t sample_index) {
    dataloader_start_epoch(d, epoch);
    d->shard_index = shard_index;
    dataloader_open_shard(d);
    d->sample_index = sample_index;
}
inline void dataloader_reset(DataLoader* d) { dataloader_seek(d, 0, 0, 0); }

// the samples one epoch holds, every shard's whole ones (the tails past them are not read)
inline size_t dataloader_epoch_samples(const DataLoader* d) {
    size_t samples = 0;
    for (int s = 0; s < d->num_shards; s++) samples += dataloader_shard_samples(d, s);
    return samples;
}

// the fewest tokens a shard matching `pattern` holds (0 when none matches): what a validation
// loader can count on, before it is made
inline size_t dataloader_smallest_shard(const char* pattern) {
    glob_t files;
    if (glob(pattern, 0, NULL, &files) != 0 || files.gl_pathc == 0) return 0;
    size_t smallest = SIZE_MAX;
    for (size_t s = 0; s < files.gl_pathc; s++) smallest = std::min(smallest, shard_read_header(files.gl_pathv[s]));
    globfree(&files);
    return smallest;
}

inline void dataloader_init(DataLoader* d, const char* pattern, int B, int T, int rank, int ranks, int vocab_size,
                            bool shuffle, uint64_t seed) {
    *d = DataLoader{};
    d->B = B; d->T = T; d->rank = rank; d->ranks = ranks; d->vocab_size = vocab_size;
    d->shuffle = shuffle; d->seed = seed;
    if (glob(pattern, 0, NULL, &d->files) != 0 || d->files.gl_pathc == 0)
        fail("no token shards match '%s'", pattern);
    d->num_shards = (int)d->files.gl_pathc;
    d->shard_tokens = (size_t*)malloc(d->num_shards * sizeof(size_t));
    d->shard_order = (int*)malloc(d->num_shards * sizeof(int));
    size_t max_samples = 0, need = (size_t)ranks * B * T + 1;
    for (int s = 0; s < d->num_shards; s++) {  // every header is checked up front: bad data fails before training
        const char* path = d->files.gl_pathv[s];
        d->shard_tokens[s] = shard_read_header(path);
        if (d->shard_tokens[s] < need)
            fail(
                "token shard %s has %zu tokens, fewer than one global micro-batch needs (%d ranks x B=%d x T=%d + 1 = "
                "%zu)",
                path, d->shard_tokens[s], ranks, B, T, need);
        d->total_tokens += d->shard_tokens[s];
        max_samples = std::max(max_samples, dataloader_shard_samples(d, s));
    }
    d->sample_order = (size_t*)malloc(max_samples * sizeof(size_t));
    d->buffer = (uint16_t*)malloc((B * T + 1) * sizeof(uint16_t));
    d->inputs = (int*)malloc(B * T * sizeof(int));
    d->targets = (int*)malloc(B * T * sizeof(int));
    dataloader_reset(d);
}

inline void dataloader_next_batch(DataLoader* d) {
    if (d->sample_index >= d->num_samples) {  // next shard; a new epoch after the last one
        d->shard_index++;
        if (d->shard_index == d->num_shards) dataloader_start_epoch(d, d->epoch + 1), d->shard_index = 0;
        dataloader_open_shard(d);
        d->sample_index = 0;
    }
    size_t sample = d->sample_order[d->sample_index++];
    size_t BT = (size_t)d->B * d->T;
    size_t token_offset = sample * d->ranks * BT + d->rank * BT;
    const char* path = d->files.gl_pathv[d->shard_order[d->shard_index]];
    if (fseeko(d->file, (off_t)(SHARD_HEADER_BYTES + token_offset * sizeof(uint16_t)), SEEK_SET) != 0 ||
        fread(d->buffer, sizeof(uint16_t), BT + 1, d->file) != BT + 1)
        fail("token shard %s: short read at token %zu", path, token_offset);
    for (size_t i = 0; i <= BT; i++)
        if (d->buffer[i] >= d->vocab_size)
            fail("token shard %s: token %d at position %zu is outside the vocabulary (%d)", path, d->buffer[i],
                 token_offset + i, d->vocab_size);
    for (size_t i = 0; i < BT; i++) { d->inputs[i] = d->buffer[i]; d->targets[i] = d->buffer[i + 1]; }
}

inline void dataloader_free(DataLoader* d) {
    if (d->file) fclose(d->file);
    globfree(&d->files);
    free(d->shard_tokens); free(d->shard_order); free(d->sample_order);
    free(d->buffer); free(d->inputs); free(d->targets);
}

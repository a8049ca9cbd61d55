/*
staging.h: a step's traffic between host and device without host waits.

A copy between the device and pageable host memory waits for the device to finish everything
queued before it: the GPU's queue runs dry while the host copies, then refills. A step made
several such stops with nothing to decide at any of them: each micro-batch's tokens and targets
going up, the embedding backward's token buckets going up, its losses coming down. Here the
step's host side lives in one page-locked arena instead, and every such copy is queued
(host_to_device_async, device_to_host_async) while the host goes on:

  - an upload takes fresh bytes of the arena, so no copy still queued reads bytes the host is
    rewriting;
  - a download (the token losses) lands in bytes that nobody reads before the step's wait for
    the gradient norm, which the host needs anyway (the clip factor, the loss scaler's finite
    check); its sum is taken then (staging_pending_sum), in the order the forwards ran;
  - the arena is rewound only at a wait (staging_rewind), never between.

    one step:  | tokens 0 | buckets 0 | targets 0 | losses 0 | tokens 1 | ... | losses m-1 |  free  |
               ^ rewound as the step begins: the last step's waits have passed

staging_reserve sizes it for a step's micro-batches; should it run out (validation, sampling),
taking more waits first and starts again from the front: correct, only slower. Each
device_synchronize here costs nothing when nothing has been queued since the last wait, which
is the case where the step calls it. The CPU build: the same arena in ordinary memory, the copies
plain memcpy. The emulated build counts the waits (CUDA_EMU_WAIT_REPORT; tests/test_host_waits.sh:
at most 2 a step, the norm's and the step timer's).
Applied in train_gpt.cu: embed_forward, embed_backward, head_loss, train_step, forward_only.
*/
#pragma once
// defines: PendingSum, HostStaging, staging_sum_landed, staging_reserve, staging_rewind, staging_take, staging_upload,
//          staging_download_floats, staging_pending_sum, staging_free
#include <string.h>  // defines: memcpy
#include <vector>    // defines: std::vector
#include "base.h"    // defines: pinned_host_malloc, pinned_host_free, host_to_device_async, device_to_host_async,
                     //          device_synchronize, ceil_div

struct PendingSum { const float* values; size_t n; double sum; bool summed; };  // a download to be summed
struct HostStaging {
    char* bytes = nullptr;
    size_t capacity = 0, used = 0;
    std::vector<PendingSum> pending;  // in the order the downloads were queued
};

// the downloads landed so far summed (each in double, in index order), before their bytes are reused
inline void staging_sum_landed(HostStaging* s) {
    for (PendingSum& p : s->pending) {
        if (p.summed) continue;
        p.sum = 0.0;
        for (size_t i = 0; i < p.n; i++) p.sum += p.values[i];
        p.summed = true;
    }
}
// waits for the device, then starts again from the arena's front
inline void staging_rewind(HostStaging* s) {
    device_synchronize();
    staging_sum_landed(s);
    s->used = 0;
}
inline void staging_reserve(HostStaging* s, size_t bytes) {
    if (bytes <= s->capacity) return;
    staging_rewind(s);  // nothing queued may still use the old bytes
    pinned_host_free(s->bytes);
    s->bytes = (char*)pinned_host_malloc(bytes);
    s->capacity = bytes;
}
inline void* staging_take(HostStaging* s, size_t bytes) {
    size_t n = ceil_div(bytes, (size_t)64) * 64;  // each piece 64-byte aligned
    if (n > s->capacity) staging_reserve(s, 2 * n);
    if (s->used + n > s->capacity) staging_rewind(s);
    void* p = s->bytes + s->used;
    s->used += n;
    return p;
}
// host -> device without a wait: the host's bytes copied into the arena, queued from there
inline void staging_upload(HostStaging* s, void* device, const void* host, size_t bytes) {
    void* staged = staging_take(s, bytes);
    memcpy(staged, host, bytes);
    host_to_device_async(device, staged, bytes);
}
// device -> host without a wait: n floats whose sum staging_pending_sum returns after the wait
inline void staging_download_floats(HostStaging* s, const float* device, size_t n) {
    float* staged = (float*)staging_take(s, n * sizeof(float));
    device_to_host_async(staged, device, n * sizeof(float));
    s->pending.push_back(PendingSum{staged, n, 0.0, false});
}
// the sum of the downloads queued since the last call, summed one after another from 0 (the
// order and rounding of summing each as it came); waits for the device (free if it has already)
inline double staging_pending_sum(HostStaging* s) {
    device_synchronize();
    staging_sum_landed(s);
    double total = 0.0;
    for (const PendingSum& p : s->pending) total += p.sum;
    s->pending.clear();
    return total;
}
inline void staging_free(HostStaging* s) {
    pinned_host_free(s->bytes);
    *s = HostStaging{};
}

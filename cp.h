/*
cp.h: context parallelism: each sequence's tokens split over c ranks, attention passed round a ring.

Everything in a transformer block but attention works token by token, so c ranks can each take
1/c of every sequence and run the block on their tokens alone; attention is where a token needs
the others (every earlier key and value of its sequence). Ring attention (Liu et al. 2023;
Megatron-LM's context parallelism, picotron's context_parallel) keeps each rank's queries at home
and passes the keys and values round the ring: c steps, each merging one rank's keys into every
query's softmax with the online rescaling of flash attention (kernels/attention.cuh: running max
and sum): each step is flash attention of this rank's queries against the visitor's keys.

Causal masking makes an even split uneven: with the sequence cut into c contiguous parts, the
last rank's queries see every key and the first rank's only their own, so the last rank works c
times longer while the others wait. Cut it into 2c chunks instead and give rank r chunks r and
2c-1-r (the zig-zag layout Megatron-LM uses): every rank holds one early and one late chunk. Chunk
i's queries need chunk j's keys whole when j < i and causally when j = i, so rank r's two chunks
need r + (2c-1-r) = 2c-1 whole chunk-pairs and 2 diagonal ones: the same on every rank, 1/c of
the c(2c-1) + 2c the mask leaves. For c = 4:

    sequence:  | c0 | c1 | c2 | c3 | c4 | c5 | c6 | c7 |       rank r holds chunks r and 7-r
    rank:        r0   r1   r2   r3   r3   r2   r1   r0

    ring step s: rank r holds the keys and values of rank r-s, then passes them on to r+1
        r0 -> r1 -> r2 -> r3 -> r0
    step 0 (its own):   both chunks against themselves (causal), the late one against the early
    step s > 0:         visitor v = r-s (mod 4); the late chunk 7-r against the visitor's early
                        chunk v, and against its late one 7-v too when v > r; the early chunk r
                        against the visitor's early chunk v when v < r: 2 whole chunk-pairs a step
Rank r holds tokens [r T/2c, (r+1) T/2c) and [(2c-1-r) T/2c, (2c-r) T/2c) of each sequence: the
early chunk of every sequence of the micro-batch, then the late chunk of every sequence
(cp_batch_index), so each half is a (B, T/2c) batch of consecutive positions: the embedding adds
wpe's rows from the chunk's first position on, and an AttentionRange (kernels/attention.cuh) is
one half's queries against one half's keys.

Only k and v travel, as [k | v] rows of 2 C_rank (attention_pack_kv): a rank's queries never
leave it. The backward recomputes the scores range by range from the forward's log-sum-exp (flash
attention's backward on each range), and passes the keys and values round the ring again, each
[k | v] with the sum of its dk and dv so far (fp32); after c steps every rank's keys' and values'
gradient is back at its owner.

Per rank and layer, with T_c = T/c local tokens, C_rank and NH_rank this TP rank's channels and
heads, X = sizeof(floatX):
    activations   q, k, v, the output, lse and everything outside attention: 1/c of one rank's
    scratch       one rank's attention scratch (the fp32 output and dq, B T_c C_rank 4 each, a dk dv
                  sum, B T_c 2C_rank 4, D, B NH_rank T_c 4), and two [k | v] buffers in flight
                  (2 B T_c 2C_rank X) and a second dk dv sum (B T_c 2C_rank 4)
    sent          forward (c-1) [k | v] of B T_c 2C_rank X; backward the same, and c sums of dk, dv
                  of B T_c 2C_rank 4 bytes
On the critical path, for now: each step computes its ranges, then passes the visitor on
(comm_send_recv) and waits for the next. The two [k | v] buffers are what overlap needs (the
next visitor can arrive in one while the other is read), but on one stream, as every collective
runs here, the exchange cannot start before the compute queued ahead of it ends; posting it
first needs communication on a stream of its own, with an event for each buffer.
Read ring_attention_forward first. Applied in train_gpt.cu: sequence_attention_forward and
_backward (the blocks' attention when -cp > 1, over the grid's cp group, comm.h), next_token_logits
(sampling); gpt2.h: tokens_of_rank (a micro-batch's tokens for this rank), for_each_position_run
(the embedding's positions); the replica group of process_grid.h (Collectives::replicas) is dp x cp (ZeRO,
the gradients' sum).
*/
#pragma once
// defines: cp_chunk, cp_batch_index, cp_locate, RingBuffers, ring_buffer_list, ring_attention_forward,
//          ring_attention_backward, cp_ring_bytes_per_layer, cp_for_each_range
#include <vector>                 // defines: std::vector
#include "comm.h"                 // defines: Comm, comm_send_recv, BufferSpec (base.h)
#include "kernels/attention.cuh"  // defines: AttentionRange, AttentionScratch, attention_range_forward, ...

// the chunk of the sequence (of 2c) that half `half` (0: early, 1: late) of rank r's tokens is
inline int cp_chunk(int c, int r, int half) { return half == 0 ? r : 2 * c - 1 - r; }
// where rank r's local token i (of B*T/c) is in the (B, T) micro-batch: its tokens are every
// sequence's early chunk, then every sequence's late chunk, so each half is a (B, T/2c) batch
inline size_t cp_batch_index(int c, int r, int B, int T, size_t i) {
    size_t chunk_tokens = T / (2 * c), half_tokens = (size_t)B * chunk_tokens;
    size_t half = i / half_tokens, b = i % half_tokens / chunk_tokens;
    return b * T + cp_chunk(c, r, (int)half) * chunk_tokens + i % chunk_tokens;
}

// which rank holds position p of one sequence of T tokens (B = 1), and at which of its local rows
inline void cp_locate(int c, int T, int p, int* rank, size_t* row) {
    int chunk_tokens = T / (2 * c), chunk = p / chunk_tokens, half = chunk < c ? 0 : 1;
    *rank = half == 0 ? chunk : 2 * c - 1 - chunk;
    *row = (size_t)half * chunk_tokens + p % chunk_tokens;
}

// the scratch of a ring beyond one rank's attention (kernels/attention.cuh: AttentionScratch, whose
// fp32 output, dq, D and dk dv sums it uses as well): two [k | v] buffers in flight and a second dk dv sum
struct RingBuffers { floatX* kv[2]; float* dkv; };
// the ring's buffers, declared for the model's buffer list (gpt2.h): two [k | v] buffers of BT
// tokens (the one in use, the one arriving) and the fp32 gradient travelling with them; none
// without a ring (cp = 1)
inline std::vector<BufferSpec> ring_buffer_list(RingBuffers* ring, int cp, size_t BT, size_t C_rank) {
    if (cp <= 1) return {};  // no ring: the pointers stay null (the model is value-initialised)
    return {{(void**)&ring->kv[0], BT * 2 * C_rank, sizeof(floatX), MEM_ACTIVATIONS_TRANSIENT},
            {(void**)&ring->kv[1], BT * 2 * C_rank, sizeof(floatX), MEM_ACTIVATIONS_TRANSIENT},
            {(void**)&ring->dkv, BT * 2 * C_rank, sizeof(float), MEM_ACTIVATIONS_TRANSIENT}};
}

// visit(query half, range) each pair of this rank's query chunks (rows of its qkv) and the visiting
// rank's key chunks (of the [k | v] rows it sent) that the causal mask leaves: chunk i's
// queries see chunk j's keys whole when j < i, causally when j == i
template <typename Visit>
inline void cp_for_each_range(int c, int r, int visitor, int B, int T_local, int C_rank, int NH, Visit visit) {
    int chunk_tokens = T_local / 2;
    for (int q_half = 0; q_half < 2; q_half++)
        for (int k_half = 0; k_half < 2; k_half++) {
            int i = cp_chunk(c, r, q_half), j = cp_chunk(c, visitor, k_half);
            if (j > i) continue;
            visit(q_half,
                  AttentionRange{chunk_tokens, q_half * B * chunk_tokens, chunk_tokens, k_half * B * chunk_tokens, B,
                                 chunk_tokens, chunk_tokens, C_rank, NH, 2 * C_rank, j == i, false});
        }
}

// attention of this rank's tokens (qkv: B*T_local rows in cp_batch_index's order) against every
// rank's, round the ring `cp`: out (B*T_local, C_rank) and lse (B*T_local, NH), which the backward reads.
// Only k and v travel ([k | v] rows, 2C): the queries stay home
inline void ring_attention_forward(Comm* cp, floatX* out, float* lse, const floatX* qkv, const AttentionScratch& a,
                                   const RingBuffers& s, int B, int T_local, int C_rank, int NH) {
    int c = cp->size, r = cp->rank;
    size_t rows = (size_t)B * T_local;
    bool started[2] = {false, false};  // has a range been merged into this query half yet?
    attention_pack_kv(s.kv[0], qkv, rows, C_rank);  // step 0: this rank's own keys and values
    for (int step = 0; step < c; step++) {
        const floatX* visiting = s.kv[step % 2];
        cp_for_each_range(c, r, (r - step + c) % c, B, T_local, C_rank, NH, [&](int q_half, AttentionRange range) {
            range.first = !started[q_half];
            attention_range_forward(range, qkv, visiting, a.out, lse);
            started[q_half] = true;
        });
        if (step == c - 1) break;
        comm_send_recv(cp, visiting, (r + 1) % c, s.kv[(step + 1) % 2], (r - 1 + c) % c, rows * 2 * C_rank);
    }
    attention_range_output(out, a.out, rows * C_rank);
}

// its backward: dqkv (B, T_local, 3C) from dout, the forward's out and lse, and qkv; the keys and
// values go round the ring again, each [k | v] with its dk, dv summed so far, home after c steps
inline void ring_attention_backward(Comm* cp, floatX* dqkv, const floatX* dout, const floatX* out, const float* lse,
                                    const floatX* qkv, const AttentionScratch& a, const RingBuffers& s, int B,
                                    int T_local, int C_rank, int NH) {
    int c = cp->size, r = cp->rank;
    size_t rows = (size_t)B * T_local, dkv_elements = rows * 2 * C_rank;
    float* dkv_buffers[2] = {a.dkv, s.dkv};
    attention_range_row_dot(a.D, dout, out, (int)rows, C_rank, NH);
    device_zero(a.dq, rows * C_rank * sizeof(float));
    device_zero(dkv_buffers[0], dkv_elements * sizeof(float));
    attention_pack_kv(s.kv[0], qkv, rows, C_rank);
    float* dkv = dkv_buffers[0];  // the visiting [k | v]'s dk, dv so far
    for (int step = 0; step < c; step++) {
        const floatX* visiting = s.kv[step % 2];
        cp_for_each_range(c, r, (r - step + c) % c, B, T_local, C_rank, NH, [&](int, AttentionRange range) {
            attention_range_backward(range, qkv, visiting, a.dq, dkv, dout, lse, a.D);
        });
        if (c == 1) break;
        if (step < c - 1)
            comm_send_recv(cp, visiting, (r + 1) % c, s.kv[(step + 1) % 2], (r - 1 + c) % c, rows * 2 * C_rank);
        // the last: home
        comm_send_recv(cp, dkv, (r + 1) % c, dkv_buffers[(step + 1) % 2], (r - 1 + c) % c, dkv_elements);
        dkv = dkv_buffers[(step + 1) % 2];
    }
    attention_range_gradients(dqkv, a.dq, dkv, rows, C_rank);
}

// bytes one rank sends round its ring per layer for a micro-batch: forward and backward
inline unsigned long long cp_ring_bytes_per_layer(int c, int B, int T_local, int C_rank, int forwards) {
    if (c <= 1) return 0;
    unsigned long long kv = (unsigned long long)B * T_local * 2 * C_rank * sizeof(floatX);
    unsigned long long dkv = (unsigned long long)B * T_local * 2 * C_rank * sizeof(float);
    return (unsigned long long)forwards * (c - 1) * kv + (c - 1) * kv + c * dkv;
}

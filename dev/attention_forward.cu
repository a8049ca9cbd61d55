/*
dev/attention_forward.cu: causal self-attention (kernels/attention.cuh), per head h of size
hs = C/NH:  att = softmax(q k^T / sqrt(hs)) over t2 <= t;  out = att v.
qkv rows are [q | k | v] with the heads side by side, as GPT-2's c_attn writes them; att
(B,NH,T,T) is kept for the backward by versions 1 and 2. Versions 3 and 4 keep instead the
log-sum-exp of each query's scores, lse (B,NH,T) fp32, from which a flash-attention backward
recomputes any probability: p = exp(q.k/sqrt(hs) - lse). No (T,T) matrix is ever stored.

version 1: one thread per (b, h, t) query row: the host twin's row (attention_forward_row)
           on the device, the scores staged in att itself. O(T hs) serial work per
           thread, no reuse of k, v
version 2: the trainer's attention_forward: q, k, v permuted to (B,NH,T,hs), two
           strided-batched cuBLAS GEMMs (scores scaled in the GEMM) around a warp-per-row
           causal softmax, the output permuted back. Materialises (B,NH,T,T) scores
version 3: one thread per (b, h, t), the online softmax: q, k, v read straight from the qkv
           rows (no permute), a running max m and sum l, the output row held in registers and
           rescaled as each key arrives, written once with lse. Reads (B,T,3C), writes (B,T,C)
           and (B,NH,T): the (B,NH,T,T) traffic of versions 1 and 2 is gone, but every thread
           still reads its keys and values from global memory, one key at a time
version 4: FlashAttention-2's structure on CUDA cores (no tensor cores): a block of 32
           threads takes 32 queries of one (b, h); tiles of 32 keys and values pass through
           shared memory, loaded by all the block's threads together, so each k and v element
           is read from global memory once per 32 queries instead of once per query. Per tile:
           the scores, the online softmax (one rescale per tile, not per key). Causal: tiles
           wholly above the diagonal are never loaded, the diagonal tile is masked
The block size applies to versions 1 and 3 (3: up to 256 threads, for its registers). The bytes
each must move differ: B T 4C floatX (qkv read, out written) for all, plus att's B NH T T floatX
for versions 1 and 2 or lse's B NH T fp32 for 3 and 4: 251 MB against 51 MB at B 8, T 1024,
C 768, NH 12 in bf16; the timings' GB/s are of these. Versions 3 and 4 take the head size at run time,
up to a capacity compiled in (16, 32, 64 or 128, the smallest that holds it): the output row
lives in registers, whose count the compiler must know. Every version sums in a fixed order:
no atomics, the same bits every run.
*/
#include "lab.h"
#include "../kernels/attention.cuh"  // defines: attention_forward_host (the reference), attention_forward_row (version 1),
                                     //          attention_forward (version 2)

__global__ void attention_forward_kernel1(floatX* out, floatX* att, const floatX* qkv, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // (b * NH + h) * T + t
    if (idx < B * NH * T) attention_forward_row(idx / (T * NH), (idx / T) % NH, idx % T, out, att, qkv, T, C, NH);
}

// ---------------------------------------------------------------- version 3: online softmax, a thread per row
// The online softmax: after keys 0..j a row holds m (the largest score so far), l (the sum of
// exp(s - m)) and o (the sum of exp(s - m) v). A new key with score s moves m to m' = max(m, s);
// what was summed against the old m is scaled by exp(m - m') and the new key adds exp(s - m'):
//     l' = l exp(m - m') + exp(s - m')      o' = o exp(m - m') + exp(s - m') v
// At the end out = o / l and lse = m + log l. exp never sees a positive argument, so nothing
// overflows, and the scores need not be kept. (kernels/attention_block.cuh's
// attention_block_forward_row, ring attention's block, is the same recurrence; with the whole
// causal row as one block it computes this version's numbers, but keeps o in global fp32 memory,
// read and written back for every key, lse as (B,T,NH), and needs a second pass to floatX: what
// merging blocks from other ranks needs, not what a one-pass kernel wants.)
// A thread holds o in registers: ptxas -v (sm_90) counts 49 a thread at HS_MAX 16, 128 at 64 and
// 172 at 128, and a block may use 64K registers, so blocks of at most 256 threads
// (__launch_bounds__ tells the compiler, which may then use up to 255 a thread without spilling)
#define KERNEL3_MAX_BLOCK 256
template <int HS_MAX>  // the capacity of o: hs <= HS_MAX
__global__ void __launch_bounds__(KERNEL3_MAX_BLOCK)
attention_forward_kernel3(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // (b * NH + h) * T + t: lse's index
    if (idx >= B * NH * T) return;
    int b = idx / (NH * T), h = (idx / T) % NH, t = idx % T, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
    float o[HS_MAX], m = -INFINITY, l = 0.0f;  // m = -inf: the first key's rescale is exp(-inf) = 0
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) o[i] = 0.0f;  // loops over HS_MAX, unrolled: o stays in registers
    for (int j = 0; j <= t; j++) {
        const floatX* k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
        const floatX* v = k + C;
        float s = 0.0f;
        for (int i = 0; i < hs; i++) s += to_float(q[i]) * to_float(k[i]);
        s *= scale;
        float m_new = fmaxf(m, s), rescale = expf(m - m_new), p = expf(s - m_new);
        #pragma unroll
        for (int i = 0; i < HS_MAX; i++)
            if (i < hs) o[i] = o[i] * rescale + p * to_float(v[i]);
        l = l * rescale + p;
        m = m_new;
    }
    floatX* y = out + ((size_t)b * T + t) * C + h * hs;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++)
        if (i < hs) y[i] = from_float(o[i] / l);
    lse[idx] = m + logf(l);
}

// ---------------------------------------------------------------- version 4: shared-memory tiles
#define QUERY_TILE 32  // Br: queries per block, one thread each
#define KEY_TILE 32    // Bc: keys per tile. Equal to QUERY_TILE, so one key tile is the diagonal's
static_assert(QUERY_TILE == KEY_TILE, "version 4 masks exactly one key tile per query tile, the one at the same offset");

// rows first_row .. first_row + rows - 1 of part `part` (0 q, 1 k, 2 v) of head h of sequence b,
// into a shared fp32 tile where element (row, i) sits at tile[row * row_stride + i * channel_stride]
// (converted once here, not at each of its uses).
// All the block's threads take part: thread x loads elements x, x + blockDim.x, ..., so that
// neighbouring threads read neighbouring channels of a row (coalesced). Rows past T are zeros
__device__ inline void load_head_rows(float* tile, int row_stride, int channel_stride, const floatX* qkv, int part,
                                      int b, int h, int first_row, int rows, int T, int C, int hs) {
    for (int e = threadIdx.x; e < rows * hs; e += blockDim.x) {
        int row = e / hs, i = e % hs, t = first_row + row;
        tile[row * row_stride + i * channel_stride] = t < T ? to_float(qkv[((size_t)b * T + t) * 3 * C + part * C + h * hs + i]) : 0.0f;
    }
}

// one key tile for query row r of the block: its `keys` scores, then the online softmax of
// version 3 with one rescale for the whole tile: m' = max(m, max_c s_c), o and l times
// exp(m - m'), then p_c = exp(s_c - m') for each key in order
template <int HS_MAX>
__device__ inline void attend_to_tile(float (&o)[HS_MAX], float& m, float& l, const float (*q_tile)[QUERY_TILE],
                                      const float (*k_tile)[HS_MAX], const float (*v_tile)[HS_MAX], int r, int keys,
                                      int hs, float scale) {
    float s[KEY_TILE], tile_max = -INFINITY;
    #pragma unroll
    for (int c = 0; c < KEY_TILE; c++) {
        if (c >= keys) continue;
        float dot = 0.0f;
        for (int i = 0; i < hs; i++) dot += q_tile[i][r] * k_tile[c][i];  // k: the same for every thread
        s[c] = dot * scale;
        tile_max = fmaxf(tile_max, s[c]);
    }
    float m_new = fmaxf(m, tile_max), rescale = expf(m - m_new);  // first tile: m = -inf, rescale 0
    l *= rescale;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) o[i] *= rescale;
    #pragma unroll
    for (int c = 0; c < KEY_TILE; c++) {
        if (c >= keys) continue;
        float p = expf(s[c] - m_new);
        l += p;
        #pragma unroll
        for (int i = 0; i < HS_MAX; i++)
            if (i < hs) o[i] += p * v_tile[c][i];
    }
    m = m_new;
}

// grid (T / QUERY_TILE rounded up, B * NH), QUERY_TILE threads: thread r owns query t = q0 + r
template <int HS_MAX>
__global__ void attention_forward_kernel4(floatX* out, float* lse, const floatX* qkv, int T, int C, int NH) {
    // q transposed, (channel, query): at each step the 32 threads read 32 neighbouring words
    // (no bank conflicts); k and v (key, channel): every thread reads the same key (a broadcast).
    // fp32 in every build: 48 KB at HS_MAX 128, the most a block may declare statically
    __shared__ float q_tile[HS_MAX][QUERY_TILE], k_tile[KEY_TILE][HS_MAX], v_tile[KEY_TILE][HS_MAX];
    static_assert(sizeof(q_tile) + sizeof(k_tile) + sizeof(v_tile) <= 48 * 1024, "over the 48 KB of static shared memory");
    int b = blockIdx.y / NH, h = blockIdx.y % NH, hs = C / NH;
    int q0 = blockIdx.x * QUERY_TILE, r = threadIdx.x, t = q0 + r;
    float scale = 1.0f / sqrtf((float)hs);
    float o[HS_MAX], m = -INFINITY, l = 0.0f;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++) o[i] = 0.0f;
    // threads with t >= T (the last tile of a T not a multiple of 32) stay: they load their
    // share of every tile and meet every barrier, and only skip the arithmetic and the stores
    load_head_rows(&q_tile[0][0], 1, QUERY_TILE, qkv, 0, b, h, q0, QUERY_TILE, T, C, hs);
    int last_key = min(q0 + QUERY_TILE, T) - 1;  // the block's last query's own key: tiles past it are above the diagonal
    for (int k0 = 0; k0 <= last_key; k0 += KEY_TILE) {
        load_head_rows(&k_tile[0][0], HS_MAX, 1, qkv, 1, b, h, k0, KEY_TILE, T, C, hs);
        load_head_rows(&v_tile[0][0], HS_MAX, 1, qkv, 2, b, h, k0, KEY_TILE, T, C, hs);
        __syncthreads();  // every thread's loads (q's too, the first time) are in before any thread reads the tiles
        bool diagonal = k0 == q0;  // keys k0 .. k0+31 against queries q0 .. q0+31: query t sees keys j <= t only
        int keys = diagonal ? t - k0 + 1 : KEY_TILE;
        if (t < T) attend_to_tile<HS_MAX>(o, m, l, q_tile, k_tile, v_tile, r, keys, hs, scale);
        __syncthreads();  // every thread is done with the tiles before the next pass overwrites them
    }
    if (t >= T) return;
    floatX* y = out + ((size_t)b * T + t) * C + h * hs;
    #pragma unroll
    for (int i = 0; i < HS_MAX; i++)
        if (i < hs) y[i] = from_float(o[i] / l);
    lse[((size_t)b * NH + h) * T + t] = m + logf(l);
}

// the smallest compiled capacity that holds head size hs
static int head_capacity(int hs) {
    if (hs > 128) fail("attention_forward versions 3 and 4: head size %d, more than the 128 they are compiled for", hs);
    return hs <= 16 ? 16 : hs <= 32 ? 32 : hs <= 64 ? 64 : 128;
}
static void attention_forward3(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH, int block) {
    if (block > KERNEL3_MAX_BLOCK) fail("attention_forward version 3: blocks of %d threads, more than %d", block, KERNEL3_MAX_BLOCK);
    int grid = ceil_div(B * NH * T, block);
    switch (head_capacity(C / NH)) {
        case 16: attention_forward_kernel3<16><<<grid, block>>>(out, lse, qkv, B, T, C, NH); break;
        case 32: attention_forward_kernel3<32><<<grid, block>>>(out, lse, qkv, B, T, C, NH); break;
        case 64: attention_forward_kernel3<64><<<grid, block>>>(out, lse, qkv, B, T, C, NH); break;
        default: attention_forward_kernel3<128><<<grid, block>>>(out, lse, qkv, B, T, C, NH); break;
    }
    launchCheck();
}
static void attention_forward4(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    dim3 grid(ceil_div(T, QUERY_TILE), B * NH);
    switch (head_capacity(C / NH)) {
        case 16: attention_forward_kernel4<16><<<grid, QUERY_TILE>>>(out, lse, qkv, T, C, NH); break;
        case 32: attention_forward_kernel4<32><<<grid, QUERY_TILE>>>(out, lse, qkv, T, C, NH); break;
        case 64: attention_forward_kernel4<64><<<grid, QUERY_TILE>>>(out, lse, qkv, T, C, NH); break;
        default: attention_forward_kernel4<128><<<grid, QUERY_TILE>>>(out, lse, qkv, T, C, NH); break;
    }
    launchCheck();
}

// ---------------------------------------------------------------- the lab
struct Buffers { floatX *out, *att, *qkv, *scratch; float* lse; };
static Buffers upload(const std::vector<floatX>& qkv, int B, int T, int C, int NH) {
    return {(floatX*)device_malloc((size_t)B * T * C * sizeof(floatX)), (floatX*)device_malloc((size_t)B * NH * T * T * sizeof(floatX)),
            to_device(qkv), (floatX*)device_malloc(attention_scratch_elements(B, T, C, NH) * sizeof(floatX)),
            (float*)device_malloc((size_t)B * NH * T * sizeof(float))};
}
static void release(const Buffers& d) {
    device_free(d.out); device_free(d.att); device_free(d.qkv); device_free(d.scratch); device_free(d.lse);
}
// out, att and lse set to NaN (all bits set, in every precision): a version that leaves an element
// unwritten fails its check instead of passing on the last version's result
static void poison_outputs(const Buffers& d, int B, int T, int C, int NH) {
    cudaCheck(cudaMemset(d.out, 0xFF, (size_t)B * T * C * sizeof(floatX)));
    cudaCheck(cudaMemset(d.att, 0xFF, (size_t)B * NH * T * T * sizeof(floatX)));
    cudaCheck(cudaMemset(d.lse, 0xFF, (size_t)B * NH * T * sizeof(float)));
}
static bool writes_att(int version) { return version <= 2; }  // versions 3 and 4 write lse instead
// version 3 runs at the lab's block sizes up to KERNEL3_MAX_BLOCK; versions 2 and 4 ignore the block size
static bool runs_at(int version, int block) { return version != 3 || block <= KERNEL3_MAX_BLOCK; }
// the bytes a version must move: qkv read, out written, and att (versions 1, 2) or lse (3, 4)
// written. What it reads again from cache or writes to scratch (version 2's permutes and scores) is not counted
static double compulsory_bytes(int version, int B, int T, int C, int NH) {
    double qkv_out = (double)B * T * 4 * C * sizeof(floatX);
    return qkv_out + (writes_att(version) ? (double)B * NH * T * T * sizeof(floatX) : (double)B * NH * T * sizeof(float));
}

static void attention_forward_version(int version, int block, const Buffers& d, int B, int T, int C, int NH) {
    if (version == 1) {
        attention_forward_kernel1<<<ceil_div(B * NH * T, block), block>>>(d.out, d.att, d.qkv, B, T, C, NH);
        launchCheck();
    } else if (version == 2) {
        attention_forward(d.out, d.att, d.qkv, d.scratch, B, T, C, NH);
    } else if (version == 3) {
        attention_forward3(d.out, d.lse, d.qkv, B, T, C, NH, block);
    } else {
        attention_forward4(d.out, d.lse, d.qkv, B, T, C, NH);
    }
}

// lse[b, h, t] = log sum_{j <= t} exp(q_t . k_j / sqrt(hs)) in float64, from the same floatX
// inputs: the reference for versions 3 and 4 (the host twin keeps att, not lse)
static std::vector<double> lse_float64(const std::vector<floatX>& qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    std::vector<double> lse((size_t)B * NH * T), s(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const floatX* q = &qkv[((size_t)b * T + t) * 3 * C + h * hs];
                double max = -INFINITY, sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    const floatX* k = &qkv[((size_t)b * T + j) * 3 * C + C + h * hs];
                    double dot = 0.0;
                    for (int i = 0; i < hs; i++) dot += as_double(q[i]) * as_double(k[i]);
                    s[j] = dot / sqrt((double)hs);
                    max = fmax(max, s[j]);
                }
                for (int j = 0; j <= t; j++) sum += exp(s[j] - max);
                lse[((size_t)b * NH + h) * T + t] = max + log(sum);
            }
    return lse;
}
// lse is fp32 statistics: 1e-5 against float64 in every build, as the labs hold fp32 state.
// Quiet unless it fails; *worst keeps the largest relative error for the report
static void check_lse(Lab* lab, const float* d_lse, const std::vector<double>& reference, double* worst) {
    std::vector<float> ours = from_device(d_lse, reference.size());
    RefTensor theirs;
    theirs.values = reference;
    double err;
    if (!check_close("lse vs float64", ours.data(), theirs, 1e-5, [](float x) { return (double)x; }, true, &err)) lab->failures++;
    if (!(err <= *worst)) *worst = err;
}

// one size: every version at every block size against the host twin (out, and att for versions
// 1 and 2) and against float64's lse (versions 3 and 4)
static void check_versions(Lab* lab, const Buffers& d, const std::vector<floatX>& out, const std::vector<floatX>& att,
                           const std::vector<double>& lse, int versions, int B, int T, int C, int NH) {
    for (int v = 1; v <= versions; v++) {
        if (!lab_wants(*lab, v)) continue;
        double worst_lse = 0.0;
        for (int block : LAB_BLOCK_SIZES) {
            if (!runs_at(v, block)) continue;
            poison_outputs(d, B, T, C, NH);
            attention_forward_version(v, block, d, B, T, C, NH);
            lab_check(lab, "out", d.out, out);
            if (writes_att(v)) lab_check(lab, "att", d.att, att);
            else check_lse(lab, d.lse, lse, &worst_lse);
        }
        lab_report(lab, v, "B T C NH", {B, T, C, NH});
        if (!writes_att(v)) printf("  %-44s     lse against float64,          worst rel err %.2e\n", "", worst_lse);
    }
}

// times every wanted version at its block sizes (time_versions' output, with the bytes of each
// version: they differ by the (B,NH,T,T) matrix)
static void time_attention(const Lab& lab, const Buffers& d, int versions, int B, int T, int C, int NH) {
#ifdef CUDA_EMULATION
    printf("  timing skipped: emulated CUDA\n");
    return;
#endif
    double flops = 4.0 * B * T * T * C;  // two T x T x hs products per head, half of them masked
    for (int v = 1; v <= versions; v++) {
        if (!lab_wants(lab, v)) continue;
        double bytes = compulsory_bytes(v, B, T, C, NH);
        printf("  version %d must move %.1f MB\n", v, bytes / 1e6);
        for (int block : LAB_BLOCK_SIZES) {
            if (!runs_at(v, block)) continue;
            float ms = time_ms([&] { attention_forward_version(v, block, d, B, T, C, NH); });
            printf("  version %d, block %4d: %8.4f ms, %7.1f GB/s, %6.1f TFLOP/s\n", v, block, ms, bytes / ms / 1e6, flops / ms / 1e9);
        }
    }
}

int main(int argc, char** argv) {
    const int VERSIONS = 4;
    Lab lab = lab_start(argc, argv, "attention_forward", VERSIONS);
    // the awkward sizes: T = 1, 17, 64, 100 (all but 64 leave version 4's last 32-query tile part
    // empty) at head sizes 16, 64, 128; then the lab's first sizes (head sizes 8, 12, 64); T = 1024 is timed
    struct Size { int B, T, C, NH; } sizes[] = {
        {2, 1, 32, 2}, {2, 1, 128, 2}, {1, 1, 256, 2}, {2, 17, 32, 2}, {2, 17, 128, 2}, {1, 17, 256, 2},
        {2, 64, 32, 2}, {1, 64, 128, 2}, {1, 64, 256, 2}, {2, 100, 32, 2}, {1, 100, 128, 2}, {1, 100, 256, 2},
        {2, 8, 16, 2}, {1, 33, 48, 4}, {4, 64, 768, 12}, {8, 1024, 768, 12}};
    for (Size s : sizes) {
        if (lab_skip_in_emulation((double)s.B * s.NH * s.T * s.T)) continue;
        std::vector<floatX> qkv = random_floatx((size_t)s.B * s.T * 3 * s.C, 1), out((size_t)s.B * s.T * s.C),
                            att((size_t)s.B * s.NH * s.T * s.T);
        attention_forward_host(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
        std::vector<double> lse = lse_float64(qkv, s.B, s.T, s.C, s.NH);
        Buffers d = upload(qkv, s.B, s.T, s.C, s.NH);
        check_versions(&lab, d, out, att, lse, VERSIONS, s.B, s.T, s.C, s.NH);
        if (s.T == 1024) time_attention(lab, d, VERSIONS, s.B, s.T, s.C, s.NH);
        release(d);
    }
    for_each_ref_case("attention", [&](const RefFile& ref, const std::string& p, const std::vector<int>& sz) {
        int B = sz[0], T = sz[1], C = sz[2], NH = sz[3];
        Buffers d = upload(ref_floatx(ref, p + "qkv"), B, T, C, NH);
        for (int v = 1; v <= VERSIONS; v++) {
            if (!lab_wants(lab, v)) continue;
            printf("  version %d against PyTorch, case %s\n", v, p.c_str());
            poison_outputs(d, B, T, C, NH);
            attention_forward_version(v, 256, d, B, T, C, NH);
            lab_check_ref(&lab, "out", d.out, ref, p + "out");
            if (writes_att(v)) lab_check_ref(&lab, "att", d.att, ref, p + "att");
        }
        release(d);
    });
    return lab_finish(lab);
}

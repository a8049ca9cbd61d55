/*
tests/test_gpt2.cpp: the trainer against tests/reference.py (PyTorch, float64). Built
for the CPU (make test) and, compiled by nvcc as CUDA, for the GPU (make test-gpu, fp32
without TF32): the same checks, through device_to_host.

Loads the reference's model.bin through the trainer's own loader, runs one
micro-batch and compares logits, loss and every gradient tensor; then runs the
reference's AdamW steps through train_step (the code path of main, with the data
loader over the reference's shard) and compares each step's loss and grad norm.
The reference directory comes from $REFERENCE_DIR (default tests/build/ref).

Tolerances: the trainer computes in fp32, the reference in float64 on the same
fp32 weights, so the differences are fp32 rounding accumulated over sums of up to
a few thousand terms: ~1e-6 relative per op, a few 1e-5 after the whole network.
*/
#define TESTING
#include "../train_gpt.cu"
#include <catch2/catch.hpp>
#include <string>
#include <vector>

struct DebugState {
    int B, T, steps, L, NH, C, maxT;
    float lr, wd, clip, loss;
    std::vector<int> inputs, targets;
    std::vector<float> logits, grads, losses, norms;
};

static std::string reference_dir() {
    const char* d = getenv("REFERENCE_DIR");
    return d ? d : "tests/build/ref";
}

template <typename T> static void read_exact(FILE* f, T* dst, size_t n) {
    REQUIRE(fread(dst, sizeof(T), n, f) == n);
}

static DebugState load_debug_state(size_t num_parameters, int Vp) {
    std::string path = reference_dir() + "/debug_state.bin";
    FILE* f = fopen(path.c_str(), "rb");
    INFO("run tests/reference.py --out " << reference_dir() << " first");
    REQUIRE(f != nullptr);
    int32_t h[8];
    read_exact(f, h, 8);
    REQUIRE(h[0] == 20241122);
    DebugState s;
    s.B = h[1]; s.T = h[2]; s.steps = h[3]; s.L = h[4]; s.NH = h[5]; s.C = h[6]; s.maxT = h[7];
    float hp[3];
    read_exact(f, hp, 3);
    s.lr = hp[0]; s.wd = hp[1]; s.clip = hp[2];
    size_t N = (size_t)s.B * s.T;
    s.inputs.resize(N); s.targets.resize(N); s.logits.resize(N * Vp); s.grads.resize(num_parameters);
    s.losses.resize(s.steps); s.norms.resize(s.steps);
    read_exact(f, s.inputs.data(), N);
    read_exact(f, s.targets.data(), N);
    read_exact(f, s.logits.data(), N * Vp);
    read_exact(f, &s.loss, 1);
    read_exact(f, s.grads.data(), num_parameters);
    read_exact(f, s.losses.data(), s.steps);
    read_exact(f, s.norms.data(), s.steps);
    fclose(f);
    return s;
}

static std::vector<float> device_floats(const floatX* p, size_t n) {
    std::vector<floatX> raw(n);
    device_to_host(raw.data(), p, n * sizeof(floatX));
    std::vector<float> out(n);
    for (size_t i = 0; i < n; i++) out[i] = to_float(raw[i]);
    return out;
}

static double relative_l2(const float* a, const float* ref, size_t n) {
    double diff = 0, norm = 1e-30;
    for (size_t i = 0; i < n; i++) { diff += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]); norm += (double)ref[i] * ref[i]; }
    return sqrt(diff / norm);
}

TEST_CASE("forward, loss and every gradient match PyTorch float64") {
    device_init(0, 1);  // the GPU build's device and cuBLAS handle; the CPU build's threads
    Collectives comm = comm_single_process();
    GPT2 model;
    gpt2_create(&model, (reference_dir() + "/model.bin").c_str(), 0, &comm, 0, false, true);
    const GPT2Config& c = model.config;
    DebugState s = load_debug_state(model.num_parameters, c.padded_vocab_size);
    REQUIRE(c.num_layers == s.L);
    REQUIRE(c.channels == s.C);
    gpt2_allocate_activations(&model, s.B, s.T, 0, StageBuffers{1, 1, 0}, true);
    int N = s.B * s.T;
    ActivationTensors& a = model.sets[0];
    MicroBatch batch = {s.inputs.data(), s.targets.data()};

    stage_forward(&model, a, batch, s.B, s.T, 0.0f);  // dloss 0: the loss, and the logits left as they are
    staging_pending_sum(&model.staging);              // (its token losses, read below from the second forward)
    auto logits = device_floats(a.logits, (size_t)N * c.padded_vocab_size);
    double max_diff = 0;
    for (size_t i = 0; i < logits.size(); i++) {
        double d = fabs(logits[i] - s.logits[i]);
        if (std::isnan(d) || d > max_diff) max_diff = d;  // a NaN is the worst and stays (fmax would drop it)
    }
    INFO("max |logit - reference| = " << max_diff);
    CHECK(max_diff < 1e-5);

    stage_forward(&model, a, batch, s.B, s.T, 1.0f / N);  // again, with the loss's gradient
    double loss = staging_pending_sum(&model.staging) / N;  // its token losses, summed after the wait (staging.h)
    INFO("loss " << loss << " reference " << s.loss);
    CHECK(fabs(loss - s.loss) < 1e-5);

    stage_backward(&model, a, batch, s.B, s.T, -1);
    auto unit_grads = device_floats(model.zero.grads, model.num_parameters);  // one rank: units are unpadded
    std::vector<float> grads(model.num_parameters);
    reorder_part(c, model.layout, model.zero.units, unit_grads.data(), grads.data(), false);  // into the reference's file order
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = shape_elements(model.shapes[i]);
        double err = relative_l2(grads.data() + off, s.grads.data() + off, n);
        INFO("gradient of " << parameter_names[i] << ": relative L2 error " << err);
        CHECK(err < 1e-4);
        off += n;
    }
    // padded vocabulary rows get exactly zero gradient
    for (size_t i = (size_t)c.vocab_size * c.channels; i < (size_t)c.padded_vocab_size * c.channels; i++) REQUIRE(grads[i] == 0.0f);
    gpt2_free(&model);
}

TEST_CASE("AdamW steps with clipping and weight decay match PyTorch float64") {
    device_init(0, 1);
    Collectives comm = comm_single_process();
    GPT2 model;
    gpt2_create(&model, (reference_dir() + "/model.bin").c_str(), 0, &comm, 0, false, true);
    DebugState s = load_debug_state(model.num_parameters, model.config.padded_vocab_size);
    gpt2_allocate_activations(&model, s.B, s.T, 0, StageBuffers{1, 1, 0}, true);
    model.schedule = SCHEDULE_1F1B;
    TrainConfig tc;
    tc.B = s.B; tc.T = s.T; tc.lr = s.lr; tc.weight_decay = s.wd; tc.grad_clip = s.clip;
    tc.warmup = 0; tc.final_fraction = 1.0f;
    LossScaler scaler = loss_scaler_init("off", false, 2000);
    OutlierWindows outliers = {};  // (-sl, -sg off: no step skipped)
    DataLoader loader;
    dataloader_init(&loader, (reference_dir() + "/train.bin").c_str(), s.B, s.T, 0, 1, model.config.vocab_size, false, 0);
    for (int step = 0; step < s.steps; step++) {
        StepResult r = train_step(&model, &loader, &scaler, &outliers, tc, 1, step, s.steps);
        INFO("step " << step + 1 << ": loss " << r.loss << " reference " << s.losses[step] << ", norm " << r.norm
                     << " reference " << s.norms[step]);
        CHECK(fabs(r.loss - s.losses[step]) < 1e-4);
        CHECK(fabs(r.norm - s.norms[step]) / s.norms[step] < 1e-4);
    }
    dataloader_free(&loader);
    gpt2_free(&model);
}

TEST_CASE("the KV cache's logits match PyTorch float64 and the full forward's; samples identical") {
    device_init(0, 1);
    Collectives comm = comm_single_process();
    GPT2 model;
    gpt2_create(&model, (reference_dir() + "/model.bin").c_str(), 0, &comm, 0, false, true);
    const GPT2Config& c = model.config;
    DebugState s = load_debug_state(model.num_parameters, c.padded_vocab_size);
    gpt2_allocate_activations(&model, 1, s.T, 0, StageBuffers{1, 1, 0}, true);
    REQUIRE(kv_cache_applies(&model));
    KVCache cache = kv_cache_allocate(c.num_layers, s.T, c.channels, c.num_heads);
    const int* tokens = s.inputs.data();  // the reference's first sequence: its logits are the reference's row 0
    double vs_reference = 0, vs_full = 0;
    for (int t = 0; t < s.T; t++) {
        gpt2_decode(&model, &cache, tokens[t]);  // position t, over the cache of 0..t-1
        auto cached = device_floats(model.scratch.logit_row, c.padded_vocab_size);
        next_token_logits(&model, tokens, t + 1);  // a forward over tokens 0..t
        auto full = device_floats(model.scratch.logit_row, c.padded_vocab_size);
        for (int v = 0; v < c.vocab_size; v++) {
            double want = s.logits[(size_t)t * c.padded_vocab_size + v];
            double d_reference = fabs(cached[v] - want), d_full = fabs((double)cached[v] - full[v]);
            if (std::isnan(d_reference) || d_reference > vs_reference) vs_reference = d_reference;  // a NaN stays
            if (std::isnan(d_full) || d_full > vs_full) vs_full = d_full;
        }
    }
    kv_cache_free(&cache);
    INFO("positions 0.." << s.T - 1 << ": max |cached logit - PyTorch float64| " << vs_reference
                         << ", max |cached - full forward| " << vs_full);
    CHECK(vs_reference < 1e-5);
    CHECK(vs_full < 1e-5);
    // samples past T (the window slides: full forwards from there), with and without the cache
    int n = s.T + 8;
    std::vector<int> with_cache(n), without(n);
    Rng a = {1234}, b = {1234};
    gpt2_sample(&model, with_cache.data(), n, 1.0f, &a);
    setenv("TRAIN_GPT_SAMPLE_FULL_FORWARD", "1", 1);
    REQUIRE(!kv_cache_applies(&model));
    gpt2_sample(&model, without.data(), n, 1.0f, &b);
    unsetenv("TRAIN_GPT_SAMPLE_FULL_FORWARD");
    CHECK(with_cache == without);
    gpt2_free(&model);
}

/*
convert_hf.cpp: GPT-2 weights between Hugging Face's safetensors and llm.c's model file,
so that a run can start from the published GPT-2 (`-e gpt2_124M.bin`) and a trained model
can go back to `transformers`.

    ./convert_hf from-hf DIR/model.safetensors OUT.bin     (reads DIR/config.json too)
    ./convert_hf to-hf MODEL.bin DIR                       (writes DIR/model.safetensors, DIR/config.json)

safetensors: 8 bytes (little-endian u64) giving the length of a JSON header, the header
{"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...}, then the raw
tensors (offsets count from the end of the header). The header is read with nlohmann-json.

The mapping, per block l (HF names as the hub's gpt2 has them; a "transformer." prefix is
accepted too). GPT-2 was written with Conv1D layers, which store a weight as (in, out):
llm.c's linear weights are (out, in), so the four matrices are transposed both ways.

    llm.c (shape)          Hugging Face (shape)
    wte (Vp, C)            wte.weight (V, C)              padded rows Vp - V are zero
    wpe (maxT, C)          wpe.weight (maxT, C)
    ln1w, ln1b (C)         h.l.ln_1.weight, .bias
    qkvw (3C, C)           h.l.attn.c_attn.weight (C, 3C)    transposed
    qkvb (3C)              h.l.attn.c_attn.bias
    attprojw (C, C)        h.l.attn.c_proj.weight (C, C)     transposed
    attprojb (C)           h.l.attn.c_proj.bias
    ln2w, ln2b (C)         h.l.ln_2.weight, .bias
    fcw (4C, C)            h.l.mlp.c_fc.weight (C, 4C)       transposed
    fcb (4C)               h.l.mlp.c_fc.bias
    fcprojw (C, 4C)        h.l.mlp.c_proj.weight (4C, C)     transposed
    fcprojb (C)            h.l.mlp.c_proj.bias
    lnfw, lnfb (C)         ln_f.weight, .bias
The LM head is tied to wte (GPT-2's lm_head.weight is wte.weight): not stored.
*/
#include <stdio.h>            // defines: fopen, fread, fwrite
#include <string.h>           // defines: strcmp
#include <string>             // defines: std::string
#include <vector>             // defines: std::vector
#include <nlohmann/json.hpp>  // defines: nlohmann::json
#include "base.h"             // defines: fail, read_whole_file
#include "precision.h"        // defines: float_from_bf16_bits, bf16_bits_from_float

#define MODEL_MAGIC 20240326

struct Config { int max_seq_len, vocab_size, padded_vocab_size, num_layers, num_heads, channels; };

// one llm.c tensor of each layer (or of the model): its rows x cols, the HF name, transposed or not
struct TensorMap { const char* llmc; const char* hf; bool per_layer, transposed; };
static const TensorMap tensor_map[] = {
    {"wte", "wte.weight", false, false},           {"wpe", "wpe.weight", false, false},
    {"ln1w", "h.%d.ln_1.weight", true, false},     {"ln1b", "h.%d.ln_1.bias", true, false},
    {"qkvw", "h.%d.attn.c_attn.weight", true, true}, {"qkvb", "h.%d.attn.c_attn.bias", true, false},
    {"attprojw", "h.%d.attn.c_proj.weight", true, true}, {"attprojb", "h.%d.attn.c_proj.bias", true, false},
    {"ln2w", "h.%d.ln_2.weight", true, false},     {"ln2b", "h.%d.ln_2.bias", true, false},
    {"fcw", "h.%d.mlp.c_fc.weight", true, true},   {"fcb", "h.%d.mlp.c_fc.bias", true, false},
    {"fcprojw", "h.%d.mlp.c_proj.weight", true, true}, {"fcprojb", "h.%d.mlp.c_proj.bias", true, false},
    {"lnfw", "ln_f.weight", false, false},         {"lnfb", "ln_f.bias", false, false},
};
static const int num_tensors = sizeof(tensor_map) / sizeof(tensor_map[0]);

// llm.c's shape of tensor k (one layer's): rows x cols; a vector has rows = 1
static void llmc_shape(const Config& c, int k, size_t* rows, size_t* cols) {
    size_t C = c.channels;
    const size_t shapes[][2] = {{(size_t)c.padded_vocab_size, C}, {(size_t)c.max_seq_len, C}, {1, C}, {1, C},
                                {3 * C, C}, {1, 3 * C}, {C, C}, {1, C}, {1, C}, {1, C}, {4 * C, C}, {1, 4 * C},
                                {C, 4 * C}, {1, C}, {1, C}, {1, C}};
    *rows = shapes[k][0];
    *cols = shapes[k][1];
}
// the HF shape of tensor k: a vector is 1-D; wte has V rows; Conv1D weights are (in, out)
static std::vector<size_t> hf_shape(const Config& c, int k) {
    size_t rows, cols;
    llmc_shape(c, k, &rows, &cols);
    if (k == 0) rows = c.vocab_size;
    if (rows == 1) return {cols};
    return tensor_map[k].transposed ? std::vector<size_t>{cols, rows} : std::vector<size_t>{rows, cols};
}
static std::string hf_name(int k, int layer) {
    char name[64];
    snprintf(name, sizeof(name), tensor_map[k].hf, layer);
    return name;
}

static void write_file(const std::string& path, const std::string& bytes) {  // whole or not at all (base.h)
    WholeFile w = whole_file_open(path, "file");
    whole_file_write(&w, bytes.data(), bytes.size());
    whole_file_commit(&w);
    printf("wrote %s (%zu bytes)\n", path.c_str(), bytes.size());
}
static nlohmann::json parse_json(const std::string& text, const std::string& path) {
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        fail("%s: malformed JSON (%s)", path.c_str(), e.what());
    }
}
static int json_int(const nlohmann::json& j, const char* key, const std::string& path) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) fail("%s: no integer \"%s\"", path.c_str(), key);
    return it->get<int>();
}

// ---------------------------------------------------------------- from-hf
static void from_hf(const std::string& safetensors_path, const std::string& out_path) {
    std::string dir = safetensors_path.substr(0, safetensors_path.find_last_of('/') + 1);
    std::string config_path = dir + "config.json";
    nlohmann::json config = parse_json(read_whole_file(config_path.c_str(), " (GPT-2's config.json, beside model.safetensors)"), config_path);
    Config c;
    c.num_layers = json_int(config, "n_layer", config_path);
    c.num_heads = json_int(config, "n_head", config_path);
    c.channels = json_int(config, "n_embd", config_path);
    c.max_seq_len = json_int(config, "n_positions", config_path);
    c.vocab_size = json_int(config, "vocab_size", config_path);
    c.padded_vocab_size = (c.vocab_size + 127) / 128 * 128;  // llm.c pads the vocabulary to a multiple of 128
    if (c.num_layers < 1 || c.num_heads < 1 || c.channels < 1 || c.channels % c.num_heads || c.max_seq_len < 1 || c.vocab_size < 1)
        fail("%s: not a GPT-2 configuration (n_layer %d, n_head %d, n_embd %d, n_positions %d, vocab_size %d)",
             config_path.c_str(), c.num_layers, c.num_heads, c.channels, c.max_seq_len, c.vocab_size);

    std::string file = read_whole_file(safetensors_path.c_str(), " (a GPT-2 model.safetensors)");
    uint64_t header_bytes = 0;
    if (file.size() < 8) fail("%s: shorter than the 8-byte header length", safetensors_path.c_str());
    memcpy(&header_bytes, file.data(), 8);
    if (header_bytes > file.size() - 8) fail("%s: header length %llu past the end of the file", safetensors_path.c_str(),
                                             (unsigned long long)header_bytes);
    nlohmann::json header = parse_json(file.substr(8, header_bytes), safetensors_path);
    const char* data = file.data() + 8 + header_bytes;
    size_t data_bytes = file.size() - 8 - header_bytes;

    int header_ints[256] = {MODEL_MAGIC, 3, c.max_seq_len, c.vocab_size, c.num_layers, c.num_heads, c.channels,
                            c.padded_vocab_size};
    std::string out((const char*)header_ints, sizeof(header_ints));
    for (int k = 0; k < num_tensors; k++) {
        size_t rows, cols;
        llmc_shape(c, k, &rows, &cols);
        for (int l = 0; l < (tensor_map[k].per_layer ? c.num_layers : 1); l++) {
            std::string name = hf_name(k, l);
            auto it = header.find(name);
            if (it == header.end()) it = header.find("transformer." + name);
            if (it == header.end()) fail("%s: no tensor %s", safetensors_path.c_str(), name.c_str());
            std::string dtype = it->value("dtype", "");
            std::vector<size_t> shape = it->value("shape", std::vector<size_t>()), want = hf_shape(c, k);
            if (shape != want) fail("%s: %s has another shape than config.json implies", safetensors_path.c_str(), name.c_str());
            size_t bytes_per = dtype == "F32" ? 4 : dtype == "F16" || dtype == "BF16" ? 2 : 0;
            if (!bytes_per) fail("%s: %s has dtype %s (F32, F16 or BF16 expected)", safetensors_path.c_str(), name.c_str(), dtype.c_str());
            std::vector<size_t> offsets = it->value("data_offsets", std::vector<size_t>());
            size_t count = 1;
            for (size_t d : shape) count *= d;
            if (offsets.size() != 2 || offsets[1] > data_bytes || offsets[1] < offsets[0] || offsets[1] - offsets[0] != count * bytes_per)
                fail("%s: %s has bad data_offsets", safetensors_path.c_str(), name.c_str());
            std::vector<float> values(count);
            const char* src = data + offsets[0];
            for (size_t i = 0; i < count; i++) {
                uint16_t bits;
                _Float16 half;  // GCC's IEEE fp16
                if (bytes_per == 4) memcpy(&values[i], src + 4 * i, 4);
                else if (dtype == "BF16") { memcpy(&bits, src + 2 * i, 2); values[i] = float_from_bf16_bits(bits); }
                else { memcpy(&half, src + 2 * i, 2); values[i] = (float)half; }
            }
            std::vector<float> llmc(rows * cols, 0.0f);  // wte's padded rows stay zero
            for (size_t i = 0; i < count; i++) {
                size_t r = tensor_map[k].transposed ? i % rows : i / cols, col = tensor_map[k].transposed ? i / rows : i % cols;
                llmc[r * cols + col] = values[i];
            }
            out.append((const char*)llmc.data(), llmc.size() * sizeof(float));
        }
    }
    write_file(out_path, out);
}

// ---------------------------------------------------------------- to-hf
static void to_hf(const std::string& model_path, const std::string& dir) {
    std::string file = read_whole_file(model_path.c_str(), " (an llm.c model file)");
    if (file.size() < 1024) fail("%s: shorter than its 1024-byte header", model_path.c_str());
    int h[256];
    memcpy(h, file.data(), sizeof(h));
    if (h[0] != MODEL_MAGIC || (h[1] != 3 && h[1] != 5)) fail("%s: not an llm.c model file (version 3 fp32 or 5 bf16)", model_path.c_str());
    Config c = {h[2], h[3], h[7], h[4], h[5], h[6]};
    size_t bytes_per = h[1] == 3 ? 4 : 2, offset = 1024;
    nlohmann::json header = nlohmann::json::object();
    std::string body;
    for (int k = 0; k < num_tensors; k++) {
        size_t rows, cols;
        llmc_shape(c, k, &rows, &cols);
        for (int l = 0; l < (tensor_map[k].per_layer ? c.num_layers : 1); l++) {
            if (offset + rows * cols * bytes_per > file.size()) fail("%s: truncated at tensor %s", model_path.c_str(), tensor_map[k].llmc);
            std::vector<float> llmc(rows * cols);
            for (size_t i = 0; i < llmc.size(); i++) {
                uint16_t bits;
                if (bytes_per == 4) memcpy(&llmc[i], file.data() + offset + 4 * i, 4);
                else { memcpy(&bits, file.data() + offset + 2 * i, 2); llmc[i] = float_from_bf16_bits(bits); }
            }
            offset += rows * cols * bytes_per;
            if (k == 0) rows = c.vocab_size;  // wte without the padded rows
            std::vector<float> hf(rows * cols);
            for (size_t r = 0; r < rows; r++)
                for (size_t col = 0; col < cols; col++)
                    hf[tensor_map[k].transposed ? col * rows + r : r * cols + col] = llmc[r * cols + col];
            header[hf_name(k, l)] = {{"dtype", "F32"}, {"shape", hf_shape(c, k)},
                                     {"data_offsets", {body.size(), body.size() + hf.size() * 4}}};
            body.append((const char*)hf.data(), hf.size() * 4);
        }
    }
    if (offset != file.size()) fail("%s: %zu bytes, the header implies %zu", model_path.c_str(), file.size(), offset);
    header["__metadata__"] = {{"format", "pt"}};
    std::string json = header.dump();
    json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
    uint64_t json_bytes = json.size();
    if (system(("mkdir -p '" + dir + "'").c_str()) != 0) fail("cannot create %s", dir.c_str());
    write_file(dir + "/model.safetensors", std::string((const char*)&json_bytes, 8) + json + body);
    nlohmann::json config = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"},
                             {"n_layer", c.num_layers}, {"n_head", c.num_heads}, {"n_embd", c.channels},
                             {"n_positions", c.max_seq_len}, {"n_ctx", c.max_seq_len}, {"vocab_size", c.vocab_size},
                             {"activation_function", "gelu_new"}, {"layer_norm_epsilon", 1e-5},
                             {"bos_token_id", 50256}, {"eos_token_id", 50256}, {"tie_word_embeddings", true}};
    write_file(dir + "/config.json", config.dump(2) + "\n");
}

int main(int argc, char** argv) {
    try {  // a header entry of the wrong JSON type throws: one line, like every other error
        if (argc == 4 && !strcmp(argv[1], "from-hf")) { from_hf(argv[2], argv[3]); return 0; }
        if (argc == 4 && !strcmp(argv[1], "to-hf")) { to_hf(argv[2], argv[3]); return 0; }
    } catch (const nlohmann::json::exception& e) {
        fail("%s: unexpected JSON (%s)", argv[2], e.what());
    }
    {
        printf("usage: ./convert_hf from-hf DIR/model.safetensors OUT.bin   (DIR/config.json gives the shape)\n"
               "       ./convert_hf to-hf MODEL.bin DIR                     (writes DIR/model.safetensors and DIR/config.json)\n");
        return argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) ? 0 : 1;
    }
    return 0;
}

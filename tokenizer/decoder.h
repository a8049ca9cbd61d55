/*
tokenizer/decoder.h: token ids -> bytes, from llm.c's tokenizer file.

File: uint32 header[256] = {20240328, 2, V, EOT}, then for each of the V tokens a
uint8 length and that many bytes. The trainer uses this to print samples; it needs
no regex library, so it is apart from the encoder (tokenizer.h). A token is bytes,
not text: GPT-2's byte-level tokens can end in the middle of a UTF-8 character, so
text is whole only once the bytes of neighbouring tokens are joined.
*/
#pragma once
// defines: Decoder, decoder_load, decoder_free, decode_append, json_escape_utf8
#include <stdio.h>    // defines: fopen, fread
#include <stdint.h>   // defines: uint32_t, uint8_t
#include <string>     // defines: std::string
#include <vector>     // defines: std::vector
#include "../kernels/common.cuh"  // defines: fail

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2

struct Decoder {
    std::vector<std::string> tokens;  // id -> bytes
    int eot;
};

// returns false when the file does not exist; a malformed file is an error
inline bool decoder_load(Decoder* d, const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return false;
    uint32_t header[256];
    if (fread(header, sizeof(uint32_t), 256, f) != 256) fail("tokenizer file %s is shorter than its header", path);
    if (header[0] != TOKENIZER_MAGIC) fail("tokenizer file %s has magic %u, expected %d", path, header[0], TOKENIZER_MAGIC);
    if (header[1] != TOKENIZER_VERSION) fail("tokenizer file %s has version %u, expected %d", path, header[1], TOKENIZER_VERSION);
    d->tokens.resize(header[2]);
    d->eot = (int)header[3];
    for (auto& t : d->tokens) {
        uint8_t len;
        if (fread(&len, 1, 1, f) != 1) fail("tokenizer file %s is truncated", path);
        t.resize(len);
        if (len && fread(&t[0], 1, len, f) != len) fail("tokenizer file %s is truncated", path);
    }
    fclose(f);
    return true;
}

inline void decode_append(const Decoder* d, int id, std::string* out) {
    if (id >= 0 && id < (int)d->tokens.size()) *out += d->tokens[id];
}

// bytes as the inside of a JSON string: escapes, and U+FFFD for bytes that are not UTF-8
inline std::string json_escape_utf8(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        unsigned char c = s[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && i + len <= s.size();
        for (int k = 1; ok && k < len; k++) ok = ((unsigned char)s[i + k] >> 6) == 2;
        if (!ok) { out += "\xEF\xBF\xBD"; i++; continue; }
        if (c == '"') out += "\\\"";
        else if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else if (c < 0x20) { char buf[8]; snprintf(buf, sizeof(buf), "\\u%04x", c); out += buf; }
        else out.append(s, i, len);
        i += len;
    }
    return out;
}

/*
tokenizer/decoder.h: token ids -> bytes, from llm.c's tokenizer file.

File: uint32 header[256] = {20240328, 2, V, EOT}, then for each of the V tokens a
uint8 length and that many bytes. The trainer uses this to print samples; it needs
no regex library, so it is apart from the encoder (tokenizer.h). A token is bytes,
not text: GPT-2's byte-level tokens can end in the middle of a UTF-8 character, so
text is whole only once the bytes of neighbouring tokens are joined.
*/
#pragma once
// defines: Decoder, decoder_load, decode_append, utf8_sequence_length, json_escape_utf8, TOKENIZER_MAGIC,
//          TOKENIZER_VERSION
#include <stdio.h>    // defines: fopen, fread
#include <stdint.h>   // defines: uint32_t, uint8_t
#include <string>     // defines: std::string
#include <vector>     // defines: std::vector
#include "../base.h"  // defines: fail

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
    if (header[0] != TOKENIZER_MAGIC)
        fail("tokenizer file %s has magic %u, expected %d", path, header[0], TOKENIZER_MAGIC);
    if (header[1] != TOKENIZER_VERSION)
        fail("tokenizer file %s has version %u, expected %d", path, header[1], TOKENIZER_VERSION);
    // each token takes at least its length byte: a count beyond the file is damage, not a reason to
    // allocate (a mangled V of 2^31 asked for 64 GB)
    long at = ftell(f);
    fseek(f, 0, SEEK_END);
    long rest = ftell(f) - at;
    fseek(f, at, SEEK_SET);
    if ((long)header[2] > rest)
        fail("tokenizer file %s says %u tokens but holds %ld bytes after its header", path, header[2], rest);
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

// length of the valid UTF-8 sequence starting at s[i] (1-4), or 0 when the byte at i starts none
inline int utf8_sequence_length(const unsigned char* s, size_t i, size_t n) {
    unsigned char c = s[i];
    if (c < 0x80) return 1;
    int len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > n) return 0;
    for (int k = 1; k < len; k++) if ((s[i + k] >> 6) != 2) return 0;
    unsigned cp = len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; k++) cp = cp << 6 | (s[i + k] & 0x3F);
    bool shortest = (len == 2 && cp >= 0x80) || (len == 3 && cp >= 0x800) || (len == 4 && cp >= 0x10000);
    if (!shortest || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;  // overlong, surrogate, too large
    return len;
}

// bytes as the inside of a JSON string: escapes, and U+FFFD for bytes that are not UTF-8
inline std::string json_escape_utf8(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        unsigned char c = s[i];
        int len = utf8_sequence_length((const unsigned char*)s.data(), i, s.size());
        if (len == 0) { out += "\xEF\xBF\xBD"; i++; continue; }
        if (c == '"') out += "\\\"";
        else if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else if (c < 0x20) { char buf[8]; snprintf(buf, sizeof(buf), "\\u%04x", c); out += buf; }
        else out.append(s, i, len);
        i += len;
    }
    return out;
}

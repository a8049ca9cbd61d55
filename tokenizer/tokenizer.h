/*
tokenizer/tokenizer.h: GPT-2's byte-level BPE encoder, equal to OpenAI's encoder.py.

Encoding is two steps:
1. Pre-split the text into chunks with GPT-2's pattern
       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
   through PCRE2 (UTF, Unicode properties, JIT). \s is written \p{White_Space}: that is
   what Python's regex module means by \s, and PCRE2's own \s is a slightly other set.
   Bytes that are not valid UTF-8 cannot be matched by a UTF pattern; each becomes a
   chunk of its own, so any byte string encodes and decodes back exactly.
2. Each chunk's bytes start as single-byte tokens; repeatedly merge the adjacent pair
   whose merge has the lowest rank in vocab.bpe, until no pair can merge. Merges are
   kept as (left id, right id) -> (rank, merged id) in a flat table (MergeTable), so BPE
   runs on ids, and a cache remembers each chunk's result (words repeat), shared by the
   threads without locks (WordCache; a cache behind a reader-writer lock was tried: on
   varied text 2 threads became slower than 1).
"<|endoftext|>" in the text is plain text: only the training tools insert EOT (50256).

Vocabulary: encoder.json maps token strings to ids; its strings spell bytes with
GPT-2's bytes_to_unicode table (printable bytes as themselves, the others moved to
U+0100 and up), decoded back to bytes here. Read tokenizer_encode first.
*/
#pragma once
// defines: Tokenizer, MergeTable, WordCache, word_cache_new, word_cache_free, EncodeCache, tokenizer_load,
//          tokenizer_encode, tokenizer_safe_cut, tokenizer_decode, tokenizer_write_decoder, tokenizer_free,
//          tokenizer_load_tokens, tokenizer_load_merges, PCRE2_CODE_UNIT_WIDTH, bpe_chunk, encode_cache_free,
//          encode_cache_new, gpt2_byte_to_unicode, gpt2_unicode_to_bytes, merge_home, merge_pair, merge_slot,
//          merge_table_init, read_encoder_json, word_cache_add, word_cache_entry, word_cache_find
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>          // defines: pcre2_compile, pcre2_jit_compile, pcre2_match
#include <stdint.h>         // defines: uint64_t
#include <string>           // defines: std::string
#include <vector>           // defines: std::vector
#include <unordered_map>    // defines: std::unordered_map
#include <atomic>           // defines: std::atomic
#include <string_view>      // defines: std::string_view, std::hash
#include <stdlib.h>         // defines: calloc, malloc, free
#include <string.h>         // defines: memcmp, memcpy
#include <nlohmann/json.hpp>  // defines: nlohmann::json (encoder.json)
#include "decoder.h"        // defines: TOKENIZER_MAGIC, fail

// The merges of vocab.bpe: (left id, right id) -> (rank, merged id), in one flat open-addressing
// table whose size is a power of two at least twice the merges, so a lookup is a multiply, a
// shift and mostly one cache line. BPE looks up every adjacent pair of a word in each round; the
// std::unordered_map this replaces took a division and a hop to a separately allocated node per
// lookup (one thread on 5 MB of varied words: 137 -> 110 ms).
struct MergeTable {
    struct Slot { uint64_t pair; int rank, merged; };  // pair EMPTY: a free slot
    static constexpr uint64_t EMPTY = UINT64_MAX;      // no pair of ids (< 2^31) looks like this
    std::vector<Slot> slots;
    int shift = 64;                                    // slot = (pair * golden) >> shift
};
inline uint64_t merge_pair(int left, int right) { return (uint64_t)left << 32 | (uint32_t)right; }
inline size_t merge_home(const MergeTable& m, uint64_t pair) {
    return (size_t)((pair * 0x9E3779B97F4A7C15ull) >> m.shift);
}
// the index of `pair`'s slot, or of the free slot where it would go
inline size_t merge_slot(const MergeTable& m, uint64_t pair) {
    size_t mask = m.slots.size() - 1;
    for (size_t k = merge_home(m, pair);; k = (k + 1) & mask)
        if (m.slots[k].pair == pair || m.slots[k].pair == MergeTable::EMPTY) return k;
}
// a table for `count` merges, empty
inline void merge_table_init(MergeTable* m, size_t count) {
    size_t size = 2;
    m->shift = 63;
    while (size < 2 * count) { size *= 2; m->shift--; }
    m->slots.assign(size, {MergeTable::EMPTY, 0, 0});
}

struct Tokenizer {
    std::vector<std::string> tokens;                  // id -> bytes
    std::unordered_map<std::string, int> ids;         // bytes -> id
    MergeTable merges;                                // (left, right) -> (rank, merged id)
    int byte_token[256];                              // the single-byte tokens
    int eot;
    pcre2_code* pattern;
};

// WordCache: each chunk's ids once merged, shared by every encoding thread without a lock, so
// a word is merged once, by whichever thread meets it first, and kept once. An open-
// addressing hash table of fixed size: a thread claims a slot with compare-and-swap, and only
// after it has written the word's entry (bytes, ids) into the arenas, with release order; a
// reader loads the slot with acquire order, so it sees the whole entry, which never changes
// after. Bounded: once WORDS words or an arena is full, words are merged and not kept (a
// corpus of unique junk cannot grow it forever). Arenas are allocated untouched: memory is
// used as words arrive.
struct WordCache {
    static constexpr uint32_t WORDS = 1u << 18;
    static constexpr size_t SLOTS = 2 * WORDS, KEY_BYTES = 8u << 20, IDS = 2u << 20;
    struct Entry { uint32_t key_at, key_length, ids_at, ids_length; };
    std::atomic<uint64_t>* slots;   // 0: empty; else (hash's top 32 bits) << 32 | (entry index + 1)
    Entry* entries;
    char* keys;
    int* ids;
    std::atomic<uint32_t> entry_count{0};
    std::atomic<size_t> key_bytes{0}, id_count{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && sizeof(std::atomic<uint64_t>) == 8, "zeroed atomic slots");

inline WordCache* word_cache_new() {
    WordCache* w = new WordCache;
    // Zeroed here, on one thread, by stores the compiler must keep. A malloc + memset(0) is
    // turned into calloc, which leaves fresh memory untouched; then a thread's first lookup
    // reads a slot and maps the kernel's shared zero page there, and the first word added to
    // that page of the table replaces the mapping, which makes the kernel stop every other
    // thread's core to flush its TLB (an inter-processor interrupt: 375 of them in
    // /proc/interrupts per 5.6 MB encoded on 2 threads, and 4 with the table written first).
    w->slots = (std::atomic<uint64_t>*)malloc(WordCache::SLOTS * sizeof(std::atomic<uint64_t>));
    if (w->slots)
        for (size_t k = 0; k < WordCache::SLOTS; k++) w->slots[k].store(0, std::memory_order_relaxed);
    w->entries = (WordCache::Entry*)malloc(WordCache::WORDS * sizeof(WordCache::Entry));
    w->keys = (char*)malloc(WordCache::KEY_BYTES);
    w->ids = (int*)malloc(WordCache::IDS * sizeof(int));
    if (!w->slots || !w->entries || !w->keys || !w->ids) fail("out of memory for the tokenizer's word cache");
    return w;
}
inline void word_cache_free(WordCache* w) { free(w->slots); free(w->entries); free(w->keys); free(w->ids); delete w; }

// the entry a (non-empty) slot value points to, if it is the word of n bytes at key with this hash
inline const WordCache::Entry* word_cache_entry(const WordCache* w, uint64_t slot_value, const char* key, size_t n,
                                                uint64_t hash) {
    if (slot_value >> 32 != hash >> 32) return nullptr;
    const WordCache::Entry* e = &w->entries[(uint32_t)slot_value - 1];
    return e->key_length == n && memcmp(w->keys + e->key_at, key, n) == 0 ? e : nullptr;
}
// the ids of the n bytes at key, or NULL
inline const int* word_cache_find(const WordCache* w, const char* key, size_t n, uint64_t hash, uint32_t* count) {
    for (size_t slot = hash % WordCache::SLOTS;; slot = (slot + 1) % WordCache::SLOTS) {
        uint64_t v = w->slots[slot].load(std::memory_order_acquire);
        if (v == 0) return nullptr;  // at most WORDS of the 2 x WORDS slots fill: a probe always ends
        if (const WordCache::Entry* e = word_cache_entry(w, v, key, n, hash)) {
            *count = e->ids_length;
            return w->ids + e->ids_at;
        }
    }
}
inline void word_cache_add(WordCache* w, const char* key, size_t n, uint64_t hash, const int* word, size_t count) {
    if (w->entry_count.load(std::memory_order_relaxed) >= WordCache::WORDS) return;  // full: cheap early out
    uint32_t index = w->entry_count.fetch_add(1, std::memory_order_relaxed);
    size_t key_at = w->key_bytes.fetch_add(n, std::memory_order_relaxed);
    size_t ids_at = w->id_count.fetch_add(count, std::memory_order_relaxed);
    if (index >= WordCache::WORDS || key_at + n > WordCache::KEY_BYTES || ids_at + count > WordCache::IDS) return;
    memcpy(w->keys + key_at, key, n);
    memcpy(w->ids + ids_at, word, count * sizeof(int));
    w->entries[index] = {(uint32_t)key_at, (uint32_t)n, (uint32_t)ids_at, (uint32_t)count};
    uint64_t mine = (hash >> 32) << 32 | (uint64_t)(index + 1);
    for (size_t slot = hash % WordCache::SLOTS;; slot = (slot + 1) % WordCache::SLOTS) {
        uint64_t expected = 0;
        if (w->slots[slot].compare_exchange_strong(expected, mine, std::memory_order_release,
                                                   std::memory_order_acquire))
            return;
        if (word_cache_entry(w, expected, key, n, hash)) return;  // another thread added this very word meanwhile
    }
}

struct EncodeCache {  // one per thread: PCRE2's match data, and the word cache (shared, or its own)
    WordCache* words;
    bool owns_words;
    pcre2_match_data* match;
};

// GPT-2's bytes_to_unicode: byte -> code point
inline int gpt2_byte_to_unicode(int b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (printable) return b;
    int n = 0;  // the others, in byte order, take 256, 257, ...
    for (int k = 0; k < b; k++)
        if (!((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF))) n++;
    return 256 + n;
}

// a token string of encoder.json / vocab.bpe (UTF-8 of code points < 512) -> its bytes
inline std::string gpt2_unicode_to_bytes(const std::string& s, const int* code_to_byte, const char* source) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        unsigned char c = s[i];
        int cp, len;
        if (c < 0x80) { cp = c; len = 1; }
        else if ((c >> 5) == 6 && i + 1 < s.size()) { cp = ((c & 0x1F) << 6) | (s[i + 1] & 0x3F); len = 2; }
        else fail("%s: token string is not GPT-2's byte alphabet", source);
        if (cp >= 512 || code_to_byte[cp] < 0)
            fail("%s: token string has code point U+%04X outside GPT-2's byte alphabet", source, cp);
        out += (char)code_to_byte[cp];
        i += len;
    }
    return out;
}

// encoder.json is one flat object {"token string": id, ...}
inline void read_encoder_json(const char* path, std::vector<std::pair<std::string, int>>* entries) {
    std::string s = read_whole_file(path, " (GPT-2's encoder.json; `make data` fetches it)");
    nlohmann::json object;
    try {
        object = nlohmann::json::parse(s);
    } catch (const nlohmann::json::exception& e) {
        fail("%s: malformed JSON (%s)", path, e.what());
    }
    if (!object.is_object()) fail("%s: malformed JSON: not one object of token strings and ids", path);
    for (auto& [key, value] : object.items()) {
        if (!value.is_number_integer()) fail("%s: the id of a token is not an integer", path);
        entries->push_back({key, value.get<int>()});
    }
}

// encoder.json: each token's bytes and id, the 256 single bytes' tokens, <|endoftext|>'s
inline void tokenizer_load_tokens(Tokenizer* t, const char* encoder_json, const int* code_to_byte) {
    std::vector<std::pair<std::string, int>> entries;
    read_encoder_json(encoder_json, &entries);
    t->tokens.assign(entries.size(), std::string());
    for (auto& e : entries) {
        if (e.second < 0 || e.second >= (int)entries.size())
            fail("%s: token id %d out of range", encoder_json, e.second);
        std::string bytes = gpt2_unicode_to_bytes(e.first, code_to_byte, encoder_json);
        t->tokens[e.second] = bytes;
        t->ids[bytes] = e.second;
    }
    for (int b = 0; b < 256; b++) {
        auto it = t->ids.find(std::string(1, (char)b));
        if (it == t->ids.end()) fail("%s: no token for byte %d", encoder_json, b);
        t->byte_token[b] = it->second;
    }
    auto eot = t->ids.find("<|endoftext|>");
    t->eot = eot == t->ids.end() ? -1 : eot->second;
}

// vocab.bpe: the merges in rank order, into the hash table (a pair listed twice keeps its first rank)
inline void tokenizer_load_merges(Tokenizer* t, const char* vocab_bpe, const char* encoder_json,
                                  const int* code_to_byte) {
    FILE* f = fopen(vocab_bpe, "rb");
    if (!f) fail("cannot open %s (GPT-2's vocab.bpe; `make data` fetches it)", vocab_bpe);
    char line[1024];
    int rank = 0;
    std::vector<MergeTable::Slot> merges;  // in rank order: the table is sized once they are counted
    for (bool first = true; fgets(line, sizeof(line), f); first = false) {
        if (first && strncmp(line, "#version", 8) == 0) continue;  // the header; "# #" below is a real merge
        std::string l(line);
        while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
        if (l.empty()) continue;
        size_t space = l.find(' ');
        if (space == std::string::npos) fail("%s: merge line %d has no space", vocab_bpe, rank + 1);
        std::string a = gpt2_unicode_to_bytes(l.substr(0, space), code_to_byte, vocab_bpe);
        std::string b = gpt2_unicode_to_bytes(l.substr(space + 1), code_to_byte, vocab_bpe);
        auto ia = t->ids.find(a), ib = t->ids.find(b), im = t->ids.find(a + b);
        if (ia == t->ids.end() || ib == t->ids.end() || im == t->ids.end())
            fail("%s: merge %d uses a token missing from %s", vocab_bpe, rank + 1, encoder_json);
        merges.push_back({merge_pair(ia->second, ib->second), rank, im->second});
        rank++;
    }
    fclose(f);
    merge_table_init(&t->merges, merges.size());
    for (const MergeTable::Slot& m : merges) {
        MergeTable::Slot& slot = t->merges.slots[merge_slot(t->merges, m.pair)];
        if (slot.pair == MergeTable::EMPTY) slot = m;
    }
}

inline void tokenizer_load(Tokenizer* t, const char* encoder_json, const char* vocab_bpe) {
    int code_to_byte[512];
    for (int& x : code_to_byte) x = -1;
    for (int b = 0; b < 256; b++) code_to_byte[gpt2_byte_to_unicode(b)] = b;
    tokenizer_load_tokens(t, encoder_json, code_to_byte);
    tokenizer_load_merges(t, vocab_bpe, encoder_json, code_to_byte);
    const char* pattern =
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\p{White_Space}\\p{L}\\p{N}]+"
        "|\\p{White_Space}+(?![^\\p{White_Space}])|\\p{White_Space}+";
    int error;
    PCRE2_SIZE offset;
    t->pattern =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &error, &offset, NULL);
    if (!t->pattern) fail("PCRE2 could not compile GPT-2's pattern (error %d at %zu)", error, (size_t)offset);
    pcre2_jit_compile(t->pattern, PCRE2_JIT_COMPLETE);  // falls back to the interpreter where JIT is unavailable
}

// a thread's encoding state; words: the word cache the threads share (NULL: a cache of its own)
inline EncodeCache* encode_cache_new(const Tokenizer* t, WordCache* words = nullptr) {
    EncodeCache* c = new EncodeCache;
    c->owns_words = words == nullptr;
    c->words = words ? words : word_cache_new();
    c->match = pcre2_match_data_create_from_pattern(t->pattern, NULL);
    return c;
}
inline void encode_cache_free(EncodeCache* c) {
    if (c->owns_words) word_cache_free(c->words);
    pcre2_match_data_free(c->match);
    delete c;
}

// BPE of one chunk: merge the lowest-ranked adjacent pair, everywhere, until none merges
inline void bpe_chunk(const Tokenizer* t, const char* bytes, size_t n, EncodeCache* cache, std::vector<int>* out) {
    uint64_t hash = std::hash<std::string_view>()(std::string_view(bytes, n));
    uint32_t count;
    const int* ids = word_cache_find(cache->words, bytes, n, hash, &count);
    if (ids) { out->insert(out->end(), ids, ids + count); return; }
    std::vector<int> word(n);
    for (size_t i = 0; i < n; i++) word[i] = t->byte_token[(unsigned char)bytes[i]];
    while (word.size() > 1) {
        int best_rank = INT32_MAX, left = -1, right = -1, merged = -1;
        for (size_t i = 0; i + 1 < word.size(); i++) {
            const MergeTable::Slot& m = t->merges.slots[merge_slot(t->merges, merge_pair(word[i], word[i + 1]))];
            if (m.pair != MergeTable::EMPTY && m.rank < best_rank) {
                best_rank = m.rank; left = word[i]; right = word[i + 1]; merged = m.merged;
            }
        }
        if (merged < 0) break;
        size_t kept = 0;  // merge every (left, right) pair, left to right, in place
        for (size_t i = 0; i < word.size(); i++) {
            if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) { word[kept++] = merged; i++; }
            else word[kept++] = word[i];
        }
        word.resize(kept);
    }
    word_cache_add(cache->words, bytes, n, hash, word.data(), word.size());
    out->insert(out->end(), word.begin(), word.end());
}

// appends the ids of text[0..n) to out
inline void tokenizer_encode(const Tokenizer* t, const char* text, size_t n, EncodeCache* cache,
                             std::vector<int>* out) {
    const unsigned char* s = (const unsigned char*)text;
    size_t i = 0;
    while (i < n) {
        size_t run = i;  // the valid UTF-8 run starting at i
        int len;
        while (run < n && (len = utf8_sequence_length(s, run, n)) > 0) run += len;
        size_t at = i;
        while (at < run) {  // the pattern's chunks of the run
            int rc =
                pcre2_match(t->pattern, (PCRE2_SPTR)text + i, run - i, at - i, PCRE2_NO_UTF_CHECK, cache->match, NULL);
            if (rc < 0) fail("tokenizer: the pattern matched nothing at byte %zu (PCRE2 %d)", at, rc);
            PCRE2_SIZE* ov = pcre2_get_ovector_pointer(cache->match);
            size_t start = i + ov[0], end = i + ov[1];
            if (start != at || end <= start) fail("tokenizer: the pattern skipped or stalled at byte %zu", at);
            bpe_chunk(t, text + start, end - start, cache, out);
            at = end;
        }
        if (run < n) out->push_back(t->byte_token[s[run]]);  // a byte that is not UTF-8: a chunk of its own
        i = run < n ? run + 1 : run;
    }
}

// Where one long text may be cut into pieces that encode independently, so that the ids of
// the pieces, joined, are the ids of the whole (this is how ./tokenize shards encodes a single
// large file on every core): at p where text[p-1] is printable ASCII other than space and
// text[p] is a space or a newline ("word| next", "end.|\n"). Why the ids cannot change:
// - the pre-split runs left to right. The chunk that holds text[p-1] (letters, digits, marks or
//   a contraction) cannot take in the whitespace after it: whitespace only ever begins a
//   " ?\p{L}+"-style chunk (a space) or sits in a whitespace run, and text[p-1] is neither. So a
//   chunk ends at p, in the whole text and in text[0..p) alike: where a greedy match ended was
//   decided by text[p] being whitespace, which stops it exactly as the end of the text does.
// - so a new chunk starts at p, and from p on the pattern (it has no look-behind) sees only
//   text[p..): the chunks of text[p..) alone are the whole text's from p on.
// - text[p-1] and text[p] are ASCII, so no UTF-8 sequence crosses p (tokenizer_encode's
//   valid runs split there the same way), and BPE never looks outside one chunk.
// Returns the first such p >= from, or n when there is none.
inline size_t tokenizer_safe_cut(const char* text, size_t n, size_t from) {
    for (size_t p = from > 0 ? from : 1; p < n; p++) {
        unsigned char before = text[p - 1];
        if ((text[p] == ' ' || text[p] == '\n') && before > ' ' && before < 0x7F) return p;
    }
    return n;
}

inline std::string tokenizer_decode(const Tokenizer* t, const std::vector<int>& ids) {
    std::string out;
    for (int id : ids) {
        if (id < 0 || id >= (int)t->tokens.size())
            fail("token id %d is outside the vocabulary (%zu)", id, t->tokens.size());
        out += t->tokens[id];
    }
    return out;
}

// llm.c's tokenizer file (decoder.h reads it)
inline void tokenizer_write_decoder(const Tokenizer* t, const char* path) {
    std::string tmp = std::string(path) + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) fail("cannot write %s", tmp.c_str());
    uint32_t header[256] = {TOKENIZER_MAGIC, TOKENIZER_VERSION, (uint32_t)t->tokens.size(), (uint32_t)t->eot};
    bool ok = fwrite(header, sizeof(header), 1, f) == 1;
    for (const std::string& tok : t->tokens) {
        if (tok.size() > 255) fail("token of %zu bytes does not fit the tokenizer file", tok.size());
        uint8_t len = (uint8_t)tok.size();
        ok = ok && fwrite(&len, 1, 1, f) == 1 && (len == 0 || fwrite(tok.data(), 1, len, f) == len);
    }
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp.c_str(), path) != 0) fail("writing %s failed", path);
}

inline void tokenizer_free(Tokenizer* t) { pcre2_code_free(t->pattern); }

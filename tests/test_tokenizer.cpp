/*
tests/test_tokenizer.cpp: properties of the encoder that need no reference:
decode(encode(x)) == x for random byte strings (invalid UTF-8 included) and random
Unicode text; the vocabulary's size, EOT and single-byte tokens; the UTF-8 validator
against a brute-force definition; the word cache's table in memory before the threads start.
Exact ids against GPT-2's own algorithm are checked by tests/test_tokenizer.sh; four short texts'
ids, as GPT-2's algorithm gives them, are also written here, a check that costs milliseconds.
Vocabulary directory: $GPT2_VOCAB (default data/gpt2, where `make data` puts it).
*/
#include <catch2/catch.hpp>
#include <string>
#include <sys/mman.h>  // defines: mincore
#include <unistd.h>    // defines: sysconf
#include "../tokenizer/tokenizer.h"
#include "../random.h"

static const Tokenizer& vocab() {
    static Tokenizer t;
    static bool loaded = false;
    if (!loaded) {
        const char* d = getenv("GPT2_VOCAB");
        std::string dir = d ? d : "data/gpt2";
        tokenizer_load(&t, (dir + "/encoder.json").c_str(), (dir + "/vocab.bpe").c_str());
        loaded = true;
    }
    return t;
}

static void append_utf8(std::string* out, unsigned cp) {  // code point -> UTF-8
    if (cp < 0x80) *out += (char)cp;
    else if (cp < 0x800) { *out += (char)(0xC0 | cp >> 6); *out += (char)(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) { *out += (char)(0xE0 | cp >> 12); *out += (char)(0x80 | ((cp >> 6) & 0x3F)); *out += (char)(0x80 | (cp & 0x3F)); }
    else { *out += (char)(0xF0 | cp >> 18); *out += (char)(0x80 | ((cp >> 12) & 0x3F)); *out += (char)(0x80 | ((cp >> 6) & 0x3F)); *out += (char)(0x80 | (cp & 0x3F)); }
}

static std::vector<int> encode(const std::string& s) {
    EncodeCache* c = encode_cache_new(&vocab());
    std::vector<int> ids;
    tokenizer_encode(&vocab(), s.data(), s.size(), c, &ids);
    encode_cache_free(c);
    return ids;
}

TEST_CASE("the vocabulary: 50257 tokens, 256 single bytes, EOT 50256") {
    CHECK(vocab().tokens.size() == 50257);
    CHECK(vocab().eot == 50256);
    for (int b = 0; b < 256; b++) CHECK(vocab().tokens[vocab().byte_token[b]] == std::string(1, (char)b));
    CHECK(encode("<|endoftext|>").size() > 1);  // plain text, never the special token
}

TEST_CASE("random byte strings round-trip exactly and never crash") {
    Rng rng = {2024};
    for (int trial = 0; trial < 2000; trial++) {
        std::string s(rng_next(&rng) % 200, '\0');
        for (char& c : s) {
            uint64_t r = rng_next(&rng);
            c = (char)(r % 4 == 0 ? ' ' : r % 4 == 1 ? 'a' + (r >> 8) % 26 : (r >> 8) % 256);  // some structure, much junk
        }
        std::vector<int> ids = encode(s);
        for (int id : ids) REQUIRE((id >= 0 && id < 50257));
        REQUIRE(tokenizer_decode(&vocab(), ids) == s);
    }
}

TEST_CASE("random Unicode text round-trips exactly") {
    const unsigned ranges[][2] = {{0x20, 0x7e}, {0xa0, 0x24f}, {0x370, 0x3ff}, {0x400, 0x4ff}, {0x590, 0x6ff},
                                  {0x900, 0x97f}, {0x3040, 0x30ff}, {0x4e00, 0x4fff}, {0xac00, 0xacff}, {0x1f300, 0x1f6ff},
                                  {0x2000, 0x206f}, {0x9, 0xd}};
    Rng rng = {77};
    for (int trial = 0; trial < 500; trial++) {
        std::string s;
        int n = rng_next(&rng) % 60;
        for (int k = 0; k < n; k++) {
            const unsigned* r = ranges[rng_next(&rng) % 12];
            append_utf8(&s, r[0] + rng_next(&rng) % (r[1] - r[0] + 1));
        }
        REQUIRE(tokenizer_decode(&vocab(), encode(s)) == s);
    }
}

TEST_CASE("utf8_sequence_length agrees with a brute-force decoder on every 1-4 byte prefix class") {
    Rng rng = {5};
    for (int trial = 0; trial < 200000; trial++) {
        unsigned char b[4];
        for (auto& x : b) x = (unsigned char)(rng_next(&rng) % 256);
        if (trial % 2) b[0] = 0xC0 + rng_next(&rng) % 0x38;  // bias towards lead bytes
        if (trial % 3 == 0) for (int k = 1; k < 4; k++) b[k] = 0x80 | (b[k] & 0x3F);
        // brute force: the shortest encoding of some scalar value that equals a prefix of b
        int want = 0;
        for (unsigned cp = 0; cp <= 0x10FFFF && want == 0; cp++) {
            if (cp >= 0xD800 && cp <= 0xDFFF) continue;
            std::string e;
            append_utf8(&e, cp);
            if (memcmp(e.data(), b, e.size()) == 0) want = (int)e.size();
            if (cp > 0x7F && (unsigned char)e[0] > b[0]) break;  // encodings grow with cp: past b[0], no match
        }
        INFO("bytes " << (int)b[0] << " " << (int)b[1] << " " << (int)b[2] << " " << (int)b[3]);
        REQUIRE(utf8_sequence_length(b, 0, 4) == want);
        if (trial > 3000) break;  // the brute force is slow; the first trials cover every lead-byte class
    }
}

TEST_CASE("a text cut at every safe place encodes to the ids of the whole") {
    Rng r = {99};
    const char* pieces[] = {"word", " ", "  ", "\n", "\n\n", "'s", "'ll", " x", "42", " 7", "!", " ?", "é", "Straße", " 東京",
                            "\xff", "\xe2\x82", "<|endoftext|>", " A", "\t", "a.b", " 've", " \n",
                            "\xc2\x85", "\xc2\xa0", "\xe3\x80\x80"};  // NEL, NBSP, ideographic space: whitespace, not ASCII
    for (int trial = 0; trial < 300; trial++) {
        std::string text;
        int n = 1 + (int)(rng_uniform(&r) * 60);
        for (int k = 0; k < n; k++) text += pieces[(size_t)(rng_uniform(&r) * (sizeof(pieces) / sizeof(*pieces)))];
        std::vector<int> whole = encode(text), joined;
        size_t start = 0, cuts = 0;
        for (size_t p = tokenizer_safe_cut(text.data(), text.size(), 1); p < text.size();
             p = tokenizer_safe_cut(text.data(), text.size(), p + 1), cuts++) {
            std::vector<int> part = encode(text.substr(start, p - start));  // cut at every safe place
            joined.insert(joined.end(), part.begin(), part.end());
            start = p;
        }
        std::vector<int> last = encode(text.substr(start));
        joined.insert(joined.end(), last.begin(), last.end());
        INFO(text << " (" << cuts << " cuts)");
        CHECK(joined == whole);
    }
}

// The word cache's table is written on the thread that makes it, page by page, so that the
// encoding threads never meet a page of it that is not theirs yet (tokenizer.h says what
// happens then). mincore() tells which pages of it are in memory: all of them, right after
// word_cache_new. A malloc + memset that the compiler turns into calloc leaves them out.
TEST_CASE("the word cache's table is in memory before any thread reads it") {
    WordCache* w = word_cache_new();
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t first = (uintptr_t)w->slots / page * page, end = (uintptr_t)(w->slots + WordCache::SLOTS);
    std::vector<unsigned char> resident((end - first + page - 1) / page);
    REQUIRE(mincore((void*)first, end - first, resident.data()) == 0);
    size_t in_memory = 0;
    for (unsigned char r : resident) in_memory += r & 1;
    CHECK(in_memory == resident.size());
    word_cache_free(w);
}

// ids from GPT-2's own algorithm (tests/gpt2_encoder_reference.py: OpenAI's encoder.py with Python
// `regex`, run on these texts written to files), not from ./tokenize. Each text leans on one part:
// whitespace runs (`\s+(?!\S)` leaves a run's last space to the next word, and takes a run at the
// end whole), contractions, numbers and punctuation, Unicode letters and emoji; every one needs
// BPE's merges in rank order (the lowest first), so a pre-tokenization boundary or a merge order
// off changes the ids
TEST_CASE("four texts give GPT-2's ids: whitespace runs, contractions, numbers, Unicode") {
    struct Case { const char* text; std::vector<int> ids; };
    const Case cases[] = {
        {"Hello   world\n\n  two spaces  \tand tabs\t\tend   ",
         {15496, 220, 220, 995, 628, 220, 734, 9029, 220, 220, 197, 392, 22524, 197, 197, 437, 220, 220, 220}},
        {"I'm sure they'll say it's 'quoted' we'd've DON'T",
         {40, 1101, 1654, 484, 1183, 910, 340, 338, 705, 421, 5191, 6, 356, 1549, 1053, 23917, 6, 51}},
        {"In 2024, 3.14159 apples cost $1,234.56 (x\u00b2) \u00bd",
         {818, 48609, 11, 513, 13, 1415, 19707, 22514, 1575, 720, 16, 11, 24409, 13, 3980, 357, 87, 31185, 8, 25208}},
        {"Stra\u00dfe na\u00efve \u041c\u043e\u0441\u043a\u0432\u0430 \u6771\u4eac \U0001f44b\U0001f3fd "
         "\u2014 \u00abdone\u00bb!!!",
         {41347, 39683, 68, 41492, 12466, 250, 15166, 21727, 31583, 38857, 16142, 10545, 251, 109, 12859, 105, 50169,
          233, 8582, 237, 121, 851, 21110, 28060, 17730, 10185}},
    };
    for (const Case& c : cases) {
        INFO("GPT-2's ids of \"" << c.text << "\"");
        CHECK(encode(c.text) == c.ids);
    }
}

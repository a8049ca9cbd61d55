/*
tokenizer/tokenize.cpp: GPT-2 tokenization and data preparation, no Python needed.

    ./tokenize ids FILE              the ids of FILE's text, space-separated, one line
    ./tokenize text IDS_FILE         the text of whitespace-separated ids, byte for byte
    ./tokenize shards -o OUT_PREFIX [--val-tokens N] [--shard-tokens N]
                      [--split-on-blank-lines] [--threads N] FILES...
                                     llm.c token shards, EOT before each document
    ./tokenize decoder -o FILE       llm.c's tokenizer file (ids -> bytes) for the trainer
    --vocab DIR (before the command) where encoder.json and vocab.bpe are
                                     (default data/gpt2, then ../shared/data/gpt2)

A document is a whole FILE, or with --split-on-blank-lines each block that ends in a
blank line (as llm.c's tinyshakespeare.py: "\n\n" stays with the block before it).
Tokens go, in order, into OUT_PREFIX_val.bin (the first --val-tokens) and then
OUT_PREFIX_train.bin, or OUT_PREFIX_train_000000.bin, ... when they exceed
--shard-tokens. Documents are encoded on every core; a terminal gets a progress bar
(tokens/s, ETA), anything else plain progress lines.
*/
#include <stdio.h>      // defines: printf, fopen
#include <string.h>     // defines: strcmp
#include <unistd.h>     // defines: isatty
#include <sys/stat.h>   // defines: stat
#include <atomic>       // defines: std::atomic
#include <chrono>       // defines: std::chrono
#include <thread>       // defines: std::thread
#include "tokenizer.h"  // defines: Tokenizer, tokenizer_encode, tokenizer_decode

static bool exists(const std::string& p) { struct stat st; return stat(p.c_str(), &st) == 0; }

static void usage() {
    printf("usage: ./tokenize [--vocab DIR] COMMAND ...\n"
           "  ids FILE                     print the GPT-2 ids of FILE's text\n"
           "  text IDS_FILE                print the bytes of whitespace-separated ids\n"
           "  shards -o OUT_PREFIX [--val-tokens N] [--shard-tokens N] [--split-on-blank-lines] [--threads N] FILES...\n"
           "                               write llm.c token shards (EOT before each document)\n"
           "  decoder -o FILE              write llm.c's tokenizer file for decoding samples\n"
           "  --vocab DIR                  encoder.json and vocab.bpe (default data/gpt2, then ../shared/data/gpt2)\n");
}

// llm.c shard: int32 header[256] = {20240520, 1, ntok}, then uint16 tokens
static void write_shard(const std::string& path, const int* tokens, size_t n) {
    int32_t header[256] = {20240520, 1, (int32_t)n};
    std::vector<uint16_t> t(tokens, tokens + n);
    std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) fail("cannot write %s", tmp.c_str());
    bool ok = fwrite(header, sizeof(header), 1, f) == 1 && fwrite(t.data(), 2, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) fail("writing %s failed (disk full?)", path.c_str());
    printf("wrote %s: %zu tokens\n", path.c_str(), n);
}

static void shards(const Tokenizer* t, int argc, char** argv) {
    std::string prefix;
    long val_tokens = 0, shard_tokens = 100000000;
    bool split_blank = false;
    int threads = (int)std::thread::hardware_concurrency();
    std::vector<const char*> files;
    for (int a = 0; a < argc; a++) {
        auto value = [&]() { if (a + 1 >= argc) fail("%s needs a value", argv[a]); return argv[++a]; };
        if (!strcmp(argv[a], "-o")) prefix = value();
        else if (!strcmp(argv[a], "--val-tokens")) val_tokens = atol(value());
        else if (!strcmp(argv[a], "--shard-tokens")) shard_tokens = atol(value());
        else if (!strcmp(argv[a], "--threads")) threads = atoi(value());
        else if (!strcmp(argv[a], "--split-on-blank-lines")) split_blank = true;
        else if (argv[a][0] == '-') fail("unknown option %s for shards", argv[a]);
        else files.push_back(argv[a]);
    }
    if (prefix.empty() || files.empty()) fail("shards needs -o OUT_PREFIX and at least one FILE");
    if (shard_tokens <= 0 || shard_tokens > INT32_MAX || val_tokens < 0) fail("--shard-tokens must be in 1..2^31-1 and --val-tokens >= 0");
    if (threads < 1) threads = 1;
    if (t->eot < 0) fail("the vocabulary has no <|endoftext|> token");

    std::vector<std::string> texts;
    std::vector<std::pair<const char*, size_t>> docs;  // (start, length) into texts
    size_t total_bytes = 0;
    for (const char* path : files) texts.push_back(read_whole_file(path, ""));
    for (const std::string& s : texts) {
        total_bytes += s.size();
        if (!split_blank) { docs.push_back({s.data(), s.size()}); continue; }
        size_t start = 0;
        while (start < s.size()) {
            size_t blank = s.find("\n\n", start);
            size_t end = blank == std::string::npos ? s.size() : blank + 2;
            docs.push_back({s.data() + start, end - start});
            start = end;
        }
    }
    // encode the documents on `threads` workers, taking them in order by an atomic counter
    std::vector<std::vector<int>> encoded(docs.size());
    std::atomic<size_t> next(0), bytes_done(0), tokens_done(0);
    auto worker = [&]() {
        EncodeCache* cache = encode_cache_new(t);
        for (size_t d; (d = next.fetch_add(1)) < docs.size();) {
            encoded[d].push_back(t->eot);
            tokenizer_encode(t, docs[d].first, docs[d].second, cache, &encoded[d]);
            bytes_done += docs[d].second;
            tokens_done += encoded[d].size();
        }
        encode_cache_free(cache);
    };
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int k = 0; k < threads; k++) pool.emplace_back(worker);
    bool tty = isatty(fileno(stderr));
    double last_report = -1.0;
    while (bytes_done < total_bytes) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        double frac = total_bytes ? (double)bytes_done / total_bytes : 1.0, rate = tokens_done / (s > 0 ? s : 1);
        double eta = frac > 0 ? s * (1 - frac) / frac : 0;
        if (tty) {
            int bar = (int)(30 * frac);
            fprintf(stderr, "\r[%.*s%*s] %5.1f%% %8.0f tok/s ETA %5.1fs", bar, "##############################", 30 - bar, "",
                    100 * frac, rate, eta);
        } else if (s - last_report >= 5.0) {  // plain lines, not too many
            fprintf(stderr, "progress %.1f%%, %zu tokens, %.0f tok/s, ETA %.1fs\n", 100 * frac, (size_t)tokens_done, rate, eta);
            last_report = s;
        }
    }
    for (auto& th : pool) th.join();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fprintf(stderr, "%s%zu documents, %.1f MB -> %zu tokens in %.2f s (%.2f MB/s, %d threads)\n", tty ? "\n" : "",
            docs.size(), total_bytes / 1e6, (size_t)tokens_done, secs, total_bytes / 1e6 / secs, threads);

    std::vector<int> all;
    all.reserve(tokens_done);
    for (auto& e : encoded) all.insert(all.end(), e.begin(), e.end());
    size_t val = (size_t)val_tokens < all.size() ? (size_t)val_tokens : all.size();
    if (val > 0) write_shard(prefix + "_val.bin", all.data(), val);
    size_t train = all.size() - val;
    if (train <= (size_t)shard_tokens) {
        write_shard(prefix + "_train.bin", all.data() + val, train);
    } else {
        for (size_t at = val, k = 0; at < all.size(); at += shard_tokens, k++) {
            char name[64];
            snprintf(name, sizeof(name), "_train_%06zu.bin", k);
            write_shard(prefix + name, all.data() + at, std::min((size_t)shard_tokens, all.size() - at));
        }
    }
}

int main(int argc, char** argv) {
    std::string vocab;
    int a = 1;
    if (a + 1 < argc && !strcmp(argv[a], "--vocab")) { vocab = argv[a + 1]; a += 2; }
    if (a >= argc || !strcmp(argv[a], "-h") || !strcmp(argv[a], "--help")) { usage(); return a >= argc ? 1 : 0; }
    if (vocab.empty()) vocab = exists("data/gpt2/encoder.json") ? "data/gpt2" : "../shared/data/gpt2";
    std::string command = argv[a++];
    if (command != "ids" && command != "text" && command != "shards" && command != "decoder") {
        usage();
        fail("unknown command '%s'", command.c_str());
    }
    Tokenizer t;
    tokenizer_load(&t, (vocab + "/encoder.json").c_str(), (vocab + "/vocab.bpe").c_str());
    if (command == "ids") {
        if (a + 1 != argc) fail("usage: ./tokenize ids FILE");
        std::string text = read_whole_file(argv[a], "");
        std::vector<int> ids;
        EncodeCache* cache = encode_cache_new(&t);
        tokenizer_encode(&t, text.data(), text.size(), cache, &ids);
        encode_cache_free(cache);
        std::string out;
        for (size_t i = 0; i < ids.size(); i++) { if (i) out += ' '; out += std::to_string(ids[i]); }
        printf("%s\n", out.c_str());
    } else if (command == "text") {
        if (a + 1 != argc) fail("usage: ./tokenize text IDS_FILE");
        std::string s = read_whole_file(argv[a], "");
        std::vector<int> ids;
        const char* p = s.c_str();
        while (*p) {
            while (*p && isspace((unsigned char)*p)) p++;
            if (!*p) break;
            char* end;
            long id = strtol(p, &end, 10);
            if (end == p || (*end && !isspace((unsigned char)*end)))
                fail("%s: '%.*s' is not a token id", argv[a], (int)std::min(strcspn(p, " \t\r\n"), (size_t)20), p);
            ids.push_back((int)id);
            p = end;
        }
        std::string text = tokenizer_decode(&t, ids);
        fwrite(text.data(), 1, text.size(), stdout);
    } else if (command == "shards") {
        shards(&t, argc - a, argv + a);
    } else {
        if (a + 2 != argc || strcmp(argv[a], "-o")) fail("usage: ./tokenize decoder -o FILE");
        tokenizer_write_decoder(&t, argv[a + 1]);
        printf("wrote %s: %zu tokens, EOT %d\n", argv[a + 1], t.tokens.size(), t.eot);
    }
    tokenizer_free(&t);
    return 0;
}

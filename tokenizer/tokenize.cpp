/*
tokenizer/tokenize.cpp: GPT-2 tokenization and data preparation, no Python needed.

    ./tokenize ids FILE              the ids of FILE's text, space-separated, one line
    ./tokenize text IDS_FILE         the text of whitespace-separated ids, byte for byte
    ./tokenize shards -o OUT_PREFIX [--val-tokens N] [--shard-tokens N] [--threads N]
                      [--split-on-blank-lines | --jsonl [--field NAME] [--skip-bad-lines]]
                      [--piece-bytes N] [--read-ahead-bytes N] FILES...
                                     llm.c token shards, EOT before each document
    ./tokenize decoder -o FILE       llm.c's tokenizer file (ids -> bytes) for the trainer
    ./tokenize hellaswag IN.jsonl OUT.bin
                                     HellaSwag's JSON lines (ctx, endings, label) as llm.c's eval
                                     file (../hellaswag.h): the context's ids, " " + each ending's
    --vocab DIR (before the command) where encoder.json and vocab.bpe are
                                     (default data/gpt2, then ../shared/data/gpt2)

A document is a whole FILE; with --split-on-blank-lines each block that ends in a blank
line (as llm.c's tinyshakespeare.py: "\n\n" stays with the block before it); with --jsonl
the string field NAME (default "text") of each line's JSON object (Hugging Face datasets
exported as JSON lines: OpenWebText, FineWeb, ...). Tokens go, in order, into
OUT_PREFIX_val.bin (the first --val-tokens) and then OUT_PREFIX_train.bin, or
OUT_PREFIX_train_000000.bin, ... when they exceed --shard-tokens.

Streaming: files are read a block or a line at a time (through zlib: a gzip FILE, .gz,
is decompressed on the fly, any other is read as it is) and gathered into jobs of about
--piece-bytes (64 kB): a longer document is cut into pieces at places where GPT-2's
pre-split always starts a new chunk (tokenizer_safe_cut: the ids cannot change), shorter
ones are grouped. A pool of threads encodes the jobs (EncodePool) while the reader goes on
and writes each finished job's tokens into its shard, in order, so one large file runs on
every core too. The reader stays at most --read-ahead-bytes of text ahead of the shards (16
jobs per thread: enough to keep every thread busy), so memory is bounded whatever the
input's size. A terminal gets a progress bar (MB, tokens/s, ETA), anything else plain
progress lines.
*/
#include <stdio.h>      // defines: printf, fopen
#include <malloc.h>     // defines: mallopt, M_MMAP_THRESHOLD, M_TRIM_THRESHOLD (glibc)
#include <zlib.h>       // defines: gzopen, gzread, gzgets, gzoffset (plain files read through as they are)
#include <string.h>     // defines: strcmp
#include <unistd.h>     // defines: isatty
#include <sys/stat.h>   // defines: stat
#include <chrono>       // defines: std::chrono
#include <condition_variable>  // defines: std::condition_variable
#include <deque>        // defines: std::deque
#include <mutex>        // defines: std::mutex, std::lock_guard
#include <thread>       // defines: std::thread
#include <string_view>  // defines: std::string_view
#include <nlohmann/json.hpp>  // defines: nlohmann::json (JSON lines)
#include "tokenizer.h"  // defines: Tokenizer, tokenizer_encode, tokenizer_safe_cut, tokenizer_decode
#include "../hellaswag.h"  // defines: EvalExample, eval_file_write, EVAL_ENDINGS

static bool exists(const std::string& p) { struct stat st; return stat(p.c_str(), &st) == 0; }

static void usage() {
    printf("usage: ./tokenize [--vocab DIR] COMMAND ...\n"
           "  ids FILE                     print the GPT-2 ids of FILE's text\n"
           "  text IDS_FILE                print the bytes of whitespace-separated ids\n"
           "  shards -o OUT_PREFIX [options] FILES...\n"
           "                               write llm.c token shards (EOT before each document);\n"
           "                               gzip FILEs (.gz) are decompressed as they are read:\n"
           "      --val-tokens N           the first N tokens go to OUT_PREFIX_val.bin (default 0)\n"
           "      --shard-tokens N         train tokens per shard (default 100000000)\n"
           "      --threads N              encoding threads (default: every core)\n"
           "      --split-on-blank-lines   a document is each block ending in a blank line (default: each file)\n"
           "      --jsonl                  a document is the string field of each JSON line\n"
           "      --field NAME             that field (default text)\n"
           "      --skip-bad-lines         count and skip bad JSON lines instead of stopping at the first\n"
           "      --piece-bytes N          the text of one job: longer documents are cut into pieces of about N\n"
           "                               bytes, shorter ones grouped up to N (default 65536)\n"
           "      --read-ahead-bytes N     read at most N bytes of text ahead of the shards\n"
           "                               (default: 16 x piece-bytes per thread)\n"
           "  decoder -o FILE              write llm.c's tokenizer file for decoding samples\n"
           "  hellaswag IN.jsonl OUT.bin   HellaSwag's JSON lines as llm.c's eval file (the trainer's -h 1 -hf)\n"
           "  --vocab DIR                  encoder.json and vocab.bpe (default data/gpt2, then ../shared/data/gpt2)\n");
}

// One llm.c shard being written: int32 header[256] = {20240520, 1, ntok}, then uint16 tokens.
// The tokens stream into PATH.tmp as they come (base.h's WholeFile); finish() writes the count
// into the header and renames the file to its final name, so a shard on disk is complete.
struct ShardFile {
    WholeFile file = {};  // file.f NULL: none open
    size_t tokens = 0;
    std::vector<char> buffer;  // stdio's, while the file is open
    bool open() const { return file.f != nullptr; }
    void start(const std::string& path) {
        file = whole_file_open(path, "shard");
        buffer.resize(1 << 20);  // 1 MB per write(): stdio's own 4 kB made 800 system calls of 5 MB of text
        setvbuf(file.f, buffer.data(), _IOFBF, buffer.size());
        int32_t header[256] = {20240520, 1, 0};  // the count is written by finish()
        whole_file_write(&file, header, sizeof(header));
        tokens = 0;
    }
    void append(const int* ids, size_t n) {
        uint16_t buffer[4096];
        for (size_t done = 0; done < n;) {
            size_t k = std::min(n - done, sizeof(buffer) / sizeof(buffer[0]));
            for (size_t i = 0; i < k; i++) buffer[i] = (uint16_t)ids[done + i];
            whole_file_write(&file, buffer, 2 * k);
            done += k;
        }
        tokens += n;
    }
    void finish(const std::string& path) {  // the count into the header, then renamed to its final name
        int32_t count = (int32_t)tokens;
        file.ok = file.ok && fseek(file.f, 2 * sizeof(int32_t), SEEK_SET) == 0;
        whole_file_write(&file, &count, sizeof(count));
        file.path = path;
        whole_file_commit(&file);
        printf("wrote %s: %zu tokens\n", path.c_str(), tokens);
    }
};

// Tokens in, shards out as they come: the first val_tokens into PREFIX_val.bin, the rest into
// PREFIX_train.bin, or PREFIX_train_000000.bin, ... once they exceed shard_tokens. A full train
// shard is closed when the next token arrives, so that exactly shard_tokens stays one file and
// a single shard keeps the plain name. Memory: a 4096-token buffer, whatever the corpus.
struct ShardWriter {
    std::string prefix;
    size_t val_tokens, shard_tokens, train_shards_written = 0, total = 0;
    ShardFile val, train;

    void add(const int* ids, size_t n) {
        total += n;
        while (n > 0) {
            size_t take;
            if (val.tokens < val_tokens) {
                if (!val.open()) val.start(prefix + "_val.bin");
                take = std::min(n, val_tokens - val.tokens);
                val.append(ids, take);
                if (val.tokens == val_tokens) val.finish(prefix + "_val.bin");
            } else {
                if (train.open() && train.tokens == shard_tokens) close_train(true);
                if (!train.open()) train.start(prefix + "_train.bin");
                take = std::min(n, shard_tokens - train.tokens);
                train.append(ids, take);
            }
            ids += take;
            n -= take;
        }
    }
    // numbered: more than one train shard (this one is full and another token came, or one was before)
    void close_train(bool numbered) {
        char name[64];
        if (numbered) snprintf(name, sizeof(name), "_train_%06zu.bin", train_shards_written);
        train.finish(prefix + (numbered ? name : "_train.bin"));
        train_shards_written++;
    }
    void finish() {
        if (val.open()) val.finish(prefix + "_val.bin");  // fewer tokens than --val-tokens
        if (!train.open()) train.start(prefix + "_train.bin");  // no train tokens: an empty shard, as before
        close_train(train_shards_written > 0);  // a shard opened after another always holds a token
    }
    void abandon() {  // a failed run leaves no partial shard behind (complete ones stay)
        for (ShardFile* shard : {&val, &train})
            if (shard->open()) whole_file_abandon(&shard->file);
    }
};

// A piece of text to encode: a whole document, or a part of one cut at a safe place
// (tokenizer_safe_cut); EOT goes before the pieces that start a document.
// A JSON line is a piece too: the worker that encodes it parses it first (json_line: the
// line's number in `path`), so parsing runs on every core as well.
struct Piece {
    std::string text;
    bool starts_document;
    const char* path = nullptr;
    size_t json_line = 0;  // 0: text
};

// the document in field `field` of one JSON line, or "" with *problem saying what is wrong
static std::string json_document(const std::string& line, const std::string& field, std::string* problem) {
    try {
        nlohmann::json object = nlohmann::json::parse(line);
        auto value = object.is_object() ? object.find(field) : object.end();
        if (!object.is_object()) *problem = "not a JSON object";
        else if (value == object.end()) *problem = "no field \"" + field + "\"";
        else if (!value->is_string()) *problem = "field \"" + field + "\" is not a string";
        else return value->get<std::string>();
    } catch (const nlohmann::json::exception& e) {
        *problem = e.what();  // nlohmann's message: malformed JSON, invalid UTF-8, a lone surrogate
    }
    return std::string();
}

enum InputFormat { WHOLE_FILE, BLANK_LINE_BLOCKS, JSON_LINES };

struct ShardOptions {
    InputFormat format = WHOLE_FILE;
    std::string field = "text";           // JSON_LINES: the field that holds a document
    bool skip_bad_lines = false;
    size_t piece_bytes = 64 << 10;        // a job's text: a long document is cut into pieces of about this
                                          // size, short ones grouped up to it (EncodeJob says why 64 kB)
    size_t read_ahead_bytes = 0;          // text read and not yet written (the parser sets it: 16 jobs per
                                          // thread unless given)
};

// One input file, read a block (or a line) at a time through zlib, which decompresses gzip
// and passes any other file through. `pending` is the unemitted tail of the current document;
// `pending_starts` says whether it begins the document. bytes_read counts the file's bytes
// (compressed ones for .gz), for the progress bar. A read that fails (a cut .gz) ends the file
// with `error` saying why: the caller stops the run, leaving no partial shard behind.
struct InputReader {
    const ShardOptions* opt;
    const char* path;
    gzFile f;
    std::string pending, error;
    bool pending_starts = true, done = false;
    size_t line = 0, bytes_read = 0;
    size_t line_start = 0;  // JSON lines: where the next line starts in `pending`

    bool read_ok(int got) {
        int code = Z_OK;
        const char* message = gzerror(f, &code);
        if (got >= 0 && code == Z_OK) { bytes_read = (size_t)gzoffset(f); return true; }
        size_t n = strlen(path);  // zlib's message starts with the path: said once
        if (!strncmp(message, path, n) && !strncmp(message + n, ": ", 2)) message += n + 2;
        error = std::string("reading ") + path + " failed: " + message;  // a cut .gz: "unexpected end of file"
        done = true;
        return false;
    }
    size_t read_chunk() {  // up to 64 kB more of the file onto `pending`; 0 at its end or on an error
        char block[1 << 16];
        int got = gzread(f, block, sizeof(block));
        if (!read_ok(got)) return 0;
        pending.append(block, got);
        return (size_t)got;
    }

    // a document's text, or the part of it read so far (complete: the document ends here):
    // pieces of about piece_bytes cut at safe places; an incomplete document keeps its tail
    void emit(std::string& text, bool complete, std::vector<Piece>* out) {
        size_t start = 0;
        while (text.size() - start > 2 * opt->piece_bytes || (complete && text.size() - start > opt->piece_bytes)) {
            size_t cut = tokenizer_safe_cut(text.data(), text.size(), start + opt->piece_bytes);
            if (cut >= text.size()) break;  // no safe place: the rest stays one piece
            out->push_back({text.substr(start, cut - start), pending_starts});
            pending_starts = false;
            start = cut;
        }
        if (complete) {
            out->push_back({text.substr(start), pending_starts});
            pending_starts = true;
            text.clear();
        } else {
            text.erase(0, start);
        }
    }
    // text formats: read a block; each complete document (a "\n\n"-ended block, or the whole
    // file at its end) is emitted, and a long unfinished one in pieces
    void read_block(std::vector<Piece>* out) {
        size_t scan = pending.size() > 0 ? pending.size() - 1 : 0;  // a "\n\n" may span the blocks
        size_t got = read_chunk();
        if (opt->format == BLANK_LINE_BLOCKS) {
            size_t taken = 0;  // erased once below: erasing each document would move the block each time
            for (size_t blank; (blank = pending.find("\n\n", std::max(scan, taken))) != std::string::npos; taken = blank + 2) {
                std::string document = pending.substr(taken, blank + 2 - taken);
                emit(document, true, out);
            }
            pending.erase(0, taken);
        }
        if (got == 0) {  // the end of the file ends its document
            if (opt->format == WHOLE_FILE || !pending.empty()) emit(pending, true, out);
            done = true;
        } else {
            emit(pending, false, out);
        }
    }
    // JSON lines: one object per line, parsed by the worker that encodes it (a document is one
    // piece: it is not cut); blank lines are allowed
    void read_line(std::vector<Piece>* out) {
        size_t newline;
        while ((newline = pending.find('\n', line_start)) == std::string::npos) {  // a line of any length
            pending.erase(0, line_start);  // what is left of the block: moved once per block
            line_start = 0;
            if (read_chunk() == 0) break;
        }
        size_t end = newline == std::string::npos ? pending.size() : newline + 1;
        if (end == line_start) { done = true; return; }
        std::string text = pending.substr(line_start, end - line_start);
        line_start = end;
        line++;
        if (text.find_first_not_of(" \t\r\n") == std::string::npos) return;
        out->push_back({std::move(text), true, path, line});
    }
    void read_more(std::vector<Piece>* out) { if (opt->format == JSON_LINES) read_line(out); else read_block(out); }
};

static size_t file_size(const char* path) { struct stat st; return stat(path, &st) == 0 ? (size_t)st.st_size : 0; }

// the progress bar (a terminal) or plain lines (anything else): bytes, tokens/s, ETA
struct Progress {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    size_t total_bytes = 0;
    double last_report = -1.0;
    bool tty = isatty(fileno(stderr));
    double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
    // at most every 0.1 s on a terminal and every 5 s otherwise, unless `last`
    void report(size_t bytes_done, size_t tokens_done, bool last = false) {
        double s = seconds(), frac = total_bytes ? std::min(1.0, (double)bytes_done / total_bytes) : 1.0;
        if (!last && s - last_report < (tty ? 0.1 : 5.0)) return;
        last_report = s;
        double rate = tokens_done / (s > 0 ? s : 1), eta = frac > 0 ? s * (1 - frac) / frac : 0;
        if (tty) {
            int bar = (int)(30 * frac);
            fprintf(stderr, "\r[%.*s%*s] %5.1f%% %7.1f MB %9.0f tok/s ETA %6.1fs", bar, "##############################",
                    30 - bar, "", 100 * frac, bytes_done / 1e6, rate, eta);
        } else {
            fprintf(stderr, "progress %.1f%%, %.1f MB, %zu tokens, %.0f tok/s, ETA %.1fs\n", 100 * frac, bytes_done / 1e6,
                    tokens_done, rate, eta);
        }
    }
};

// A job: about --piece-bytes of text, one piece of a long document or as many short documents
// (or JSON lines) as fill it, so that handing out a job, and waking the writer when it is
// done, is paid once per 64 kB and not once per 200-byte document. 64 kB is about 1.5 ms of
// encoding: small enough that the threads finish the input within that of each other (1.2 MB
// of JSON lines on 2 threads: 1.49x with 256 kB jobs, 1.65x with 64 kB), large enough that
// the microseconds a job costs to hand out do not show.
struct EncodeJob {
    std::vector<Piece> pieces;
    size_t text_bytes = 0;     // of the pieces
    size_t file_bytes = 0;     // the input bytes read when the job was full, for the progress bar
    std::vector<int> ids;      // the pieces' tokens in order, EOT before each document
    size_t documents = 0, bad_lines = 0;
    std::string problem;       // the first bad JSON line's: "path:line: what is wrong"
    bool done = false;         // under the pool's lock
};

// The encoding pool: one worker thread per EncodeCache encodes jobs in the order they were
// read, while the calling thread reads on and writes finished jobs' tokens to the shards in
// that same order. Reading, encoding and writing overlap: nobody waits for a whole batch to
// be read before encoding starts, or for a whole batch to be encoded before writing starts.
// `jobs` holds the jobs read and not yet written, oldest first (a deque: adding at the back
// and removing at the front leave the other jobs where they are, so a worker encodes its job
// in place without the lock). Memory: the text in `jobs` stays under --read-ahead-bytes, as
// the reader writes the oldest job (waiting for it) before it reads beyond that. Reading far
// ahead gains nothing once every thread has work queued, and costs new memory to fault in for
// every job, where a short read-ahead reuses the memory, still in cache, of the jobs just
// written (5.6 MB in one file, 2 threads: the reader's own time 13 -> 7 ms with 1 MB ahead
// instead of all of it).
struct EncodePool {
    const Tokenizer* t;
    const std::string* json_field;
    std::deque<EncodeJob> jobs;
    size_t next_to_encode = 0;  // index in `jobs` of the first job no worker has taken
    size_t text_bytes = 0;      // the text bytes in `jobs`
    bool closing = false;       // no more jobs will come: workers leave once none is left
    std::mutex lock;
    std::condition_variable job_added, job_done;
    std::vector<std::thread> workers;
};

// a job's tokens: EOT before each document; a JSON line is parsed first (on the worker, so
// parsing runs on every core too), and a bad one gives no tokens but a problem
static void encode_job(const Tokenizer* t, const std::string& json_field, EncodeCache* cache, EncodeJob* job) {
    job->ids.reserve(job->text_bytes / 3 + job->pieces.size());  // about 4 bytes a token in English: rarely grows
    std::string document, problem;
    for (const Piece& piece : job->pieces) {
        const std::string* text = &piece.text;
        if (piece.json_line) {
            text = &(document = json_document(piece.text, json_field, &problem));
            if (!problem.empty()) {
                if (job->bad_lines++ == 0) job->problem = std::string(piece.path) + ":" + std::to_string(piece.json_line) + ": " + problem;
                problem.clear();
                continue;
            }
        }
        if (piece.starts_document) { job->ids.push_back(t->eot); job->documents++; }
        tokenizer_encode(t, text->data(), text->size(), cache, &job->ids);
    }
}

static void encode_worker(EncodePool* pool, EncodeCache* cache) {
    for (;;) {
        EncodeJob* job;
        {
            std::unique_lock<std::mutex> guard(pool->lock);
            pool->job_added.wait(guard, [&] { return pool->closing || pool->next_to_encode < pool->jobs.size(); });
            if (pool->next_to_encode >= pool->jobs.size()) return;  // closing, nothing left
            job = &pool->jobs[pool->next_to_encode++];
        }
        encode_job(pool->t, *pool->json_field, cache, job);
        std::lock_guard<std::mutex> guard(pool->lock);
        job->done = true;
        pool->job_done.notify_one();  // only the reader waits for it
    }
}

static void pool_start(EncodePool* pool, const Tokenizer* t, const std::string* json_field, std::vector<EncodeCache*>& caches) {
    pool->t = t;
    pool->json_field = json_field;
    for (EncodeCache* cache : caches) pool->workers.emplace_back(encode_worker, pool, cache);
}
static void pool_add(EncodePool* pool, EncodeJob&& job) {
    {
        std::lock_guard<std::mutex> guard(pool->lock);
        pool->text_bytes += job.text_bytes;
        pool->jobs.push_back(std::move(job));
    }
    pool->job_added.notify_one();
}
// the oldest job once it is encoded, or NULL: none is left, or (wait false) it is not done yet.
// While it waits, the progress bar moves every 100 ms.
template <typename Report>
static EncodeJob* pool_oldest(EncodePool* pool, bool wait, Report report) {
    std::unique_lock<std::mutex> guard(pool->lock);
    if (pool->jobs.empty()) return nullptr;
    if (!wait) return pool->jobs.front().done ? &pool->jobs.front() : nullptr;
    while (!pool->job_done.wait_for(guard, std::chrono::milliseconds(100), [&] { return pool->jobs.front().done; }))
        report();
    return &pool->jobs.front();
}
static void pool_remove_oldest(EncodePool* pool) {  // once its tokens are written
    std::lock_guard<std::mutex> guard(pool->lock);
    pool->text_bytes -= pool->jobs.front().text_bytes;
    pool->jobs.pop_front();
    pool->next_to_encode--;  // the oldest was taken: it is done
}
// the workers finish the jobs they hold and leave; with drop, the jobs no worker has taken
// are dropped (a run that stops at a bad line)
static void pool_stop(EncodePool* pool, bool drop) {
    {
        std::lock_guard<std::mutex> guard(pool->lock);
        pool->closing = true;
        if (drop) pool->jobs.resize(pool->next_to_encode);
    }
    pool->job_added.notify_all();
    for (std::thread& worker : pool->workers) worker.join();
}

// `shards`'s command line: the writer's settings, the input format, the threads, the files
struct ShardsCommand {
    ShardWriter writer;
    ShardOptions opt;
    int threads = (int)std::thread::hardware_concurrency();
    std::vector<const char*> files;
};
static ShardsCommand parse_shards_command(int argc, char** argv) {
    ShardsCommand c;
    ShardOptions& opt = c.opt;
    long val_tokens = 0, shard_tokens = 100000000, piece_bytes = (long)opt.piece_bytes, read_ahead_bytes = 0;
    bool read_ahead_given = false;
    for (int a = 0; a < argc; a++) {
        auto value = [&]() { if (a + 1 >= argc) fail("%s needs a value", argv[a]); return argv[++a]; };
        if (!strcmp(argv[a], "-o")) c.writer.prefix = value();
        else if (!strcmp(argv[a], "--val-tokens")) val_tokens = atol(value());
        else if (!strcmp(argv[a], "--shard-tokens")) shard_tokens = atol(value());
        else if (!strcmp(argv[a], "--threads")) c.threads = atoi(value());
        else if (!strcmp(argv[a], "--split-on-blank-lines")) opt.format = BLANK_LINE_BLOCKS;
        else if (!strcmp(argv[a], "--jsonl")) opt.format = JSON_LINES;
        else if (!strcmp(argv[a], "--field")) opt.field = value();
        else if (!strcmp(argv[a], "--skip-bad-lines")) opt.skip_bad_lines = true;
        else if (!strcmp(argv[a], "--piece-bytes")) piece_bytes = atol(value());
        else if (!strcmp(argv[a], "--read-ahead-bytes")) { read_ahead_bytes = atol(value()); read_ahead_given = true; }
        else if (argv[a][0] == '-') fail("unknown option %s for shards", argv[a]);
        else c.files.push_back(argv[a]);
    }
    if (c.writer.prefix.empty() || c.files.empty()) fail("shards needs -o OUT_PREFIX and at least one FILE");
    if (shard_tokens <= 0 || shard_tokens > INT32_MAX || val_tokens < 0 || val_tokens > INT32_MAX)
        fail("--shard-tokens must be in 1..2^31-1 and --val-tokens in 0..2^31-1");
    if (piece_bytes < 1 || (read_ahead_given && read_ahead_bytes < 1))
        fail("--piece-bytes and --read-ahead-bytes must be at least 1");
    if (c.threads < 1) c.threads = 1;
    c.writer.val_tokens = (size_t)val_tokens;
    c.writer.shard_tokens = (size_t)shard_tokens;
    opt.piece_bytes = (size_t)piece_bytes;
    opt.read_ahead_bytes = read_ahead_given ? (size_t)read_ahead_bytes : 16 * opt.piece_bytes * (size_t)c.threads;
    for (const char* path : c.files) {  // every file opens before any work starts
        FILE* f = fopen(path, "rb");
        if (!f) fail("cannot open %s", path);
        fclose(f);
    }
    return c;
}

// Every file is read a block (or a JSON line) at a time; each piece read goes to the encoding
// pool, and the pieces the pool has finished go to the shards, oldest first. The reader waits
// for the oldest job only when --read-ahead-bytes of text are read ahead of the shards, and at the end.
static void shards(const Tokenizer* t, ShardsCommand& c) {
    if (t->eot < 0) fail("the vocabulary has no <|endoftext|> token");
    // Every job brings large buffers (its text, its ids) that go once it is written. glibc maps
    // buffers over 128 kB fresh from the kernel and unmaps them when freed: new pages to fault in
    // each time, and each unmap stops the other cores to flush their TLBs. Kept in the heap
    // instead, the freed buffers serve the next jobs (measured on 5.6 MB in one file: the reader's
    // time 8 -> 4.5 ms). The heap holds at most about --read-ahead-bytes of them, as the jobs do.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    ShardWriter& writer = c.writer;
    const ShardOptions& opt = c.opt;
    Progress progress;
    for (const char* path : c.files) progress.total_bytes += file_size(path);
    WordCache* words = word_cache_new();  // merged words, shared by the threads
    std::vector<EncodeCache*> caches;
    for (int k = 0; k < c.threads; k++) caches.push_back(encode_cache_new(t, words));
    EncodePool pool;
    pool_start(&pool, t, &opt.field, caches);
    size_t documents = 0, text_bytes = 0, bad_lines = 0, file_bytes_done = 0, file_bytes_written = 0;
    auto report = [&] { progress.report(file_bytes_written, writer.total); };
    auto stop = [&](const std::string& message) {  // no partial shard left behind
        pool_stop(&pool, true);
        writer.abandon();
        fail("%s", message.c_str());
    };
    // the oldest job's tokens into the shards, if it is encoded (wait: once it is); false: none left
    auto write_oldest = [&](bool wait) {
        EncodeJob* job = pool_oldest(&pool, wait, report);
        if (!job) return false;
        if (job->bad_lines && !opt.skip_bad_lines) stop(job->problem + " (--skip-bad-lines skips such lines)");
        bad_lines += job->bad_lines;
        documents += job->documents;
        writer.add(job->ids.data(), job->ids.size());
        file_bytes_written = job->file_bytes;
        pool_remove_oldest(&pool);
        report();
        return true;
    };
    EncodeJob filling;  // pieces gather here until they make a job
    auto add_job = [&](size_t file_bytes) {
        filling.file_bytes = file_bytes;
        pool_add(&pool, std::move(filling));
        filling = EncodeJob();
    };
    std::vector<Piece> read;
    for (const char* path : c.files) {
        InputReader in{&opt, path, gzopen(path, "rb")};
        if (!in.f) stop(std::string("cannot open ") + path);
        gzbuffer(in.f, 1 << 17);
        while (!in.done) {
            in.read_more(&read);
            if (!in.error.empty()) stop(in.error);
            for (Piece& piece : read) {
                text_bytes += piece.text.size();
                filling.text_bytes += piece.text.size();
                filling.pieces.push_back(std::move(piece));
                if (filling.text_bytes >= opt.piece_bytes) add_job(file_bytes_done + in.bytes_read);
            }
            read.clear();
            while (write_oldest(false)) {}  // what is finished, without waiting
            while (pool.text_bytes >= opt.read_ahead_bytes) write_oldest(true);  // read far enough ahead
        }
        gzclose(in.f);
        file_bytes_done += in.bytes_read;
    }
    if (!filling.pieces.empty()) add_job(file_bytes_done);
    while (write_oldest(true)) {}
    pool_stop(&pool, false);
    writer.finish();
    double secs = progress.seconds();  // the work: reading, encoding, every shard written
    if (progress.tty) progress.report(file_bytes_done, writer.total, true);  // the bar at 100%
    fprintf(stderr, "%s%zu documents, %.1f MB -> %zu tokens in %.3f s (%.2f MB/s, %d threads)\n", progress.tty ? "\n" : "",
            documents, text_bytes / 1e6, writer.total, secs, text_bytes / 1e6 / secs, c.threads);
    if (bad_lines) fprintf(stderr, "skipped %zu bad lines\n", bad_lines);
    for (EncodeCache* cache : caches) encode_cache_free(cache);
    word_cache_free(words);
}

// one example of HellaSwag's JSON lines, as llm.c's dev/data/hellaswag.py renders it: GPT-2's ids of
// "ctx", and of " " + each of the 4 "endings"; "label" the right one
static EvalExample hellaswag_example(const Tokenizer* t, EncodeCache* cache, const std::string& line,
                                     const std::string& where) {
    EvalExample x;
    try {
        nlohmann::json o = nlohmann::json::parse(line);
        const std::string ctx = o.at("ctx").get<std::string>();
        x.label = o.at("label").get<int>();
        const auto& endings = o.at("endings");
        if (!endings.is_array() || endings.size() != EVAL_ENDINGS || x.label < 0 || x.label >= EVAL_ENDINGS)
            fail("%s: %d endings expected and a label among them", where.c_str(), EVAL_ENDINGS);
        tokenizer_encode(t, ctx.data(), ctx.size(), cache, &x.context);
        for (const auto& ending : endings) {
            std::string text = " " + ending.get<std::string>();
            x.endings.emplace_back();
            tokenizer_encode(t, text.data(), text.size(), cache, &x.endings.back());
        }
    } catch (const nlohmann::json::exception& e) {
        fail("%s: %s", where.c_str(), e.what());
    }
    if (x.context.empty()) fail("%s: an empty context", where.c_str());
    for (const auto& ending : x.endings)
        if (ending.empty()) fail("%s: an empty ending", where.c_str());
    return x;
}

static void hellaswag(const Tokenizer* t, const char* in, const char* out) {
    std::string text = read_whole_file(in, "HellaSwag JSON lines");
    std::vector<EvalExample> examples;
    EncodeCache* cache = encode_cache_new(t);
    size_t line_number = 0;
    for (size_t at = 0; at < text.size();) {
        size_t end = std::min(text.find('\n', at), text.size());
        std::string line = text.substr(at, end - at);
        at = end + 1;
        line_number++;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        examples.push_back(hellaswag_example(t, cache, line, std::string(in) + ":" + std::to_string(line_number)));
    }
    encode_cache_free(cache);
    if (examples.empty()) fail("%s: no examples", in);
    eval_file_write(out, examples);
    printf("wrote %s: %zu examples\n", out, examples.size());
}

int main(int argc, char** argv) {
    std::string vocab;
    int a = 1;
    if (a + 1 < argc && !strcmp(argv[a], "--vocab")) { vocab = argv[a + 1]; a += 2; }
    if (a >= argc || !strcmp(argv[a], "-h") || !strcmp(argv[a], "--help")) { usage(); return a >= argc ? 1 : 0; }
    if (vocab.empty()) vocab = exists("data/gpt2/encoder.json") ? "data/gpt2" : "../shared/data/gpt2";
    std::string command = argv[a++];
    if (command != "ids" && command != "text" && command != "shards" && command != "decoder" && command != "hellaswag") {
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
    } else if (command == "hellaswag") {
        if (a + 2 != argc) fail("usage: ./tokenize hellaswag IN.jsonl OUT.bin");
        hellaswag(&t, argv[a], argv[a + 1]);
    } else if (command == "shards") {
        ShardsCommand c = parse_shards_command(argc - a, argv + a);
        shards(&t, c);
    } else {
        if (a + 2 != argc || strcmp(argv[a], "-o")) fail("usage: ./tokenize decoder -o FILE");
        tokenizer_write_decoder(&t, argv[a + 1]);
        printf("wrote %s: %zu tokens, EOT %d\n", argv[a + 1], t.tokens.size(), t.eot);
    }
    tokenizer_free(&t);
    return 0;
}

/*
run_dir.h: a run's directory (-o) is its own: one run at a time holds it, and one run's
checkpoints are only ever continued by that run.

Two runs started into one -o would both write model_%08d.bin and complete_%08d there, and
the later one's checkpoints would replace the earlier's (or, written at the same moment, mix
them). So rank 0 takes a lock on -o/.lock before any work, and holds it for the run's life:

    run A: open -o/.lock, flock(LOCK_EX | LOCK_NB)  -> held; its pid and host written in it
    run B: the same                                  -> EWOULDBLOCK: one line on every rank,
                                                        naming the holder; exit 1
    run A ends (finished, killed, crashed)           -> the kernel releases the lock with the
                                                        process: no stale lock to clear by hand

The file descriptor is never closed: closing it would release the lock. flock works on local
disks and on NFS (where Linux maps it onto the server's byte-range locks). The lock is advisory:
it keeps out another train_gpt, not a `cp` into the directory.

The lock keeps two runs apart in time; run.json keeps them apart across restarts. With its
first checkpoint (-n) a run writes -o/run.json: what fixes its trajectory, which a checkpoint's
files alone do not say:

    {"run": "process 4242 on node7, first checkpoint 2026-11-28 06:01:07 UTC",
     "-e": "d12", "-t": 1024, "-d": 524288, "-seed": 1337, "-shuffle": 1,
     "global micro-batch": 64, "-b": 8, "dp": 8,          (dp*B sequences; B may change with dp)
     "-i": "data/fineweb10B/fineweb_train_*.bin", "shards": [[NAME, BYTES] of each, in -i's order],
     "layout": "dp 8 tp 1 pp 1 cp 1 ZeRO-1"}              (a resume may re-lay-out: not compared)

A later start into that -o:
    without -y 1                      -> refused: "-o DIR holds the run of process ...: resume it
                                         with -y 1, or give this run another -o"
    with -y 1, a recorded flag other  -> refused, naming the flag and both values: another data
      than now                           order (or model) would continue from these checkpoints
    with -y 1, a shard missing, added -> refused, naming the shard: the data position of the
      or of another size                 checkpoint (shard, sample) would point elsewhere
A directory with checkpoints but no run.json (written before run.json existed) refuses a start
without -y 1 too; with -y 1 it resumes and gains a run.json at its next checkpoint. A run
without -n writes no run.json: its -o holds model files only, nothing to resume.
The other files a run names are tried before the first step too (check_run_files): -n without -o
is refused (checkpoints written nowhere), a -tok that is not there (samples need it), a -log or
-trace path that cannot be written (the trace used to fail after its steps).
Applied in checkpoint.h: check_output_dir (the lock, then run_dir_check), model_file.h:
write_checkpoint (run_dir_record) and train_gpt.cu: main (check_run_files).
*/
#pragma once
// defines: run_dir_lock, run_identity, run_dir_record, run_dir_check, shards_problem, RUN_FILE, RunJson,
//          can_write, check_run_files
#include <fcntl.h>     // defines: open, O_RDWR, O_CREAT
#include <sys/file.h>  // defines: flock, LOCK_EX, LOCK_NB
#include <unistd.h>    // defines: ftruncate, getpid, gethostname, pwrite
#include <errno.h>     // defines: errno, EWOULDBLOCK
#include <string.h>    // defines: strerror
#include <stdio.h>     // defines: snprintf
#include <string>      // defines: std::string
#include <stdexcept>   // defines: std::runtime_error
#include <time.h>      // defines: time, gmtime_r, strftime
#include <glob.h>      // defines: glob
#include <sys/stat.h>  // defines: stat
#include <nlohmann/json.hpp>  // defines: nlohmann::ordered_json
#include "options.h"   // defines: TrainConfig
#include "comm.h"      // defines: ProcessGrid

#define RUN_FILE "run.json"
using RunJson = nlohmann::ordered_json;

// rank 0: takes -o's lock for this process's life; problem: "" when held, else the line that says why
inline void run_dir_lock(const char* dir, char* problem, size_t size) {
    std::string path = std::string(dir) + "/.lock";
    int fd = open(path.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0) { snprintf(problem, size, "-o %s: cannot open %s (%s)", dir, path.c_str(), strerror(errno)); return; }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char holder[256] = "";
        ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
        holder[n > 0 ? n : 0] = '\0';
        if (n > 0 && holder[n - 1] == '\n') holder[n - 1] = '\0';
        snprintf(problem, size, "-o %s is in use by another run (%s holds %s); give this run its own -o", dir,
                 holder[0] ? holder : "a process", path.c_str());
        close(fd);
        return;
    }
    char host[128] = "";
    gethostname(host, sizeof(host) - 1);
    char mine[256];
    int length = snprintf(mine, sizeof(mine), "process %d on %s\n", (int)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, mine, length, 0) != length) {}  // only the message's words: best effort
    // fd stays open: the lock lasts as long as this process
}

// ---------------------------------------------------------------- run.json

// what fixes this run's trajectory: the flags, the shards -i matches (name and bytes), the layout
inline RunJson run_identity(const TrainConfig& tc, const ProcessGrid& grid) {
    RunJson id;
    id["-e"] = tc.init_given ? tc.init_given : tc.init;
    id["-t"] = tc.T;
    id["-d"] = tc.total_batch_tokens;
    id["-seed"] = tc.seed;
    id["-shuffle"] = tc.shuffle;
    id["global micro-batch"] = tc.B * grid.dp;
    id["-b"] = tc.B;
    id["dp"] = grid.dp;
    id["-i"] = tc.train_pattern;
    id["shards"] = RunJson::array();
    glob_t files;
    if (glob(tc.train_pattern, 0, NULL, &files) == 0) {
        for (size_t s = 0; s < files.gl_pathc; s++) {
            struct stat st;
            const char* path = files.gl_pathv[s];
            const char* name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
            id["shards"].push_back({name, stat(path, &st) == 0 ? (long long)st.st_size : -1LL});
        }
        globfree(&files);
    }
    id["layout"] = "dp " + std::to_string(grid.dp) + " tp " + std::to_string(grid.tp) + " pp " +
                   std::to_string(grid.pp) + " cp " + std::to_string(grid.cp) + " ZeRO-" +
                   std::to_string(tc.zero_stage);
    return id;
}

// rank 0, with a checkpoint: -o/run.json, once (the run's first checkpoint, or a resumed older directory's;
// later checkpoints find it there and do nothing, not even glob the shards)
inline void run_dir_record(const char* dir, const TrainConfig& tc, const ProcessGrid& grid) {
    std::string path = std::string(dir) + "/" RUN_FILE;
    if (file_exists(path.c_str())) return;
    char host[128] = "", when[64] = "";
    gethostname(host, sizeof(host) - 1);
    time_t now = time(NULL);
    struct tm utc;
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&now, &utc));
    RunJson record;
    record["run"] = "process " + std::to_string(getpid()) + " on " + host + ", first checkpoint " + when;
    RunJson identity = run_identity(tc, grid);  // (named: items() would outlive a temporary)
    for (auto& item : identity.items()) record[item.key()] = item.value();
    std::string text = record.dump(1) + "\n";
    WholeFile w = whole_file_open(path, "run identity");
    whole_file_write(&w, text.data(), text.size());
    whole_file_commit(&w);
}

// the first difference between the shards a run read (recorded) and those -i matches now; "" when none
inline std::string shards_problem(const RunJson& was, const RunJson& now) {
    for (size_t k = 0; k < was.size() || k < now.size(); k++) {
        if (k >= now.size()) return "its shard " + was[k][0].get<std::string>() + " is not among those -i matches now";
        if (k >= was.size()) return "-i now also matches " + now[k][0].get<std::string>() + ", a shard it did not read";
        if (was[k][0] != now[k][0])
            return "its shard " + was[k][0].get<std::string>() + " is " + now[k][0].get<std::string>() + " now";
        if (was[k][1] != now[k][1])
            return "its shard " + was[k][0].get<std::string>() + " had " + was[k][1].dump() + " bytes, now " +
                   now[k][1].dump();
    }
    return "";
}

// rank 0, after the lock: may this start use dir's checkpoints (or write beside them)? problem: "" when
// it may, else the one line that says why not. newest_checkpoint: dir's newest marker's step (0: none)
inline void run_dir_check(const char* dir, const RunJson& now, bool resume, int newest_checkpoint,
                          char* problem, size_t size) {
    std::string path = std::string(dir) + "/" RUN_FILE;
    if (!file_exists(path.c_str())) {
        if (!resume && newest_checkpoint > 0)
            snprintf(problem, size, "-o %s holds another run's checkpoints (the newest: step %d): resume it with -y 1, "
                     "or give this run another -o", dir, newest_checkpoint);
        return;
    }
    RunJson was = RunJson::parse(read_whole_file(path.c_str(), " (the run's identity)"), nullptr, false);
    std::string run, why;
    try {  // (get<> and [] throw on a value of another type: a run.json edited by hand is damaged, not a crash)
        if (!was.is_object() || !was.contains("run")) throw std::runtime_error("no run");
        run = was["run"].get<std::string>();
        for (const char* flag : {"-e", "-t", "-d", "-seed", "-shuffle"})
            if (why.empty() && was.value(flag, RunJson()) != now[flag])
                why = std::string(flag) + " is " + now[flag].dump() + " here, " + was.value(flag, RunJson()).dump() +
                      " in that run";
        if (why.empty() && was.value("global micro-batch", RunJson()) != now["global micro-batch"])
            why = "-b " + now["-b"].dump() + " x dp " + now["dp"].dump() + " = " + now["global micro-batch"].dump() +
                  " sequences a global micro-batch here, " + was.value("global micro-batch", RunJson()).dump() +
                  " in that run (-b " + was.value("-b", RunJson()).dump() + " x dp " +
                  was.value("dp", RunJson()).dump() + ")";
        if (why.empty()) why = shards_problem(was.value("shards", RunJson::array()), now["shards"]);
    } catch (const std::exception&) {
        snprintf(problem, size, "-o %s: %s is damaged (not the JSON a run writes); move it away to use this -o", dir,
                 path.c_str());
        return;
    }
    if (!resume)
        snprintf(problem, size, "-o %s holds the run of %s (%s): resume it with -y 1, or give this run another -o", dir,
                 run.c_str(), RUN_FILE);
    else if (!why.empty())
        snprintf(problem, size, "-y 1: -o %s holds the run of %s, and %s: these fix its data order and model; resume "
                 "with that run's flags and shards, or give this run another -o", dir, run.c_str(), why.c_str());
}

// ---------------------------------------------------------------- the run's other files, before any work

// can `path` be written? (opened for appending, as -log is; a file this made is removed again)
inline bool can_write(const char* path) {
    bool existed = file_exists(path);
    FILE* f = fopen(path, "a");
    if (!f) return false;
    fclose(f);
    if (!existed) unlink(path);
    return true;
}

// the flags that name files, checked before the first step so that a bad one costs no training (a
// -trace path found unwritable after its steps, checkpoints written nowhere): one line on every rank
inline void check_run_files(const TrainConfig& tc, int rank) {
    char problem[1024] = "";
    if (tc.checkpoint_every > 0 && !tc.output_dir)
        snprintf(problem, sizeof(problem), "-n %d writes checkpoints into -o, and no -o was given",
                 tc.checkpoint_every);
    else if (tc.sample_every > 0 && tc.gen_tokens > 0 && !file_exists(tc.tokenizer_path) &&
             strcmp(tc.tokenizer_path, TrainConfig{}.tokenizer_path) != 0)  // the default's absence: token ids, a note
        snprintf(problem, sizeof(problem), "-tok %s: no such file (samples, -s %d, are decoded with it; `make data` "
                 "writes data/gpt2_tokenizer.bin)", tc.tokenizer_path, tc.sample_every);
    else if (rank == 0 && tc.log_path && !can_write(tc.log_path))
        snprintf(problem, sizeof(problem), "-log %s: cannot write it (%s)", tc.log_path, strerror(errno));
    else if (rank == 0 && tc.trace_path && !can_write(tc.trace_path))
        snprintf(problem, sizeof(problem), "-trace %s: cannot write it (%s)", tc.trace_path, strerror(errno));
    comm_fail_if_any(problem);
}

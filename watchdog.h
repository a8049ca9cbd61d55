/*
watchdog.h: -timeout S: a rank that makes no progress for S seconds ends the job.

A rank that dies ends an MPI job: the launcher sees it exit and kills the rest. A rank that
stops (a stuck GPU, a wedged driver, a link that fails without an error, SIGSTOP) does not: every
other rank waits in its next collective for ever. PyTorch's NCCL watchdog ends such a job after a
timeout (10 minutes by default); this is the same idea, small enough to read:

    main thread                              watchdog thread (one per rank)
    watchdog_progress("all-reduce", "dp")    every 0.2 s: seconds since the last progress > S ?
      -> the collective (may never return)       yes: one line naming what it began last and the
    watchdog_progress at each step start              step; NCCL's communicators aborted; _exit(3)

Progress is the start of every communication (comm.h: each collective, send and receive) and
of every step. So S must exceed the longest stretch a healthy rank spends between two of them:
waiting for another pipeline stage's micro-batch, another rank's checkpoint write. The default,
600 s, is PyTorch's and NCCL's. Which peer failed is not known: MPI and NCCL do not say who has
not arrived, so every waiting rank names only its own last operation. Off at 0 and in a job of
one rank (nothing to wait for). The exit code is WATCHDOG_EXIT_CODE (3), so that a supervisor
(scripts/supervise.sh) can tell a hang from a refusal (1).
Applied in train_gpt.cu: train_loop (started, stopped, a step's progress); comm.h: every operation
(comm_progress); process_grid.h: comm_init (the abort of NCCL's communicators).
*/
#pragma once
// defines: WATCHDOG_EXIT_CODE, Watchdog, watchdog, watchdog_progress, watchdog_step, watchdog_start, watchdog_stop,
//          watchdog_loop, watchdog_now_ms
#include <stdio.h>   // defines: fprintf, fflush
#include <unistd.h>  // defines: _exit
#include <atomic>    // defines: std::atomic
#include <chrono>    // defines: std::chrono
#include <string>    // defines: std::string
#include <thread>    // defines: std::thread, std::this_thread::sleep_for

#define WATCHDOG_EXIT_CODE 3

struct Watchdog {
    std::atomic<long long> last_ms{0};                    // when the last progress was made
    std::atomic<const char*> what{""}, group{""};          // what it began then
    std::atomic<int> step{0};
    int timeout_s = 0, rank = 0;
    void (*before_exit)(void* context) = nullptr;          // the GPU build: abort NCCL's communicators
    void* context = nullptr;
    std::atomic<bool> running{false};
    std::thread thread;
};
// the process's watchdog: one per rank, like fail_hook (base.h), a process-wide setting
inline Watchdog& watchdog() { static Watchdog w; return w; }

inline long long watchdog_now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
// the main thread begins `what` (a collective, a send, a step) of `group`
inline void watchdog_progress(const char* what, const char* group) {
    Watchdog& w = watchdog();
    w.what = what;
    w.group = group ? group : "";
    w.last_ms = watchdog_now_ms();
}
inline void watchdog_step(int step) {
    watchdog().step = step;
    watchdog_progress("the step", nullptr);
}

inline void watchdog_loop(Watchdog* w) {
    while (w->running) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        long long idle_ms = watchdog_now_ms() - w->last_ms;
        if (!w->running || idle_ms <= 1000LL * w->timeout_s) continue;
        std::string began = std::string(w->what.load()) +
                            (*w->group.load() ? std::string(" of the ") + w->group.load() + " group" : "");
        fprintf(stderr,
                "error: watchdog: rank %d made no progress for %lld s, since it began %s at step %d (-timeout %d): "
                "a rank has stopped or a link has failed; ending the job (exit code %d)\n",
                w->rank, idle_ms / 1000, began.c_str(), w->step.load(), w->timeout_s, WATCHDOG_EXIT_CODE);
        fflush(stderr);
        fflush(stdout);
        if (w->before_exit) w->before_exit(w->context);
        _exit(WATCHDOG_EXIT_CODE);  // the launcher sees a rank end and ends the others, the stopped one too
    }
}
// from the first step on; timeout_s 0 or a job of one rank: off
inline void watchdog_start(int timeout_s, int rank, int world) {
    Watchdog& w = watchdog();
    if (timeout_s <= 0 || world <= 1 || w.running) return;
    w.timeout_s = timeout_s;
    w.rank = rank;
    w.last_ms = watchdog_now_ms();
    w.running = true;
    w.thread = std::thread(watchdog_loop, &w);
}
inline void watchdog_stop() {
    Watchdog& w = watchdog();
    if (!w.running) return;
    w.running = false;
    w.thread.join();
}

/*
run_dir.h: a run's directory (-o) is its own: one run at a time holds it.

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
Applied in checkpoint.h: check_output_dir (after -o exists, before the first step).
*/
#pragma once
// defines: run_dir_lock
#include <fcntl.h>     // defines: open, O_RDWR, O_CREAT
#include <sys/file.h>  // defines: flock, LOCK_EX, LOCK_NB
#include <unistd.h>    // defines: ftruncate, getpid, gethostname, pwrite
#include <errno.h>     // defines: errno, EWOULDBLOCK
#include <string.h>    // defines: strerror
#include <stdio.h>     // defines: snprintf
#include <string>      // defines: std::string

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

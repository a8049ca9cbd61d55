/*
trace.h: a timeline of the first steps of a run, to look at: -trace FILE writes Chrome's
trace-event JSON, which opens in Perfetto (ui.perfetto.dev: "Open trace file") and in
chrome://tracing. One track per rank; a span per forward and backward of each
micro-batch, per pipeline send and receive, per DP/TP/embedding collective and per
optimizer step. A pipeline's bubble is the empty stretches of each track: GPipe's
two triangles, 1F1B's warmup, steady one-forward-one-backward and cooldown.

Each rank records its own spans in memory (host clock, microseconds since a barrier
that every rank passes together); when tracing stops, rank 0 gathers them and writes
the file. While tracing, a span waits for the device at its end (device_synchronize),
so a GPU span covers the work, not just its launch; untraced steps run at full speed.
Format: {"traceEvents": [{"name", "cat", "ph": "X", "ts", "dur", "pid": 0, "tid": rank}, ...]}
plus one "thread_name" record per rank naming its place in the grid.
*/
#pragma once
// defines: Trace, TraceSpan, trace_start, trace_event_json, trace_write_file, trace_now_us
#include <stdio.h>  // defines: fopen, fprintf
#include <chrono>   // defines: std::chrono::steady_clock
#include <string>   // defines: std::string
#include <vector>   // defines: std::vector
#include "base.h"   // defines: device_synchronize

struct Trace {
    bool on;
    std::chrono::steady_clock::time_point origin;
    std::string events;  // this rank's JSON objects, comma-separated
};

inline double trace_now_us(const Trace* t) {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t->origin).count();
}

inline void trace_start(Trace* t) {
    t->on = true;
    t->origin = std::chrono::steady_clock::now();
    t->events.clear();
}

// one complete event ("ph": "X") on track `tid`
inline std::string trace_event_json(const std::string& name, const char* category, double start_us, double duration_us,
                                    int tid) {
    char head[160];
    snprintf(head, sizeof(head),
             "\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": 0, \"tid\": %d}", category,
             start_us, duration_us, tid);
    return "{\"name\": \"" + name + head;
}

// a span from its construction to its end (the end of the scope); nothing when tracing is off.
// make_name() gives the span's name, and is called only while tracing: the untraced hot path
// (every collective, every pipeline action) builds no strings
struct TraceSpan {
    Trace* trace;
    std::string name;
    const char* category;
    int tid;
    double start_us;
    template <typename MakeName>
    TraceSpan(Trace* t, MakeName make_name, const char* cat, int rank)
        : trace(t && t->on ? t : nullptr), category(cat), tid(rank), start_us(0) {
        if (!trace) return;
        name = make_name();
        start_us = trace_now_us(trace);
    }
    ~TraceSpan() {
        if (!trace) return;
        device_synchronize();
        double end = trace_now_us(trace);
        if (!trace->events.empty()) trace->events += ",\n";
        trace->events += trace_event_json(name, category, start_us, end - start_us, tid);
    }
};

// rank 0, when tracing stops: every rank's spans (events[q], gathered) into one file, with a
// track per rank named track_names[q]
inline void trace_write_file(const char* path, const std::vector<std::vector<char>>& events,
                             const std::vector<std::string>& track_names) {
    FILE* f = fopen(path, "w");
    if (!f) fail("cannot write trace file %s", path);
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    for (size_t q = 0; q < track_names.size(); q++) {
        fprintf(f,
                "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %zu, \"args\": {\"name\": \"%s\"}},\n",
                q, track_names[q].c_str());
        fprintf(f,
                "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 0, \"tid\": %zu, \"args\": {\"sort_index\": "
                "%zu}},\n",
                q, q);
    }
    bool first = true;
    for (const std::vector<char>& rank_events : events) {
        if (rank_events.empty()) continue;
        fprintf(f, "%s%.*s", first ? "" : ",\n", (int)rank_events.size(), rank_events.data());
        first = false;
    }
    bool ok = fprintf(f, "\n]}\n") > 0;
    if (fclose(f) != 0 || !ok) fail("writing trace file %s failed", path);
    printf("wrote %s: open it in ui.perfetto.dev or chrome://tracing\n", path);
}

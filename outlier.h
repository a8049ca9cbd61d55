/*
outlier.h: skip an update whose loss or gradient norm is an outlier (-sl Z, -sg Z), llm.c's guard
against loss spikes (llm.c: llmc/outlier_detector.h). Each step's value x is pushed into a window of
the last W = 128 steps' values (x included), and its z-score over the window is

    z = (x - mean) / std,   mean = sum / W,   std = sqrt(sum_of_squares / W - mean^2)

with the sums kept as running totals (the oldest value subtracted as it leaves), as llm.c keeps them.
Until the window is full z is NaN (never an outlier); a window whose values are all equal gives 0.
When z > Z the step's gradients are dropped: no AdamW update, the step logged as skipped (train_gpt.cu:
train_step); the window keeps the value, as llm.c's does. A non-finite loss or norm never enters the
window (llm.c's would hold it, and every later z would be NaN): the loss scaler skips that step first.

    steps  ...  s-128 [ s-127  ...  s-1   s ]        z(s) over the bracket
                        \______ window ______/

The window is part of the run's state: a checkpoint saves it (checkpoint.h: StateHeader), so a
resumed run skips exactly the steps the unbroken run skips. Costs nothing worth counting: 2 KB of
host memory and a few additions a step.
Applied in train_gpt.cu: train_step.
*/
#pragma once
// defines: OUTLIER_WINDOW, OutlierWindow, OutlierWindows, outlier_z, outlier_step
#include <math.h>  // defines: sqrt, NAN

#define OUTLIER_WINDOW 128

struct OutlierWindow {
    double values[OUTLIER_WINDOW];
    int count, next;  // values held (up to the window); where the next one goes once it is full
    double sum, sum_of_squares;
};
struct OutlierWindows {
    OutlierWindow loss, norm;
};

// pushes x; its z-score over the last OUTLIER_WINDOW values, x included (NaN until the window is full)
inline double outlier_z(OutlierWindow* w, double x) {
    if (w->count < OUTLIER_WINDOW) {
        w->values[w->count++] = x;
        w->sum += x;
        w->sum_of_squares += x * x;
        return NAN;
    }
    double oldest = w->values[w->next];
    w->sum -= oldest;
    w->sum_of_squares -= oldest * oldest;
    w->values[w->next] = x;
    w->sum += x;
    w->sum_of_squares += x * x;
    w->next = (w->next + 1) % OUTLIER_WINDOW;
    double mean = w->sum / OUTLIER_WINDOW, variance = w->sum_of_squares / OUTLIER_WINDOW - mean * mean;
    double std = sqrt(variance);
    return std == 0.0 ? 0.0 : (x - mean) / std;
}

// a finite step's loss and norm into their windows (z-scores out); whether the step is an outlier: a
// z-score over its bound (-sl, -sg; 0: that bound off)
inline bool outlier_step(OutlierWindows* w, double loss, double norm, float loss_z_max, float norm_z_max,
                         double* z_loss, double* z_norm) {
    *z_loss = outlier_z(&w->loss, loss);
    *z_norm = outlier_z(&w->norm, norm);
    return (loss_z_max > 0.0f && *z_loss > loss_z_max) || (norm_z_max > 0.0f && *z_norm > norm_z_max);  // NaN: no
}

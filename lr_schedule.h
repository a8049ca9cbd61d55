/*
lr_schedule.h: the learning-rate schedule: linear warmup, then cosine decay.

    step < warmup:  lr * (step + 1) / warmup
    otherwise:      lr_min + (lr - lr_min) * 0.5 * (1 + cos(pi * (step - warmup) / (max_steps - warmup)))
    with lr_min = lr * final_fraction; constant lr when warmup = 0 and final_fraction = 1.

step counts from 0 here (the first optimizer step uses step 0), as in llm.c.
Applied in train_gpt.cu: train_step.
*/
#pragma once
// defines: learning_rate_at
#include <math.h>  // defines: cos, M_PI

inline float learning_rate_at(int step, float lr, int warmup, int max_steps, float final_fraction) {
    if (step < warmup) return lr * (step + 1) / warmup;
    if (max_steps <= warmup) return lr;
    double lr_min = (double)lr * final_fraction;
    double progress = (double)(step - warmup) / (max_steps - warmup);
    if (progress > 1.0) progress = 1.0;
    return (float)(lr_min + (lr - lr_min) * 0.5 * (1.0 + cos(M_PI * progress)));
}

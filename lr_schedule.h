/*
lr_schedule.h: the learning-rate schedule (-k), llm.c's four (llmc/schedulers.h), step counting
from 0 (the first optimizer step uses step 0), lr_min = lr * final_fraction (-q), W = warmup (-u),
N = max_steps (-x):

    warmup (all but constant), step < W:     lr * (step + 1) / W
    cosine    after:  lr_min + (lr - lr_min) * 0.5 * (1 + cos(pi * (step - W) / (N - W)))
    linear    after:  lr - (lr - lr_min) * (step - W) / (N - W)
    constant  always: lr (no warmup)
    wsd       warmup-stable-decay (Hagele et al. 2024): lr until the last 20% of the steps, from
              D = (int)(0.8f * N), then lr_min + (lr - lr_min) * (1 - sqrt((step - D) / (N - D)))

      lr |  ____________             cosine                 ________________ wsd
         | /            ---__                              /                \_
         |/                  --__ lr_min                  /                   \__ lr_min
         +-----------------------> step                   +------------------------> step
          W                      N                         W               D      N

The default, cosine with -q 1, is a constant learning rate after the warmup. The decay's fraction
is held in [0, 1], so a step past N (a run resumed with a smaller -x) stays at lr_min. The decay is
computed in double (llm.c: float), so every step's rate is llm.c's formula to the float's last bit.
Applied in train_gpt.cu: train_step.
*/
#pragma once
// defines: LrSchedule, lr_schedule_from_name, learning_rate_at
#include <math.h>    // defines: cos, sqrt, M_PI
#include <string.h>  // defines: strcmp

enum LrSchedule { LR_COSINE, LR_LINEAR, LR_CONSTANT, LR_WSD };

// -k's name; -1 for a name that is none of the four
inline int lr_schedule_from_name(const char* name) {
    static const char* names[] = {"cosine", "linear", "constant", "wsd"};
    for (int k = 0; k < 4; k++)
        if (strcmp(name, names[k]) == 0) return k;
    return -1;
}

inline float learning_rate_at(int step, float lr, int warmup, int max_steps, float final_fraction,
                              int schedule = LR_COSINE) {
    if (schedule == LR_CONSTANT) return lr;
    if (step < warmup) return lr * (step + 1) / warmup;  // in float, as llm.c
    double lr_min = (double)lr * final_fraction;
    int decay_from = schedule == LR_WSD ? (int)(0.8f * (float)max_steps) : warmup;  // (llm.c's float product)
    if (step < decay_from) return lr;  // wsd's stable part
    if (max_steps <= decay_from) return lr;
    double progress = (double)(step - decay_from) / (max_steps - decay_from);
    progress = progress > 1.0 ? 1.0 : progress;
    if (schedule == LR_LINEAR) return (float)(lr - (lr - lr_min) * progress);
    if (schedule == LR_WSD) return (float)(lr_min + (lr - lr_min) * (1.0 - sqrt(progress)));
    return (float)(lr_min + (lr - lr_min) * 0.5 * (1.0 + cos(M_PI * progress)));
}

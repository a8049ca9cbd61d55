/*
loss_scale.h: dynamic loss scaling, so fp16 gradients neither underflow nor overflow.

fp16 represents magnitudes from 6e-8 (subnormal) to 65504. Many gradients are
smaller than 6e-8 and would flush to zero, so the loss is multiplied by a scale S
before the backward: every gradient is S times larger, lifted into range. The
optimizer divides by S again (with the clip factor, inside AdamW's grad_scale).
When S is too large some gradient overflows to inf: the step is skipped and S is
halved. After `interval` clean steps in a row S doubles, probing for the largest
scale that fits. S starts at 2^16 and never goes below 1.

The overflow check costs nothing extra: the squared gradient norm, needed for
clipping anyway, is non-finite exactly when some gradient is, and summing it over
ranks makes every rank agree.

Modes (-ls): dynamic (default for FP16), off (default for BF16 and FP32, S = 1), or
a static value. With scaling off a non-finite step is still skipped, with a warning.
State: scale and clean-step count, two numbers to checkpoint.

A run that cannot train ends: NONFINITE_STEPS_TO_END (8) steps in a row with non-finite gradients
where scaling has no room left (off, static, or dynamic at its floor of 1) mean the parameters or the
data are broken, not the scale. Under fp16's dynamic scaling the scale first halves from 2^16 to 1,
so a streak from the start ends after 16 + 8 = 24 steps; in fp32 and bf16 after 8. A clean step
resets the count (a resume starts it at 0).

Applied in train_gpt.cu: train_step, in three places: dloss = S / tokens seeds the
backward (head_loss), loss_scaler_update(isfinite(norm^2)) decides whether the step is
applied, and zero_optimizer_step's grad_scale = clip / S unscales inside AdamW. main
builds the scaler (loss_scaler_init); model_file.h: write_checkpoint and resume_state
carry it; train_gpt.cu: end_of_step_files counts the streak (nonfinite_streak_ends_run).
*/
#pragma once
// defines: LossScaler, loss_scaler_init, loss_scaler_update, nonfinite_streak_ends_run, NONFINITE_STEPS_TO_END
#include <stdlib.h>  // defines: strtof
#include <string.h>  // defines: strcmp
#include "base.h"  // defines: fail

struct LossScaler {
    bool enabled;    // scaling on at all (dynamic or static)
    bool dynamic;    // back off and grow
    float scale;
    int interval;    // clean steps before doubling
    int clean_steps; // clean steps since the last change
};

// mode: "dynamic", "off", "default" (dynamic for fp16, else off) or a number
inline LossScaler loss_scaler_init(const char* mode, bool fp16_build, int interval) {
    LossScaler s = {false, false, 1.0f, interval, 0};
    if (strcmp(mode, "default") == 0) mode = fp16_build ? "dynamic" : "off";
    if (strcmp(mode, "dynamic") == 0) {
        s.enabled = s.dynamic = true;
        s.scale = 65536.0f;
    } else if (strcmp(mode, "off") != 0) {
        char* end = NULL;
        s.scale = strtof(mode, &end);
        if (*mode == '\0' || *end != '\0' || !(s.scale >= 1.0f))
            fail("-ls expects dynamic, off or a scale >= 1, got '%s'", mode);
        s.enabled = true;
    }
    if (interval < 1) fail("-lsi must be at least 1 (got %d)", interval);
    return s;
}

// after the finite check of a step's gradients; returns true when the step may be applied
inline bool loss_scaler_update(LossScaler* s, bool gradients_finite) {
    if (!gradients_finite) {
        if (s->dynamic) s->scale = s->scale * 0.5f < 1.0f ? 1.0f : s->scale * 0.5f;
        s->clean_steps = 0;
        return false;
    }
    if (s->dynamic && ++s->clean_steps >= s->interval) {
        s->scale *= 2.0f;
        s->clean_steps = 0;
    }
    return true;
}

#define NONFINITE_STEPS_TO_END 8
// after each step: true when the streak of non-finite steps with no scale left to lower reaches the end
inline bool nonfinite_streak_ends_run(int* streak, bool skipped_nonfinite, const LossScaler& s) {
    if (!skipped_nonfinite) *streak = 0;
    else if (!s.dynamic || s.scale <= 1.0f) ++*streak;  // a halving that still has room does not count
    return *streak >= NONFINITE_STEPS_TO_END;
}

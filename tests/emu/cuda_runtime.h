// tests/emu/cuda_runtime.h: the emulated CUDA runtime (cuda_emu.h says what it is)
#pragma once
#include "cuda_emu.h"

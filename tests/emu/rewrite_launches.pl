# tests/emu/rewrite_launches.pl: the one change the emulated CUDA build makes to a source file.
# g++ cannot parse CUDA's launch syntax, so each
#     kernel<<<grid, block[, shared bytes[, stream]]>>>(arguments)
# becomes
#     cuda_emu_launch(kernel, "kernel", __FILE__, __LINE__, grid, block[, ...])(arguments)
# (tests/emu/cuda_emu.h), on the same line; everything else is left as it is, so the kernels
# that run are the ones a reader reads. Run as: perl -p rewrite_launches.pl FILE
s/(\b[A-Za-z_]\w*(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>\s*\(/cuda_emu_launch($1, "$1", __FILE__, __LINE__, $2)(/g;

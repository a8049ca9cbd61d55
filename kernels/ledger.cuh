/*
kernels/ledger.cuh: the kernel ledger: what one launch of a kernel costs, in FLOPs and in bytes,
and the time a GPU's roofline allows a list of launches.

Each kernel header states the cost of its launchers beside them, in a function named for the
launcher with _ledger added (gelu_forward_ledger beside gelu_forward): the kernels the launcher
launches for those sizes, and per launch

    flops     the arithmetic it does (a multiply-add is 2)
    read      bytes it only reads          \
    written   bytes it only writes          } distinct bytes touched = read + written + updated
    updated   bytes it reads, then writes   /  DRAM traffic          = read + written + 2 updated
              in place (+= into a gradient, AdamW's state)

Bytes count each byte once per launch, as if every re-read hit the cache (flash attention reads
each key tile once per query tile; its L2 holds them); the emulated build measures the distinct
bytes each launch touches (CUDA_EMU_LAUNCH_REPORT, tests/emu/cuda_emu.cpp), and
tests/test_ledger.sh holds each kernel's two within 5%, launch for launch the same kernels. Pages
are its grain: a kernel that writes a column slice of every row (flash attention's dq into dqkv's
first C of 3C) touches every page of the rows, and is measured above its bytes (the test takes that
share off). The launchers
pick a kernel by size and alignment; a ledger knows only sizes, so it assumes what cudaMalloc
gives (256-byte aligned allocations), as the trainer's tensors are.

Roofline time of a launch on a GPU, from its datasheet (ledger.h's table):

    time = max(flops / (peak x f), traffic / bandwidth)
        peak  tensor-core dense bf16/fp16 for tensor-core kernels (cuBLAS's GEMMs, flash
              attention's WMMA kernels) in the bf16 and fp16 builds; fp32 on CUDA cores otherwise
        f     TENSOR_CORE_FRACTION (0.7) of the tensor-core peak: what large GEMMs reach; 1 else

A roofline ignores launch latency (2-5 us a launch on an H100), tail effects and occupancy: a
list of small kernels takes longer than it says, which is why the launches are counted too.
Applied in ledger.h (step_ledger, print_ledger) and every kernel header's *_ledger functions.
*/
#pragma once
// defines: KernelCost, LedgerRow, Ledger, ledger_add, ledger_traffic, PACK_VALUES, packs_divide, TENSOR_CORE_FRACTION
#include <string>  // defines: std::string
#include <vector>  // defines: std::vector
#include "../precision.h"  // defines: floatX

#define TENSOR_CORE_FRACTION 0.7

struct KernelCost {
    const char* kernel;  // the name the kernel has in the source (the emulated build's report names it so)
    double flops, read, written, updated;
    bool tensor_cores;
};
struct LedgerRow {
    std::string kernel;
    long long launches;
    double flops, read, written, updated;  // summed over the launches
    bool tensor_cores;
};
struct Ledger { std::vector<LedgerRow> rows; };  // in the order of first launch

// `launches` launches of a kernel costing c each
inline void ledger_add(Ledger* l, const KernelCost& c, long long launches = 1) {
    if (launches <= 0) return;
    LedgerRow* row = nullptr;
    for (LedgerRow& r : l->rows) if (r.kernel == c.kernel) row = &r;
    if (!row) { l->rows.push_back(LedgerRow{c.kernel, 0, 0, 0, 0, 0, c.tensor_cores}); row = &l->rows.back(); }
    row->launches += launches;
    row->flops += launches * c.flops;
    row->read += launches * c.read;
    row->written += launches * c.written;
    row->updated += launches * c.updated;
}
inline double ledger_traffic(const LedgerRow& r) { return r.read + r.written + 2.0 * r.updated; }

// the values a 16-byte pack holds (Packed128<floatX>::size), and whether n values are whole packs:
// the size half of the launchers' packs_fit (common.cuh)
#define PACK_VALUES ((int)(16 / sizeof(floatX)))
inline bool packs_divide(size_t n) { return n % PACK_VALUES == 0; }

#!/usr/bin/env bash
# The emulated CUDA build's own contract (tests/test_emu_contract.cu): it refuses what CUDA, cuBLAS
# and NCCL refuse and ends the run, with a line naming the bug, where a GPU would fault, hang or
# give wrong answers. A passing emulated test means something only if these fail as they should.
# Fresh device memory is NaN (0xFFA5 words) and writes into an allocation's canaries (p[n] of an
# odd size, p[-1]) end the run, so a kernel reading memory nobody wrote, or writing just out of
# range, fails here as it would corrupt results on a GPU.
# Also: the kernel launchers' test under ThreadSanitizer (no data race in any kernel), and a
# kernel without its __syncthreads reported as a data race. WMMA (tests/emu/mma.h): the products
# against float64 run with the checks above and again under ThreadSanitizer; a WMMA call that part
# of a warp reaches, lanes that disagree on the pointer, a misaligned pointer, a bad ldm and a shared
# tile loaded without its barrier each end the run with a line; an asynchronous download read before a
# wait holds NaN, and an upload's page-locked source rewritten before one ends the run; and the contract's WMMA kernels
# compile with the real nvcc and <mma.h> where nvcc is installed (NVCC=), so both compilers take them.
set -uo pipefail
E=tests/build/emu
D=$E/contract; rm -rf $D; mkdir -p $D
export OMP_NUM_THREADS=1
fails=0 skipped=0

$E/test_emu_contract > $D/checks.txt 2>&1 || fails=1
cat $D/checks.txt
timeout 120 mpirun -np 2 $E/test_emu_contract nccl > $D/nccl.txt 2>&1 || fails=1
sort -u $D/nccl.txt

must_end() {  # must_end CASE EXPECTED [LAUNCHER...]: the run ends non-zero and says EXPECTED
    local name=$1 want=$2; shift 2
    local code=0
    timeout 120 "$@" > $D/$name.txt 2>&1 || code=$?
    if [ $code -ne 0 ] && [ $code -ne 124 ] && grep -q -- "$want" $D/$name.txt; then
        echo "ok   $name: $(grep -m1 -- "$want" $D/$name.txt | cut -c1-160)"
    else
        echo "FAIL $name: exit $code, expected '$want'"; tail -n 5 $D/$name.txt; fails=1
    fi
}
# one process each: the case, then the line it must end with
while IFS='|' read -r name want <&3; do
    must_end $name "$want" $E/test_emu_contract $name
done 3<<'CASES'
host-deref|host code dereferenced device memory
out-of-range|out-of-range device memory access, 0 bytes past the end of a 256-byte allocation, in kernel write_past_end
past-odd-end|out-of-range device memory access, 0 bytes past the end of a 20-byte allocation, in kernel write_past_end launched at tests/test_emu_contract.cu:
before-start|out-of-range device memory access, 4 bytes before the start of a 256-byte allocation, in kernel write_before_start
gemm-batch-past-end|cublasGemmStridedBatchedEx A: 240 bytes at offset 0 run past the end of a 204-byte allocation
host-argument|argument 1 is the host pointer
copy-kind|the source pointer .* is host memory but the kind says device
shuffle-exited|names lane 0, which has exited
shuffle-absent|names lanes beyond the 16 this warp has
divergent-barrier|cannot go on: 16 threads wait at __syncthreads, 16 at a warp operation
caller-line|CUDA out of memory at tests/test_emu_contract.cu:
wmma-half-warp|thread (16,0,0) exited while lanes 0x0000ffff of its warp wait in mma_sync, which every lane of the warp must call
wmma-after-exit|thread (0,0,0): mma_sync while lane [0-9]* of its warp has exited: every one of a warp's 32 lanes must call it
wmma-diverging|thread (16,0,0): store_matrix_sync while lanes 0x0000ffff of its warp wait in load_matrix_sync
wmma-short-warp|load_matrix_sync in a warp of 16 lanes (blockDim 16): every one of a warp's 32 lanes must call it
wmma-lane-pointers|load_matrix_sync: lane 31 passes pointer .*, ldm 16, row-major but lane 0 passes .*, ldm 16, row-major
wmma-misaligned|kernel wmma_load .*load_matrix_sync: the pointer .* is not 256-bit (32-byte) aligned
wmma-bad-ldm|load_matrix_sync: ldm 12 is not a multiple of 8 elements
upload-rewritten|the host rewrote the 16 bytes at .*, an asynchronous upload's source, before a wait
CASES
if CUDA_EMU_REPORT_UNWRITTEN=1 $E/test_emu_contract unwritten > $D/unwritten.txt 2>&1 &&
   grep -q "cudaMemcpyDeviceToHost of 16 bytes from .*: 8 16-bit words never written since cudaMalloc (0xFFA5), the first at byte 0" $D/unwritten.txt
then echo "ok   unwritten: $(grep -m1 'never written' $D/unwritten.txt | cut -c1-160)"
else echo "FAIL unwritten: CUDA_EMU_REPORT_UNWRITTEN=1 did not report a copy of never-written memory"; cat $D/unwritten.txt; fails=1; fi
# two ranks each: the case, then the line it must end with. A mismatch is named by each rank (whichever
# line comes first: the launcher ends the other rank), so either order is accepted
A="ncclAllReduce(count 4, type ncclFloat32, op ncclSum, root 0)"
while IFS='|' read -r name want <&3; do  # (on fd 3: mpirun reads standard input)
    must_end $name "$want" mpirun -np 2 $E/test_emu_contract $name
done 3<<CASES
nccl-mismatch|rank 0 calls $A but rank 1 calls ncclAllReduce(count 8\|rank 1 calls ncclAllReduce(count 8, .*) but rank 0 calls $A
nccl-type-mismatch|rank 0 calls $A but rank 1 calls ncclAllReduce(count 4, type ncclBfloat16\|ncclBfloat16, op ncclSum, root 0) but rank 0 calls $A
nccl-op-mismatch|rank 0 calls $A but rank 1 calls ncclAllReduce(count 4, type ncclFloat32, op ncclMax\|op ncclMax, root 0) but rank 0 calls $A
nccl-overlap-allreduce|ncclAllReduce: sendbuff and recvbuff overlap without being the same
nccl-overlap-reducescatter|ncclReduceScatter: recvbuff overlaps sendbuff but is not sendbuff + rank \* recvcount
nccl-overlap-allgather|ncclAllGather: sendbuff overlaps recvbuff but is not recvbuff + rank \* sendcount
nccl-overlap-broadcast|ncclBroadcast: sendbuff and recvbuff overlap without being the same
nccl-deadlock|deadlock: rank [01]'s ncclSend to rank [01] never completes: rank [01] sends to it first too
CASES
# streams: the passes between streams hold in every order; each missing event shows in its adversarial
# order (and hides in the host's order, which is why the tests run the others)
for order in issue early late slow seed:1 seed:2 seed:3; do
    if CUDA_EMU_STREAMS=$order $E/test_emu_contract streams > $D/streams-$order.txt 2>&1 &&
       CUDA_EMU_STREAMS=$order timeout 120 mpirun -np 2 $E/test_emu_contract nccl > $D/nccl-$order.txt 2>&1
    then echo "ok   streams, CUDA_EMU_STREAMS=$order: tensors passed between streams by events, NCCL on a stream of its own"
    else echo "FAIL streams, CUDA_EMU_STREAMS=$order"; tail -n 5 $D/streams-$order.txt $D/nccl-$order.txt; fails=1; fi
done
must_end stream-reader-early "checks FAILED" env CUDA_EMU_STREAMS=early $E/test_emu_contract stream-reader-early
must_end stream-writer-late "checks FAILED" env CUDA_EMU_STREAMS=late $E/test_emu_contract stream-writer-late
must_end nccl-cleared-slow "the add landed between the all-reduce's read and the clear" env CUDA_EMU_STREAMS=slow timeout 120 mpirun -np 2 $E/test_emu_contract nccl-cleared-slow
for bug in stream-reader-early stream-writer-late; do
    if $E/test_emu_contract $bug > $D/$bug-issue.txt 2>&1; then echo "ok   $bug passes in the host's order: only the adversarial order shows it"
    else echo "FAIL $bug fails in the host's order too: the case does not test what it says"; fails=1; fi
done
must_end streams-order "CUDA_EMU_STREAMS=sideways: expected issue, early, late, slow or seed:N" env CUDA_EMU_STREAMS=sideways $E/test_emu_contract streams
must_end nccl-two-streams "ncclAllReduce starts while another operation of its communicator is still running" mpirun -np 2 $E/test_emu_contract nccl-two-streams
must_end nccl-one-gpu "Duplicate GPU detected" env CUDA_EMU_DEVICES=1 mpirun -np 2 $E/test_emu_contract nccl
must_end race "ThreadSanitizer: data race" env TSAN_OPTIONS=halt_on_error=1 $E/tsan/test_emu_contract race
if TSAN_OPTIONS=halt_on_error=1 $E/tsan/test_emu_contract no-race > $D/no-race.txt 2>&1; then
    echo "ok   no-race: the same kernel with its __syncthreads runs clean under ThreadSanitizer"
else echo "FAIL no-race"; tail -n 20 $D/no-race.txt; fails=1; fi
must_end wmma-race "ThreadSanitizer: data race" env TSAN_OPTIONS=halt_on_error=1 $E/tsan/test_emu_contract wmma-race
if TSAN_OPTIONS=halt_on_error=1 $E/tsan/test_emu_contract wmma > $D/wmma-tsan.txt 2>&1; then
    echo "ok   wmma under ThreadSanitizer: $(grep -c '^ok' $D/wmma-tsan.txt) WMMA checks pass, no data race"
else echo "FAIL wmma under ThreadSanitizer"; grep -m3 -A12 "WARNING\|FAIL" $D/wmma-tsan.txt; fails=1; fi
# the WMMA kernels, cut from the contract, instantiated for every input type and layout, through the real nvcc
NVCC=${NVCC:-$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)}
if [ -n "$NVCC" ]; then
    {
        printf '#include <mma.h>\n#include <type_traits>\n'
        sed -n '/(nvcc begin)/,/(nvcc end)/p' tests/test_emu_contract.cu
        for t in "__nv_bfloat16 __nv_bfloat16 16" "__half __half 16" "wmma::precision::tf32 float 8"; do
            set -- $t
            for la in row_major col_major; do for lb in row_major col_major; do
                echo "template __global__ void wmma_tile<$1, $2, $3, wmma::$la, wmma::$lb>(float*, const $2*, const $2*, const float*, int, int, int, int);"
            done; done
        done
    } > $D/wmma_nvcc.cu
    if "$NVCC" -std=c++17 -arch=sm_90 -c $D/wmma_nvcc.cu -o $D/wmma_nvcc.o > $D/wmma_nvcc.txt 2>&1; then
        echo "ok   nvcc-wmma: the contract's WMMA kernels (bf16, fp16, tf32, every layout) compile with nvcc -arch=sm_90 and CUDA's <mma.h>"
    else echo "FAIL nvcc-wmma: nvcc cannot compile the contract's WMMA kernels"; head -n 20 $D/wmma_nvcc.txt; fails=1; fi
elif [ -n "${CI:-}" ]; then echo "FAIL nvcc-wmma: no nvcc under CI, which installs the CUDA toolkit"; fails=1
else echo "SKIP nvcc-wmma: no nvcc here (NVCC=), the WMMA kernels were compiled by g++ only"; skipped=1; fi
if TSAN_OPTIONS=halt_on_error=1 $E/tsan/test_emu_kernels_bf16 > $D/kernels-tsan.txt 2>&1; then
    echo "ok   every kernel launcher (bf16) under ThreadSanitizer: no data race, $(grep -c '^ok' $D/kernels-tsan.txt) checks passed"
else echo "FAIL kernels under ThreadSanitizer"; grep -m3 -A12 "WARNING" $D/kernels-tsan.txt; fails=1; fi
[ $fails -eq 0 ] || exit 1
# a case not run is a skip, which run_tests.sh counts (and CI refuses), not a pass
[ $skipped -eq 0 ] || { echo "skipped: nvcc-wmma (no nvcc here); every other case passed"; exit 77; }

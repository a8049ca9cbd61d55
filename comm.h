/*
comm.h: the processes of a run and how they talk.

This stage has one process group, MPI's world; the trainer checks that it holds a
single rank. The process grid (dp x tp x pp), the per-group communicators and the
collectives (NCCL on device buffers, MPI on host buffers) are the next layer.
The local rank, which picks the GPU, is read from the launcher's environment:
MPICH (MPI_LOCALRANKID), OpenMPI (OMPI_COMM_WORLD_LOCAL_RANK), Slurm (SLURM_LOCALID).
*/
#pragma once
// defines: Comm, comm_init, comm_finalize
#include <mpi.h>     // defines: MPI_Init, MPI_Comm_rank, MPI_Comm_size
#include <stdlib.h>  // defines: getenv, atoi

struct Comm {
    int rank, world, local_rank;
};

inline int comm_local_rank_from_env() {
    const char* names[] = {"MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
    for (const char* name : names)
        if (const char* v = getenv(name)) return atoi(v);
    return 0;
}

inline Comm comm_init(int* argc, char*** argv) {
    MPI_Init(argc, argv);
    Comm c;
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c.world);
    c.local_rank = comm_local_rank_from_env();
    return c;
}

inline void comm_finalize() { MPI_Finalize(); }

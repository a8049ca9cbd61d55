/*
tests/test_comm.cpp: the process grid and the collectives of comm.h, under mpirun.

For every (tp, pp) that divides the world it builds the grid and checks docs/design.md's rank
order, that each group holds exactly the ranks it should (by summing rank ids over the
group), and every collective against values computed from the rank numbers alone:
all-reduce (sum, average and max), reduce-scatter, all-gather (also in place), broadcast, send/recv,
scalar all-reduce, the host gather to a group's rank 0, the minimum over the world and the ledger's
ring-cost bytes. Large messages go in chunks (MPI counts are int): the DP group's chunk is set to
12 bytes here, so every chunked path runs. Prints "N passed, M failed" on rank 0.
*/
#include <stdio.h>
#include <vector>
#include "../comm.h"

static int checks = 0, failures = 0;

// the mean over the group: the sum, then a division. Only this test averages: the trainer
// scales its loss by 1/tokens before the backward, so it only ever sums over ranks
static void all_reduce_average(Comm* c, float* buf, size_t n) {
    comm_all_reduce_sum(c, buf, n);
    for (size_t i = 0; i < n; i++) buf[i] /= c->size;
}

#define EXPECT(cond) do { checks++; if (!(cond)) { failures++; fprintf(stderr, "[rank %d] failed: %s (line %d)\n", rank, #cond, __LINE__); } } while (0)

int main(int argc, char** argv) {
    int world, rank, local_rank;
    comm_start(&argc, &argv, &world, &rank, &local_rank);
    EXPECT(local_rank >= 0 && local_rank < world);
    for (int pp = 1; pp <= world; pp++) {
        for (int tp = 1; tp * pp <= world; tp++) {
            if (world % (tp * pp)) continue;
            Collectives c;
            comm_init(&c, world, rank, local_rank, tp, pp, false);
            const ProcessGrid& g = c.grid;
            int dp = world / (tp * pp);
            EXPECT(g.dp == dp);
            EXPECT(rank == (g.pp_rank * dp + g.dp_rank) * tp + g.tp_rank);  // docs/design.md's order
            EXPECT(c.tp.size == tp);  // one EXPECT a group, so a failure names the group
            EXPECT(c.replicas.size == dp);
            EXPECT(c.pp.size == pp);
            EXPECT(c.tp.rank == g.tp_rank);
            EXPECT(c.replicas.rank == g.dp_rank);
            EXPECT(c.pp.rank == g.pp_rank);
            // group membership: the sum of world ranks over each group, computed from the formula
            double sum_tp = rank, sum_dp = rank, sum_pp = rank;
            comm_all_reduce_scalars(&c.tp, &sum_tp, 1);
            comm_all_reduce_scalars(&c.replicas, &sum_dp, 1);
            comm_all_reduce_scalars(&c.pp, &sum_pp, 1);
            double want_tp = 0, want_dp = 0, want_pp = 0;
            for (int t = 0; t < tp; t++) want_tp += (g.pp_rank * dp + g.dp_rank) * tp + t;
            for (int d = 0; d < dp; d++) want_dp += (g.pp_rank * dp + d) * tp + g.tp_rank;
            for (int p = 0; p < pp; p++) want_pp += (p * dp + g.dp_rank) * tp + g.tp_rank;
            EXPECT(sum_tp == want_tp);
            EXPECT(sum_dp == want_dp);
            EXPECT(sum_pp == want_pp);
            // the embedding group: the first and last stage of this rank's pipeline, none between
            bool end_stage = g.pp_rank == 0 || g.pp_rank == pp - 1;
            EXPECT(c.embedding.size == (end_stage ? (pp == 1 ? 1 : 2) : 0));
            if (end_stage) {
                double sum_emb = rank;
                comm_all_reduce_scalars(&c.embedding, &sum_emb, 1);
                double want_emb = pp == 1 ? rank : (g.dp_rank * tp + g.tp_rank) * 2 + (pp - 1) * dp * tp;
                EXPECT(sum_emb == want_emb);
            }

            // collectives over the DP group, element values from (group rank, index); messages in
            // chunks of 12 bytes, so the chunked paths (MPI's int counts) run on small buffers
            Comm* d = &c.replicas;
            d->chunk_bytes = 12;
            int p = d->size, r = d->rank;
            const size_t n = 6;  // elements per rank block
            std::vector<float> x(n * p);
            for (size_t i = 0; i < x.size(); i++) x[i] = (float)(r + 1) * (i + 1);
            std::vector<float> reduced = x;
            comm_all_reduce_sum(d, reduced.data(), reduced.size());
            float ranks_sum = p * (p + 1) / 2.0f;
            for (size_t i = 0; i < x.size(); i++) EXPECT(reduced[i] == ranks_sum * (i + 1));
            std::vector<float> averaged = x;
            all_reduce_average(d, averaged.data(), averaged.size());
            for (size_t i = 0; i < x.size(); i++) EXPECT(fabsf(averaged[i] - ranks_sum * (i + 1) / p) <= 1e-6f * ranks_sum * (i + 1));
            std::vector<float> maxed(n);  // element i peaks on group rank i % p
            for (size_t i = 0; i < n; i++) maxed[i] = (int)(i % p) == r ? 10.0f + i : -(float)r;
            comm_all_reduce_max(d, maxed.data(), n);
            for (size_t i = 0; i < n; i++) EXPECT(maxed[i] == 10.0f + i);
            std::vector<int> mine(r + 1, 3 * r);  // rank r sends r + 1 values
            std::vector<std::vector<int>> all = comm_gatherv_to_root(d, mine);
            EXPECT(all.size() == (r == 0 ? (size_t)p : 0));
            for (int q = 0; r == 0 && q < p; q++) EXPECT(all[q] == std::vector<int>(q + 1, 3 * q));
            EXPECT(comm_min_over_world(rank + 5) == 5);
            std::vector<float> block(n);
            comm_reduce_scatter_sum(d, x.data(), block.data(), n);
            for (size_t i = 0; i < n; i++) EXPECT(block[i] == ranks_sum * (r * n + i + 1));
            std::vector<float> gathered(n * p);
            for (size_t i = 0; i < n; i++) block[i] = (float)(100 * r + i);
            comm_all_gather(d, block.data(), gathered.data(), n);
            for (int q = 0; q < p; q++) for (size_t i = 0; i < n; i++) EXPECT(gathered[q * n + i] == 100 * q + i);
            std::vector<float> in_place(n * p, -1.0f);
            for (size_t i = 0; i < n; i++) in_place[r * n + i] = (float)(7 * r + i);
            comm_all_gather(d, in_place.data() + r * n, in_place.data(), n);
            for (int q = 0; q < p; q++) for (size_t i = 0; i < n; i++) EXPECT(in_place[q * n + i] == 7 * q + i);
            std::vector<float> b(n, (float)r);
            comm_broadcast(d, b.data(), n, p - 1);
            for (size_t i = 0; i < n; i++) EXPECT(b[i] == p - 1);
            if (p > 1) {  // paired: every rank sends to the next and receives from the previous at once
                std::vector<float> out(n, (float)r), got(n, -1.0f);
                comm_send_recv(d, out.data(), (r + 1) % p, got.data(), (r + p - 1) % p, n);
                for (size_t i = 0; i < n; i++) EXPECT(got[i] == (r + p - 1) % p);
            }
            if (p > 1) {  // a ring of sends: each rank sends to the next and receives from the previous
                std::vector<float> out(n, (float)r), got(n, -1.0f);
                if (r % 2 == 0) { comm_send(d, out.data(), n, (r + 1) % p); comm_recv(d, got.data(), n, (r + p - 1) % p); }
                else { comm_recv(d, got.data(), n, (r + p - 1) % p); comm_send(d, out.data(), n, (r + 1) % p); }
                for (size_t i = 0; i < n; i++) EXPECT(got[i] == (r + p - 1) % p);
            }
            // the ledger: ring cost of each call, bytes = 4 * elements
            unsigned long long S = 4ull * n * p;
            EXPECT(d->bytes[COMM_ALL_REDUCE] == 2 * 2 * (S * (p - 1) / p) + 2 * (4ull * n * (p - 1) / p));  // sum, average; max
            EXPECT(d->bytes[COMM_REDUCE_SCATTER] == S * (p - 1) / p);
            EXPECT(d->bytes[COMM_ALL_GATHER] == 2 * (S * (p - 1) / p));
            EXPECT(d->bytes[COMM_BROADCAST] == (p > 1 && r == p - 1 ? 4ull * n : 0));  // a group of one sends nothing
            EXPECT(d->bytes[COMM_SEND] == (p > 1 ? 2 * 4ull * n : 0));  // the paired exchange and the ring
            comm_barrier(&c.world);
            MPI_Comm_free(&c.replicas.mpi); MPI_Comm_free(&c.tp.mpi); MPI_Comm_free(&c.pp.mpi);
            if (c.embedding.mpi != MPI_COMM_NULL) MPI_Comm_free(&c.embedding.mpi);
            MPI_Op_free(&c.world.sum_floatX);
        }
    }
    int totals[2] = {checks, failures};
    MPI_Allreduce(MPI_IN_PLACE, totals, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("world %d: %d passed, %d failed\n", world, totals[0] - totals[1], totals[1]);
    MPI_Finalize();
    return totals[1] != 0;
}

/*
tests/test_run_schedule.cpp: pipeline_run.h's executor, run_schedule, over MPI (mpirun -np p), with
a stage whose math is known, for every schedule: GPipe, 1F1B, ZB-H1 and interleaved 1F1B with
V = 2 and 3 (a ring of stages, the paired shifts, the second gradient buffer).

The model is a chain of p*V affine maps, virtual stage u = v*p + s being chunk v of stage s:
    y = a(u, k) x + u + 1,   a(u, k) = 1 + (u + k) % 3   (elementwise, on n values)
on micro-batch k, whose input is x0(k)_i = k + i / 8. The last virtual stage's forward returns
sum(y), the loss, so its output gradient is 1 and chunk u's input gradient is the product of a
over the chunks after it, and the loss is computed here in double from the formula alone. Every
forward checks that its input is the composition so far, every backward that the gradient
buffer holds its micro-batch's output gradient, the first chunk that its input gradient is the
product of all a's, and the summed loss equals the formula: a message sent to the wrong stage,
in the wrong order or into the wrong buffer changes one of them. Prints "N passed, M failed" on
rank 0.
*/
#include <stdio.h>
#include <math.h>
#include <vector>
#include "../pipeline_run.h"

static int checks = 0, failures = 0;
#define EXPECT(cond, ...) do { checks++; if (!(cond)) { failures++; fprintf(stderr, "[stage %d] failed: %s (line %d): ", s, #cond, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

static double slope(int u, int k) { return 1 + (u + k) % 3; }
static double input_value(int k, int i) { return k + i / 8.0; }
// the input of virtual stage u on micro-batch k: the maps before it applied to x0(k)
static double expected_input(int u, int k, int i) {
    double x = input_value(k, i);
    for (int w = 0; w < u; w++) x = slope(w, k) * x + w + 1;
    return x;
}
// the gradient of the loss with respect to virtual stage u's output: the slopes after it
static double expected_output_gradient(int u, int k, int chunks) {
    double g = 1.0;
    for (int w = u + 1; w < chunks; w++) g *= slope(w, k);
    return g;
}

static void run(Comm* pp, ScheduleKind kind, int m, int V, PipelineLinks* links) {
    int s = pp->rank, p = pp->size, chunks = p * V;
    const size_t n = 6;
    // activations of every (chunk, micro-batch): no slot reuse here, that is the trainer's business
    std::vector<std::vector<floatX>> in(V * m, std::vector<floatX>(n)), out(V * m, std::vector<floatX>(n));
    std::vector<floatX> gradient(n), received(n);
    std::vector<int> weights_done(V * m, 0), inputs_done(V * m, 0), slots(V * m, -2);
    PipelineStage stage;
    stage.input = [&](int v, int k) { return in[v * m + k].data(); };
    stage.output = [&](int v, int k) { return out[v * m + k].data(); };
    stage.forward = [&](int v, int k) {
        int u = v * p + s;
        double loss = 0.0;
        for (size_t i = 0; i < n; i++) {
            if (u == 0) in[v * m + k][i] = from_float((float)input_value(k, i));
            double x = to_float(in[v * m + k][i]);
            EXPECT(x == expected_input(u, k, i), "forward of chunk %d, micro-batch %d: input %g, expected %g", v, k, x, expected_input(u, k, i));
            out[v * m + k][i] = from_float((float)(slope(u, k) * x + u + 1));
            loss += slope(u, k) * x + u + 1;
        }
        return u == chunks - 1 ? loss : 0.0;
    };
    auto backward_input = [&](int v, int k, int slot) {
        int u = v * p + s;
        slots[v * m + k] = slot;
        for (size_t i = 0; i < n; i++) {
            double dy = u == chunks - 1 ? 1.0 : to_float(gradient[i]);
            EXPECT(dy == expected_output_gradient(u, k, chunks), "backward of chunk %d, micro-batch %d: gradient %g", v, k, dy);
            gradient[i] = from_float((float)(slope(u, k) * dy));
            if (u == 0) EXPECT(to_float(gradient[i]) == expected_output_gradient(-1, k, chunks), "input gradient of micro-batch %d", k);
        }
        inputs_done[v * m + k]++;
    };
    stage.backward_input = backward_input;
    stage.backward_weight = [&](int v, int k, int slot) {
        EXPECT(inputs_done[v * m + k] == 1, "W of chunk %d, micro-batch %d before its B", v, k);
        EXPECT(slot >= 0 && slot == slots[v * m + k], "W of micro-batch %d in slot %d, its B in %d", k, slot, slots[v * m + k]);
        weights_done[v * m + k]++;
    };
    stage.backward = [&](int v, int k) { backward_input(v, k, -1); weights_done[v * m + k]++; };
    stage.gradient = gradient.data();
    stage.received_gradient = received.data();
    stage.message_elements = n;
    ScheduleTiming timing;
    double loss = run_schedule(stage, pipeline_schedule(kind, s, p, m, V), pp, &timing, links);
    comm_all_reduce_scalars(pp, &loss, 1);
    double want = 0.0;
    for (int k = 0; k < m; k++)
        for (size_t i = 0; i < n; i++) want += expected_input(chunks, k, i);
    EXPECT(fabs(loss - want) <= 1e-6 * want, "schedule %d, m %d, V %d: loss %.9g, expected %.9g", (int)kind, m, V, loss, want);
    for (int id = 0; id < V * m; id++) EXPECT(inputs_done[id] == 1 && weights_done[id] == 1, "chunk %d, micro-batch %d", id / m, id % m);
}

int main(int argc, char** argv) {
    int world, rank, local_rank;
    comm_start(&argc, &argv, &world, &rank, &local_rank);
    Collectives c;
    comm_init(&c, world, rank, local_rank, 1, world, false);  // every rank a stage: dp = tp = 1
    int s = c.pp.rank;
    for (bool overlap : {false, true}) {  // the transfers blocking, and posted (pipeline_links.h)
        PipelineLinks links;
        pipeline_links_init(&links, overlap, &c.pp, true);
        EXPECT(links.on == (overlap && world > 1), "links on %d with overlap %d", (int)links.on, (int)overlap);
        for (int m : {world, 2 * world}) {
            for (ScheduleKind kind : {SCHEDULE_GPIPE, SCHEDULE_1F1B, SCHEDULE_ZB}) run(&c.pp, kind, m, 1, &links);
            for (int V : {2, 3}) run(&c.pp, SCHEDULE_INTERLEAVED, m, V, &links);
        }
        pipeline_links_free(&links);
    }
    double totals[2] = {(double)checks, (double)failures};
    comm_all_reduce_scalars(&c.world, totals, 2);
    EXPECT(checks > 0, "no checks");
    if (rank == 0) printf("%d passed, %d failed\n", (int)(totals[0] - totals[1]), (int)totals[1]);
    int failed = totals[1] > 0;
    comm_finalize(&c);
    return failed;
}

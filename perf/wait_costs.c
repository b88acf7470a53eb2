/* What waiting for one small message costs in the MPI library itself, with no Python: the
 * ways a collective of 2 ranks can move 8 bytes and know it is done, each call timed alone
 * from a barrier (as OSU's benchmarks and `hpccoll bench` time them), the slowest rank's
 * time per call, median and p10/p90 over the calls.  perf/percall.md reads it.
 *
 *   mpicc -O2 perf/wait_costs.c -o /tmp/wait_costs && mpiexec -n 2 /tmp/wait_costs [calls]
 *
 * The variants: the library's blocking MPI_Bcast; its non-blocking MPI_Ibcast completed by
 * MPI_Wait, or polled with MPI_Testsome together with the notice receive below (how
 * hpccoll's compiled native executor waits); its persistent MPI_Bcast_init started and
 * waited for, or polled so; the same four for MPI_Allreduce of 8 bytes (2 ints, MPI_SUM);
 * a point-to-point message
 * (what hpccoll's schedule of a 2-rank bcast posts) polled with MPI_Testsome to completion;
 * the same followed by an MPI_Iprobe for a revocation notice on another communicator (how
 * hpccoll's compiled executors looked for one until 2026-11-29); and the same with the
 * notice's receive posted beforehand (persistent, started once) and polled in the same
 * MPI_Testsome as the message (how they look now). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { BCAST, IBCAST, IBCAST_POLLED, PERSISTENT, PERSISTENT_POLLED, ALLREDUCE, IALLREDUCE,
       IALLREDUCE_POLLED, PERSISTENT_ALLREDUCE, PERSISTENT_ALLREDUCE_POLLED, TESTSOME, PROBED,
       LISTENING, VARIANTS };
static const char *NAMES[VARIANTS] = {
    "MPI_Bcast", "MPI_Ibcast + MPI_Wait", "MPI_Ibcast + MPI_Testsome with the notice",
    "MPI_Bcast_init: MPI_Start + MPI_Wait", "  MPI_Start + MPI_Testsome with the notice",
    "MPI_Allreduce", "MPI_Iallreduce + MPI_Wait", "MPI_Iallreduce + MPI_Testsome w. notice",
    "MPI_Allreduce_init: MPI_Start + MPI_Wait", "  MPI_Start + MPI_Testsome with the notice",
    "Isend/Irecv + MPI_Testsome", "  then MPI_Iprobe for a notice",
    "  notice receive in the same MPI_Testsome"};
enum { TAG = 5, NOTICE_TAG = 7 };

static int ascending(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Poll pair[0] (with pair[1], the started notice receive, where count is 2) to completion
 * with MPI_Testsome, as hpccoll's compiled executors do. */
static void poll(int count, MPI_Request pair[2]) {
    int done, flag, indices[2];
    MPI_Status statuses[2];
    for (done = 0; !done;) {
        MPI_Testsome(count, pair, &flag, indices, statuses);
        for (int j = 0; j < flag; j++)
            done |= indices[j] == 0;
    }
}

/* One call of `variant` moving `buf` (8 bytes) from rank 0 to rank 1, or reducing it into
 * `sum`; pair[0] is the call's request, pair[1] the started notice receive; persistent[0]
 * the MPI_Bcast_init request, persistent[1] the MPI_Allreduce_init one. */
static void call(int variant, char *buf, char *sum, int rank, MPI_Comm notices,
                 MPI_Request persistent[2], MPI_Request pair[2]) {
    int flag;
    switch (variant) {
    case BCAST:
        MPI_Bcast(buf, 8, MPI_BYTE, 0, MPI_COMM_WORLD);
        return;
    case IBCAST:
    case IBCAST_POLLED:
        MPI_Ibcast(buf, 8, MPI_BYTE, 0, MPI_COMM_WORLD, &pair[0]);
        break;
    case PERSISTENT:
    case PERSISTENT_POLLED:
    case PERSISTENT_ALLREDUCE:
    case PERSISTENT_ALLREDUCE_POLLED:
        pair[0] = persistent[variant >= PERSISTENT_ALLREDUCE];
        MPI_Start(&pair[0]);
        break;
    case ALLREDUCE:
        MPI_Allreduce(buf, sum, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        return;
    case IALLREDUCE:
    case IALLREDUCE_POLLED:
        MPI_Iallreduce(buf, sum, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &pair[0]);
        break;
    default:
        if (rank == 0)
            MPI_Isend(buf, 8, MPI_BYTE, 1, TAG, MPI_COMM_WORLD, &pair[0]);
        else
            MPI_Irecv(buf, 8, MPI_BYTE, 0, TAG, MPI_COMM_WORLD, &pair[0]);
    }
    if (variant == IBCAST || variant == PERSISTENT || variant == IALLREDUCE ||
            variant == PERSISTENT_ALLREDUCE)
        MPI_Wait(&pair[0], MPI_STATUS_IGNORE);
    else
        poll(variant == TESTSOME || variant == PROBED ? 1 : 2, pair);
    if (variant == PERSISTENT || variant == PERSISTENT_POLLED)
        persistent[0] = pair[0];
    else if (variant == PERSISTENT_ALLREDUCE || variant == PERSISTENT_ALLREDUCE_POLLED)
        persistent[1] = pair[0];
    if (variant == PROBED)
        MPI_Iprobe(MPI_ANY_SOURCE, NOTICE_TAG, notices, &flag, MPI_STATUS_IGNORE);
}

int main(int argc, char **argv) {
    int rank, size, calls = argc > 1 ? atoi(argv[1]) : 20000;
    char buf[8] = {0}, sum[8], notice[8];
    double *mine, *slowest;
    MPI_Comm notices;
    MPI_Request persistent[2], pair[2];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "run on 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &notices);
    MPI_Bcast_init(buf, 8, MPI_BYTE, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &persistent[0]);
    MPI_Allreduce_init(buf, sum, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL,
                       &persistent[1]);
    MPI_Recv_init(notice, 8, MPI_BYTE, MPI_ANY_SOURCE, NOTICE_TAG, notices, &pair[1]);
    MPI_Start(&pair[1]);
    mine = malloc(calls * sizeof *mine);
    slowest = malloc(calls * sizeof *slowest);
    if (rank == 0)
        printf("%-44s %9s %9s %9s\n", "2 ranks, 8 B, us per call", "median", "p10", "p90");
    for (int round = 0; round < 3; round++) {
        for (int variant = 0; variant < VARIANTS; variant++) {
            for (int i = 0; i < calls; i++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double start = MPI_Wtime();
                call(variant, buf, sum, rank, notices, persistent, pair);
                mine[i] = MPI_Wtime() - start;
            }
            MPI_Allreduce(mine, slowest, calls, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            qsort(slowest, calls, sizeof *slowest, ascending);
            if (rank == 0)
                printf("%-44s %9.3f %9.3f %9.3f\n", NAMES[variant], 1e6 * slowest[calls / 2],
                       1e6 * slowest[calls / 10], 1e6 * slowest[9 * calls / 10]);
        }
    }
    MPI_Cancel(&pair[1]);
    MPI_Wait(&pair[1], MPI_STATUS_IGNORE);
    MPI_Request_free(&pair[1]);
    MPI_Request_free(&persistent[0]);
    MPI_Request_free(&persistent[1]);
    MPI_Comm_free(&notices);
    free(mine);
    free(slowest);
    MPI_Finalize();
    return 0;
}

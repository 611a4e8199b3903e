/* The traced program, run as `ddlrun -n 2 prog COUNT`: each rank allreduces COUNT floats twice
 * (sum); rank 0 traces the second call into $PATH_TRACE_OUT (tracer.c). Both results are checked,
 * so a trace is of a call that worked.
 * The first call is a warm-up: it makes the communicator's one-time state (shared segments,
 * peers' addresses, the logged choice of way), which the second call, the one measured, reuses
 * as every later call of an application would. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ddl/ddl.h"

void path_trace_begin(void);
void path_trace_end(const char *path);

static int check(const float *result, size_t count, int nranks, int rank, const char *what) {
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int k = 0; k < nranks; ++k) want += (float)(k + 1) + (float)(i % 7);
    if (result[i] != want) {
      fprintf(stderr, "rank %d, %s call: result[%zu] = %g, want %g\n", rank, what, i, result[i],
              want);
      return 1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  size_t count = argc > 1 ? strtoull(argv[1], NULL, 0) : 1024;
  ddl_comm_t comm;
  if (ddl_comm_init_from_env(&comm) != DDL_SUCCESS) {
    fprintf(stderr, "ddl_comm_init_from_env: %s\n", ddl_comm_last_error(NULL));
    return 1;
  }
  int rank, nranks;
  ddl_comm_rank(comm, &rank);
  ddl_comm_size(comm, &nranks);
  float *send = malloc(count * sizeof *send), *recv = malloc(count * sizeof *recv);
  for (size_t i = 0; i < count; ++i) send[i] = (float)(rank + 1) + (float)(i % 7);

  ddl_result_t rc = ddl_allreduce(send, recv, count, DDL_FLOAT32, DDL_SUM, comm);
  if (rc != DDL_SUCCESS || check(recv, count, nranks, rank, "warm-up")) {
    fprintf(stderr, "warm-up allreduce: %s\n", ddl_comm_last_error(comm));
    return 1;
  }
  for (size_t i = 0; i < count; ++i) recv[i] = 0;

  /* Rank 0 arrives last ($PATH_TRACE_DELAY_MS, 300 by default): whatever its peer sends or
   * publishes for this call is there already, so rank 0 never waits for it (no poll loop on the
   * path) and the traced path is the same in every run, whatever the timing. */
  const char *delay = getenv("PATH_TRACE_DELAY_MS");
  if (rank == 0) usleep(1000u * (unsigned)(delay ? atoi(delay) : 300));
  const char *trace_path = getenv("PATH_TRACE_OUT");
  int traced = trace_path && rank == 0;
  if (traced) path_trace_begin();
  rc = ddl_allreduce(send, recv, count, DDL_FLOAT32, DDL_SUM, comm);
  if (traced) path_trace_end(trace_path);
  if (rc != DDL_SUCCESS || check(recv, count, nranks, rank, "traced")) {
    fprintf(stderr, "traced allreduce: %s\n", ddl_comm_last_error(comm));
    return 1;
  }

  ddl_comm_destroy(comm);
  free(send);
  free(recv);
  if (rank == 0) printf("ok: %zu floats on %d ranks\n", count, nranks);
  return 0;
}

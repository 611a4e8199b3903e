/* A program as a user writes it: the installed header and library, one rank. */
#include <ddl/ddl.h>
#include <stdio.h>

int main(void) {
  ddl_comm_t comm;
  if (ddl_comm_init(&comm, 1, 0, NULL, NULL) != DDL_SUCCESS) {
    fprintf(stderr, "init: %s\n", ddl_comm_last_error(NULL));
    return 1;
  }
  float data[3] = {1, 2, 3};
  ddl_result_t r = ddl_allreduce(data, data, 3, DDL_FLOAT32, DDL_SUM, comm);
  ddl_comm_destroy(comm);
  if (r != DDL_SUCCESS || data[2] != 3.0f) return 1;
  printf("consumer ok\n");
  return 0;
}

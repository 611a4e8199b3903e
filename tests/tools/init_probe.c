/* A user's program cut down to ddl_comm_init_from_env: exit 0 when the communicator formed,
 * else 1 with ddl's error on stderr. test_missing_rank starts it as one rank of a job whose
 * other ranks never come. */
#include <ddl/ddl.h>
#include <stdio.h>

int main(void) {
  ddl_comm_t comm;
  ddl_result_t r = ddl_comm_init_from_env(&comm);
  if (r != DDL_SUCCESS) {
    fprintf(stderr, "init_probe: %s: %s\n", ddl_result_string(r), ddl_comm_last_error(NULL));
    return 1;
  }
  ddl_comm_destroy(comm);
  return 0;
}

/* The public ABI, compiled as C99: struct layouts and enum values are pinned (appending is
 * the only allowed change), and every function of the header resolves from libddl.so.0
 * through dlopen, as a framework would load it. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddl/ddl.h"

Test(abi, config_layout_is_pinned) {
  cr_assert_eq(offsetof(ddl_config_t, size), 0);
  cr_assert_eq(offsetof(ddl_config_t, version), 8);
  cr_assert_eq(offsetof(ddl_config_t, timeout_ms), 12);
  cr_assert_eq(offsetof(ddl_config_t, job_token), 16);
  cr_assert_eq(offsetof(ddl_config_t, chunk_bytes), 24);
  cr_assert_eq(offsetof(ddl_config_t, log_level), 32);
  cr_assert_eq(sizeof(ddl_config_t), 40);
  ddl_config_t config = DDL_CONFIG_INITIALIZER;
  cr_assert_eq(config.size, sizeof(ddl_config_t));
  cr_assert_eq(config.version, DDL_CONFIG_VERSION);
  cr_assert_eq(config.log_level, -1);
}

Test(abi, enum_values_are_pinned) {
  cr_assert_eq(DDL_SUCCESS, 0);
  cr_assert_eq(DDL_ERR_UNSUPPORTED, 7);
  cr_assert_eq(DDL_INT8, 0);
  cr_assert_eq(DDL_FLOAT16, 6);
  cr_assert_eq(DDL_BFLOAT16, 7);
  cr_assert_eq(DDL_FLOAT64, 9);
  cr_assert_eq(DDL_SUM, 0);
  cr_assert_eq(DDL_AVG, 4);
  cr_assert_eq(DDL_AGREE_AND, 0);
  cr_assert_eq(DDL_AGREE_OR, 1);
  cr_assert_eq(sizeof(ddl_result_t), sizeof(int));
  cr_assert_eq(sizeof(ddl_datatype_t), sizeof(int));
}

static const char *const kFunctions[] = {
    "ddl_get_version",
    "ddl_comm_init_from_env",
    "ddl_comm_init",
    "ddl_comm_destroy",
    "ddl_comm_abort",
    "ddl_comm_rank",
    "ddl_comm_size",
    "ddl_allreduce",
    "ddl_broadcast",
    "ddl_allgather",
    "ddl_reduce_scatter",
    "ddl_barrier",
    "ddl_result_string",
    "ddl_comm_last_error",
    "ddl_datatype_size",
    "ddl_datatype_name",
    "ddl_op_name",
    "ddl_mem_alloc",
    "ddl_mem_free",
    "ddl_comm_split",
    "ddl_iallreduce",
    "ddl_ibroadcast",
    "ddl_iallgather",
    "ddl_ireduce_scatter",
    "ddl_ibarrier",
    "ddl_test",
    "ddl_wait",
    "ddl_request_free",
    "ddl_group_start",
    "ddl_group_end",
    "ddl_comm_revoke",
    "ddl_comm_agree",
    "ddl_comm_failed_ranks",
    "ddl_comm_shrink",
    "ddl_comm_grow",
};

/* Stream-ordered collectives (CUDA), exported on every build. */
static const char *const kStreamFunctions[] = {
    "ddl_allreduce_stream",
    "ddl_broadcast_stream",
    "ddl_allgather_stream",
    "ddl_reduce_scatter_stream",
    "ddl_alltoall_stream",
    "ddl_alltoallv_stream",
    "ddl_reduce_stream",
    "ddl_gather_stream",
    "ddl_scatter_stream",
};

/* libddl.so.0 of this build, as a framework would load it. */
static void *open_library(void) {
  const char *dir = getenv("DDL_BUILD_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/libddl.so.0", dir ? dir : ".");
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(lib, "dlopen(%s): %s", path, dlerror());
  return lib;
}

Test(abi, dlopen_resolves_every_function) {
  void *lib = open_library();
  for (size_t i = 0; i < sizeof kFunctions / sizeof kFunctions[0]; ++i)
    cr_assert_not_null(dlsym(lib, kFunctions[i]), "%s is not exported: %s", kFunctions[i],
                       dlerror());
  for (size_t i = 0; i < sizeof kStreamFunctions / sizeof kStreamFunctions[0]; ++i)
    cr_assert_not_null(dlsym(lib, kStreamFunctions[i]), "%s is not exported: %s",
                       kStreamFunctions[i], dlerror());
  /* Only ddl_* leaves the library: an internal C++ symbol must not resolve. */
  cr_assert_null(
      dlsym(lib, "_ZN3ddl6reduceE14ddl_datatype_t8ddl_op_tPvPKvS4_mi")); /* ddl::reduce */
  typedef ddl_result_t (*version_fn)(int *, int *, int *);
  version_fn get_version = (version_fn)dlsym(lib, "ddl_get_version");
  int major = -1, minor = -1, patch = -1;
  cr_assert_eq(get_version(&major, &minor, &patch), DDL_SUCCESS);
  cr_assert_eq(major, DDL_VERSION_MAJOR);
  cr_assert_eq(minor, DDL_VERSION_MINOR);
  cr_assert_eq(patch, DDL_VERSION_PATCH);
  typedef const char *(*string_fn)(ddl_result_t);
  string_fn result_string = (string_fn)dlsym(lib, "ddl_result_string");
  cr_assert(strstr(result_string(DDL_ERR_TIMEOUT), "TIMEOUT") != NULL);
  cr_assert_not_null(result_string((ddl_result_t)1234));
  dlclose(lib);
}

/* ddl_mem_alloc gives writable, zeroed memory; ddl_mem_free refuses what it did not give,
 * with a message, and accepts NULL as free() does. */
Test(abi, mem_alloc_and_free) {
  void *lib = open_library();
  typedef ddl_result_t (*alloc_fn)(void **, size_t);
  typedef ddl_result_t (*free_fn)(void *);
  typedef const char *(*error_fn)(ddl_comm_t);
  alloc_fn mem_alloc = (alloc_fn)dlsym(lib, "ddl_mem_alloc");
  free_fn mem_free = (free_fn)dlsym(lib, "ddl_mem_free");
  error_fn last_error = (error_fn)dlsym(lib, "ddl_comm_last_error");
  void *p = NULL;
  cr_assert_eq(mem_alloc(&p, 1 << 20), DDL_SUCCESS);
  cr_assert_not_null(p);
  cr_assert_eq(((unsigned char *)p)[12345], 0);
  memset(p, 7, 1 << 20);
  void *empty = NULL;
  cr_assert_eq(mem_alloc(&empty, 0), DDL_SUCCESS);
  cr_assert_not_null(empty);
  int local = 0;
  cr_assert_eq(mem_free(&local), DDL_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(last_error(NULL), "not returned by ddl_mem_alloc") != NULL, "%s",
            last_error(NULL));
  cr_assert_eq(mem_alloc(NULL, 8), DDL_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mem_free(p), DDL_SUCCESS);
  cr_assert_eq(mem_free(p), DDL_ERR_INVALID_ARGUMENT); /* twice */
  cr_assert_eq(mem_free(empty), DDL_SUCCESS);
  cr_assert_eq(mem_free(NULL), DDL_SUCCESS);
  dlclose(lib);
}

// Nothing shared outlives a job: after a normal run and after a run in which a rank was
// killed mid-allreduce, /dev/shm and the SysV shared-memory table look as they did before
// (ddl's own segment is an anonymous memfd; UCX's must not leak either).
#include <criterion/criterion.h>

#include <dirent.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/shm.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "harness.h"

using namespace ddltest;

namespace {

struct SharedMemorySnapshot {
  std::set<std::string> files;  // names in /dev/shm
  int sysv_segments = 0;

  static SharedMemorySnapshot take() {
    SharedMemorySnapshot s;
    if (DIR *dir = opendir("/dev/shm")) {
      // bxfi_*: Criterion's own, made by test binaries that may run beside this one.
      while (dirent *e = readdir(dir))
        if (e->d_name[0] != '.' && std::strncmp(e->d_name, "bxfi_", 5) != 0)
          s.files.insert(e->d_name);
      closedir(dir);
    }
    shm_info info = {};
    const int max_id = shmctl(0, SHM_INFO, reinterpret_cast<shmid_ds *>(&info));
    s.sysv_segments = max_id < 0 ? -1 : info.used_ids;
    return s;
  }

  std::string difference(const SharedMemorySnapshot &before) const {
    std::string left;
    for (const std::string &name : files)
      if (!before.files.count(name)) left += " /dev/shm/" + name;
    if (sysv_segments > before.sysv_segments)
      left += " " + std::to_string(sysv_segments - before.sysv_segments) + " SysV segment(s)";
    return left;
  }
};

int allreduce_some(ddl_comm_t comm, int rank, int nranks) {
  std::vector<float> data(1 << 20, 1.0f);  // 4 MB: many cells per message
  for (int i = 0; i < 3; ++i)
    RANK_OK(ddl_allreduce(data.data(), data.data(), data.size(), DDL_FLOAT32, DDL_SUM, comm));
  RANK_CHECK(data[12345] == static_cast<float>(nranks * nranks * nranks), "rank %d: got %g", rank,
             data[12345]);
  return 0;
}

}  // namespace

Test(shm_cleanup, nothing_left_after_a_normal_run) {
  const SharedMemorySnapshot before = SharedMemorySnapshot::take();
  const std::string failures = run_ranks(4, allreduce_some);
  cr_assert(failures.empty(), "%s", failures.c_str());
  const std::string left = SharedMemorySnapshot::take().difference(before);
  cr_assert(left.empty(), "left behind:%s", left.c_str());
}

Test(shm_cleanup, nothing_left_after_a_rank_is_killed_mid_allreduce) {
  const SharedMemorySnapshot before = SharedMemorySnapshot::take();
  RunOptions options;
  options.comm_timeout_ms = 20000;
  const std::string failures = run_ranks(
      4,
      [](ddl_comm_t comm, int rank, int) {
        std::vector<float> data(1 << 22, 1.0f);  // 16 MB: the kill lands mid-transfer
        if (rank == 1) {
          // Dies while its peers stream through the segment with it.
          if (fork() == 0) {
            usleep(30000);
            kill(getppid(), SIGKILL);
            _exit(0);
          }
        }
        ddl_result_t r = DDL_SUCCESS;
        for (int i = 0; i < 200 && r == DDL_SUCCESS; ++i)
          r = ddl_allreduce(data.data(), data.data(), data.size(), DDL_FLOAT32, DDL_SUM, comm);
        RANK_CHECK(r == DDL_ERR_REMOTE, "rank %d got %s: %s", rank, ddl_result_string(r),
                   ddl_comm_last_error(comm));
        return 0;
      },
      options);
  for (int survivor : {0, 2, 3})
    cr_assert(failures.find("rank " + std::to_string(survivor) + " ") == std::string::npos, "%s",
              failures.c_str());
  const std::string left = SharedMemorySnapshot::take().difference(before);
  cr_assert(left.empty(), "left behind:%s", left.c_str());
}

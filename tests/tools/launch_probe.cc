// Run under mpirun or srun by test_mpirun_launch: reads the launch environment as
// ddl_comm_init_from_env does, runs the bootstrap and says on stdout what happened, so that the
// test can check how rank 0's address travelled and that the rendezvous wanted the token.
//
//   probe: rank 1: file <path> mode 600 token yes      (rendezvous file path only)
//   probe: rank 1: strangers (no token, wrong token): refused, refused
//   probe: rank R of N: bootstrap ok, root <host:port>
//
// Rank 1 plays the strangers, once it knows rank 0's address and before it connects itself:
// a raw TCP connection with the right rank numbers and no token, then a wrong one
// (PROBE_STRANGERS=0: none, for an open rendezvous, which would let them in). Exit 0 when
// the bootstrap worked on this rank, 1 otherwise (the error on stderr).
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "lib/bootstrap/bootstrap.h"
#include "lib/bootstrap/launch_env.h"
#include "lib/common/params.h"
#include "tests/bootstrap/stranger.h"

int main() {
  ddl::LaunchInfo info;
  ddl::Status st = ddl::launch_info_from_env(&info);
  if (!st.ok()) {
    fprintf(stderr, "probe: %s\n", st.message().c_str());
    return 1;
  }
  int64_t timeout_ms = 30000;
  if (const char *t = getenv("DDL_TIMEOUT_MS")) ddl::parse_int(t, 1, 600000, &timeout_ms);
  ddl::BootstrapOptions opts = ddl::bootstrap_options_from(info, static_cast<int>(timeout_ms));
  const int rank = info.rank, n = info.nranks;
  const char *play = getenv("PROBE_STRANGERS");
  if (rank == 1 && !(play && std::string(play) == "0")) {
    opts.on_root_found = [&](const std::string &root) {
      if (!info.rendezvous_file.empty() && !info.pmix) {
        struct stat sb;
        std::string token = "no";
        if (stat(info.rendezvous_file.c_str(), &sb) == 0) {
          FILE *f = fopen(info.rendezvous_file.c_str(), "r");
          char line[600] = {0};
          if (f && fgets(line, sizeof line, f) && std::string(line).find(' ') != std::string::npos)
            token = "yes";
          if (f) fclose(f);
        }
        printf("probe: rank 1: file %s mode %o token %s\n", info.rendezvous_file.c_str(),
               static_cast<unsigned>(sb.st_mode & 0777), token.c_str());
      }
      std::string none = ddltest::stranger_hello(root, "", n - 1, n);
      std::string wrong =
          ddltest::stranger_hello(root, "0123456789abcdef0123456789abcdef", n - 1, n);
      printf("probe: rank 1: strangers (no token, wrong token): %s, %s\n", none.c_str(),
             wrong.c_str());
      fflush(stdout);
    };
  }
  std::unique_ptr<ddl::Bootstrap> b;
  st = ddl::Bootstrap::create(opts, &b);
  std::vector<std::string> all;
  if (st.ok()) st = b->allgather(std::to_string(rank), &all);
  if (st.ok()) st = b->barrier();
  if (!st.ok()) {
    fprintf(stderr, "probe: rank %d: %s\n", rank, st.message().c_str());
    return 1;
  }
  printf("probe: rank %d of %d: bootstrap ok, root %s\n", rank, n, b->root_address().c_str());
  return 0;
}

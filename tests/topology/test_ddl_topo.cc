// The ddl_topo tool as users run it: its greppable lines, its pictures, its errors.
#include <criterion/criterion.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

struct Run {
  int status = -1;
  std::string output;  // stdout and stderr
};

Run run_tool(const std::string &args, const std::string &env = "") {
  std::string command = env + " " + DDL_TOPO_BIN + " " + args + " 2>&1";
  Run run;
  FILE *pipe = popen(command.c_str(), "r");
  cr_assert_not_null(pipe);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) run.output.append(buf, n);
  int status = pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

bool contains(const std::string &text, const std::string &needle) {
  return text.find(needle) != std::string::npos;
}

std::string data(const char *name) {
  return std::string(DDL_TOPO_TEST_DATA) + "/" + name;
}

long file_size(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<long>(st.st_size) : -1;
}

}  // namespace

Test(ddl_topo, this_machine) {
  Run run = run_tool("", "env -u DDL_TOPO_FILE -u DDL_GDR_LEVEL");
  cr_assert_eq(run.status, 0, "%s", run.output.c_str());
  cr_assert(contains(run.output, "(this machine)"), "%s", run.output.c_str());
  cr_assert(contains(run.output, "\nsocket "), "%s", run.output.c_str());
  cr_assert(contains(run.output, "no GPUs\n") || contains(run.output, "\ngpu "), "%s",
            run.output.c_str());
}

Test(ddl_topo, one_greppable_line_per_gpu) {
  Run run = run_tool("--input " + data("two-socket-far-nic.xml") + " --matrix");
  cr_assert_eq(run.status, 0, "%s", run.output.c_str());
  for (const char *line : {"\ngpu 0000:04:00.0 nic mlx5_0 path PIX gdr yes\n",
                           "\ngpu 0000:85:00.0 nic mlx5_0 path SYS gdr no\n",
                           "\n    switch 0000:02:00.0 [10b5:8796, 16 GB/s up]\n",
                           "\ngdr: up to PXB, peer-memory module assumed (--input)\n",
                           "\nmlx5_0 PIX    PIX    SYS    SYS    X\n"}) {
    cr_assert(contains(run.output, line), "missing %s in\n%s", line, run.output.c_str());
  }
  // DDL_GDR_LEVEL moves the limit.
  run = run_tool("--input " + data("two-socket-far-nic.xml"), "DDL_GDR_LEVEL=SYS");
  cr_assert(contains(run.output, "gpu 0000:85:00.0 nic mlx5_0 path SYS gdr yes\n"), "%s",
            run.output.c_str());
}

Test(ddl_topo, pictures) {
  char dir[] = "/tmp/ddl_topo_tool_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  std::string dot = std::string(dir) + "/t.dot", png = std::string(dir) + "/t.png";
  bool have_dot = system("command -v dot >/dev/null 2>&1") == 0;
  Run run = run_tool("--input " + data("dgx-a100-like.xml") + " --dot " + dot +
                     (have_dot ? " --png " + png : std::string()));
  cr_assert_eq(run.status, 0, "%s", run.output.c_str());
  cr_assert_gt(file_size(dot), 1000);
  if (have_dot) cr_assert_gt(file_size(png), 1000);
  unlink(dot.c_str());
  unlink(png.c_str());
  rmdir(dir);
}

Test(ddl_topo, errors_say_what_is_wrong) {
  Run run = run_tool("--frobnicate");
  cr_assert_eq(run.status, 2);
  cr_assert(contains(run.output, "bad argument '--frobnicate'"), "%s", run.output.c_str());
  run = run_tool("--input /nonexistent.xml");
  cr_assert_eq(run.status, 1);
  cr_assert(contains(run.output, "/nonexistent.xml"), "%s", run.output.c_str());
  run = run_tool("--input " + data("no-gpu.xml"), "DDL_GDR_LEVEL=maybe");
  cr_assert_eq(run.status, 1);
  cr_assert(contains(run.output, "DDL_GDR_LEVEL=maybe"), "%s", run.output.c_str());
  run = run_tool("--input " + data("no-gpu.xml"));
  cr_assert_eq(run.status, 0);
  cr_assert(contains(run.output, "no GPUs\n"), "%s", run.output.c_str());
  cr_assert(contains(run.output, "nic mlx5_0 0000:01:00.0 Ethernet, port 1 down"), "%s",
            run.output.c_str());
}

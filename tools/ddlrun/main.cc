// ddlrun: a local launcher for ddl jobs (see launch_options.cc for the command line).
#include <cstdio>
#include <string>

#include "launch_options.h"
#include "launcher.h"

int main(int argc, char **argv) {
  ddlrun::LaunchOptions options;
  std::string error;
  switch (ddlrun::parse_launch_options(argc, argv, &options, &error)) {
    case ddlrun::ParseOutcome::kHelp:
      std::fputs(ddlrun::launch_usage(), stdout);
      return 0;
    case ddlrun::ParseOutcome::kError:
      std::fprintf(stderr, "ddlrun: %s\nTry 'ddlrun --help'.\n", error.c_str());
      return 2;
    case ddlrun::ParseOutcome::kRun:
      break;
  }
  return ddlrun::run_job(options);
}

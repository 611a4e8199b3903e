// The job's torch.distributed store (a TCPStore server) in a helper process of ddlrun's
// (--torch-store), as torchrun's agent hosts it, instead of inside rank 0 (where env://
// puts it): any rank, rank 0 included, may then die and the others still meet through the
// store, shrink and go on. Ranks reach it through MASTER_ADDR and MASTER_PORT, and
// TORCHELASTIC_USE_AGENT_STORE=True makes torch's env:// connect every rank as a client.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddlrun {

class TorchStore {
 public:
  TorchStore() = default;
  TorchStore(const TorchStore &) = delete;
  TorchStore &operator=(const TorchStore &) = delete;
  ~TorchStore() { stop(0); }

  // Runs `command` (python -m ddl.torch.store ..., directly or through a launch agent) and
  // waits up to timeout_sec for the line saying it listens. False, with *error, if it exits,
  // says something else or stays silent.
  bool start(const std::vector<std::string> &command, double timeout_sec, std::string *error);
  // SIGTERM to its process group, SIGKILL after grace_ms; reaps it. Does nothing if stopped.
  void stop(int grace_ms);
  pid_t pid() const { return pid_; }
  // It exited and was reaped elsewhere (the launcher's event loop): nothing left to stop.
  void forget() { pid_ = -1; }

 private:
  pid_t pid_ = -1;
};

// The command that hosts the store: `python -m ddl.torch.store --port PORT`, with the job's
// interpreter when its program is one (python, python3.11, .../bin/python), else $DDL_PYTHON,
// else python3.
std::vector<std::string> torch_store_command(const std::vector<std::string> &job_command, int port);

}  // namespace ddlrun

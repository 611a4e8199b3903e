// Cross-memory attach: one kernel copy between this process and another's address space
// (process_vm_readv), with no staging through shared memory. Linux
// allows it between processes of one user unless ptrace is restricted (Yama's
// ptrace_scope, a seccomp filter), so a job probes it before relying on it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "lib/common/status.h"

namespace ddl {

// Copies `bytes` from `remote` in process `pid` to `local`. A dead process, or memory that
// is gone, is DDL_ERR_REMOTE; a refused or failed copy DDL_ERR_SYSTEM with the kernel's
// reason.
Status cma_read(pid_t pid, const void *remote, void *local, size_t bytes);
// Copies `bytes` from `local` to `remote` in process `pid`; errors as cma_read's.
Status cma_write(pid_t pid, void *remote, const void *local, size_t bytes);

// The address of a word in this process that holds a value peers can predict from its pid,
// for them to check that they may read this process.
uintptr_t cma_probe_address();
// Whether this process can read process `pid`'s probe word at `address`.
bool cma_probe(pid_t pid, uintptr_t address);

}  // namespace ddl

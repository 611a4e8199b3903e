// Whether a process on this host is still running, by pid: the host-local liveness check
// that lets a rank notice a dead neighbour in a shared-memory path, where no connection
// breaks to tell it.
#pragma once

#include <sys/types.h>

namespace ddl {

// False when the process is gone or a zombie (it died; its parent has not reaped it yet).
// True when it runs, or when this process may not look (then we cannot tell).
bool process_is_alive(pid_t pid);

// True when the process is stopped by a signal (SIGSTOP, SIGTSTP: state 'T'), not traced by a
// debugger ('t'). False when it runs, is gone, or this process may not look.
bool process_is_stopped(pid_t pid);

}  // namespace ddl

/* The stand-in driver's CUDA IPC: an allocation's handle carries (pid, fd, size, id); opening
 * it takes the exporter's memfd (pidfd_getfd, else /proc/PID/fd/N), checks the id against the
 * trailer page, and maps it at a new PROT_NONE range in this process. See fake_cuda.c. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fake_cuda_internal.h"

/* ---- IPC ---------------------------------------------------------------------------------- */

typedef struct {
  char reserved[64];
} CUipcMemHandle;
struct handle_words {
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  uint32_t pad;
  uint64_t size;
  uint64_t id;
};
enum { kHandleMagic = 0x46495043 }; /* "FIPC" */

CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr base) {
  NEED_CONTEXT();
  pthread_mutex_lock(&fake_regions_mu);
  struct region *r = fake_find_region((uintptr_t)base);
  struct handle_words w = {0};
  CUresult result = kInvalidValue;
  /* The base of an allocation of this process: not an interior pointer, not an import.
   * FAKE_CUDA_IPC_REFUSE: every allocation is one the driver cannot export. */
  if (!getenv("FAKE_CUDA_IPC_REFUSE") && r && r->type == kTypeDevice &&
      r->base == (uintptr_t)base && !r->imported) {
    w = (struct handle_words){kHandleMagic, getpid(), r->fd, 0, r->size, r->id};
    result = kOk;
  }
  pthread_mutex_unlock(&fake_regions_mu);
  if (result != kOk) return result;
  memset(handle, 0, sizeof *handle);
  memcpy(handle->reserved, &w, sizeof w);
  return kOk;
}

/* The exporter's fd, duplicated into this process. */
static int take_fd(pid_t pid, int fd) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
  const int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd >= 0) {
    const int got = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
    close(pidfd);
    if (got >= 0) return got;
  }
#endif
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
  return open(path, O_RDWR | O_CLOEXEC);
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned flags) {
  NEED_CONTEXT();
  const CUresult synced = fake_device_sync("cuIpcOpenMemHandle");
  if (synced != kOk) return synced;
  struct handle_words w;
  memcpy(&w, handle.reserved, sizeof w);
  if (flags != 1 || w.magic != kHandleMagic || w.size == 0) return kInvalidValue;
  if (w.pid == getpid()) return kInvalidContext;
  pthread_mutex_lock(&fake_regions_mu);
  for (int i = 0; i < fake_nregions; ++i)
    if (fake_regions[i].imported && fake_regions[i].owner_pid == w.pid &&
        fake_regions[i].owner_id == w.id) {
      ++fake_regions[i].imported;
      *dptr = fake_regions[i].base;
      pthread_mutex_unlock(&fake_regions_mu);
      return kOk;
    }
  pthread_mutex_unlock(&fake_regions_mu);
  const int fd = take_fd(w.pid, w.fd);
  if (fd < 0) return kMapFailed;
  const size_t mapped = fake_page_round(w.size);
  uint64_t id = 0;
  struct stat st;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size != mapped + 4096 ||
      pread(fd, &id, sizeof id, (off_t)mapped) != (ssize_t)sizeof id || id != w.id) {
    close(fd); /* not the allocation the handle was made for: freed, its fd reused */
    return kInvalidHandle;
  }
  void *base = mmap(NULL, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  void *shadow = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED || shadow == MAP_FAILED) {
    close(fd);
    return kMapFailed;
  }
  struct region r = {(uintptr_t)base,
                     (size_t)w.size,
                     shadow,
                     kTypeDevice,
                     fd,
                     __atomic_fetch_add(&fake_next_id, 1, __ATOMIC_RELAXED),
                     1,
                     w.pid,
                     w.fd,
                     w.id};
  if (fake_add_region(r) != kOk) return kOutOfMemory;
  pthread_mutex_lock(&fake_kernels_mu);
  ++fake_ipc_opened;
  pthread_mutex_unlock(&fake_kernels_mu);
  *dptr = (uintptr_t)base;
  return kOk;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  if (!fake_initialized) return kNotInitialized;
  const CUresult synced = fake_device_sync("cuIpcCloseMemHandle");
  if (synced != kOk) return synced;
  pthread_mutex_lock(&fake_regions_mu);
  struct region *found = fake_find_region((uintptr_t)dptr);
  int last = 0;
  CUresult result = kInvalidValue;
  if (found && found->imported && found->base == (uintptr_t)dptr) {
    result = kOk;
    last = --found->imported == 0;
  }
  pthread_mutex_unlock(&fake_regions_mu);
  if (result != kOk || !last) return result;
  struct region r;
  fake_remove_region((uintptr_t)dptr, &r);
  munmap((void *)r.base, fake_page_round(r.size));
  munmap(r.shadow, fake_page_round(r.size));
  close(r.fd);
  pthread_mutex_lock(&fake_kernels_mu);
  ++fake_ipc_closed;
  pthread_mutex_unlock(&fake_kernels_mu);
  return kOk;
}

/* Handles opened (first opens of a handle) and closed (last closes) by this process, and the
 * imports open now. */
void fake_cuda_ipc_stats(int *opened, int *closed, int *open_now) {
  pthread_mutex_lock(&fake_kernels_mu);
  *opened = fake_ipc_opened;
  *closed = fake_ipc_closed;
  pthread_mutex_unlock(&fake_kernels_mu);
  pthread_mutex_lock(&fake_regions_mu);
  int n = 0;
  for (int i = 0; i < fake_nregions; ++i) n += fake_regions[i].imported != 0;
  pthread_mutex_unlock(&fake_regions_mu);
  *open_now = n;
}

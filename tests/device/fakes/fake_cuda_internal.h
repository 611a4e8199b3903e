/* What the stand-in driver's files share (fake_cuda.c: memory, streams, kernels; fake_cuda_ipc.c:
 * handles between processes): the driver's types and result codes, the table of memory the
 * fake made, and a few helpers. Nothing here is part of the driver API. */
#pragma once

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum {
  kOk = 0,
  kInvalidValue = 1,
  kNotInitialized = 3,
  kOutOfMemory = 2,
  kInvalidImage = 200,
  kInvalidContext = 201,
  kMapFailed = 205,
  kInvalidHandle = 400,
  kNotFound = 500,
  kNotReady = 600,
  kIllegalAddress = 700,
  kNotSupported = 801,
  kUnknown = 999
};
enum { kTypeHost = 1, kTypeDevice = 2 };

/* Memory the fake made: device allocations (a PROT_NONE range over a memfd-backed shadow),
 * imports of other processes' allocations, pinned host memory. Guarded by fake_regions_mu. */
struct region {
  uintptr_t base;
  size_t size;
  char *shadow; /* where the bytes are (base itself for pinned host memory) */
  unsigned type;
  int fd;        /* device memory: the memfd behind the shadow */
  uint64_t id;   /* device memory: unique per allocation (and per import) */
  int imported;  /* opened from another process's handle: its reference count */
  int owner_pid; /* imported: the exporter's pid, fd and id */
  int owner_fd;
  uint64_t owner_id;
};
extern pthread_mutex_t fake_regions_mu;
extern struct region fake_regions[1024];
extern int fake_nregions;
struct region *fake_find_region(
    uintptr_t p); /* the region holding p, fake_regions_mu held; or NULL */
CUresult fake_add_region(struct region region);
int fake_remove_region(uintptr_t base, struct region *out);

/* The id of the next allocation; the trailer page of each memfd holds its own. */
extern uint64_t fake_next_id;
size_t fake_page_round(size_t bytes);

/* Counters of kernels and IPC opens, guarded by fake_kernels_mu. */
extern pthread_mutex_t fake_kernels_mu;
extern int fake_ipc_opened, fake_ipc_closed;

/* Whether cuInit ran. */
extern int fake_initialized;

/* FAKE_CUDA_DEVICES (fake_cuda_devices.c). */
int fake_device_count(void);

/* kOk when this thread has a usable context, else the driver's error for the call. */
CUresult fake_need_context(void);
#define NEED_CONTEXT()                         \
  do {                                         \
    const CUresult need = fake_need_context(); \
    if (need != kOk) return need;              \
  } while (0)

/* What waits for the device (fake_cuda_sync.c). Queued 32-bit value waits (and flag-waiting
 * kernels) not yet passed, counted by fake_cuda.c's streams. */
extern int fake_value_waits;
/* Waits while another thread holds the driver (every call that needs a context, and event
 * queries). */
void fake_pass_driver(void);
/* Holds the driver while busy(arg) is true, up to FAKE_CUDA_SYNC_WAIT_MS; past it, says on
 * stderr that `what` waited for `waited_for`, counts a hang and returns kUnknown. */
CUresult fake_wait_holding_driver(const char *what, const char *waited_for, int (*busy)(void *),
                                  void *arg);
/* Waits as a device-synchronizing call of the driver does; kUnknown when it would hang. */
CUresult fake_device_sync(const char *what);
#define DEVICE_SYNC(what)                           \
  do {                                              \
    const CUresult synced = fake_device_sync(what); \
    if (synced != kOk) return synced;               \
  } while (0)

/* FAKE_CUDA_DIE_AT: the process kills itself at its N-th launch or device-to-device copy. */
void fake_maybe_die(const char *what);

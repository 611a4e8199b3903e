/* A stand-in libcuda.so.1 for tests on machines without a GPU, loaded by ddl through
 * DDL_CUDA_LIBRARY. "Device memory" is an address range reserved with PROT_NONE, so that any
 * host access to it crashes, as it would on a GPU; its bytes live in a host shadow that only
 * the fake's copies (and fake_cuda_host_view, the tests' "kernels") touch. Pinned host memory
 * is host memory the fake knows. A stream is a queue run in order by its own thread: copies,
 * events, host functions and 32-bit wait-value operations. Calls that need a context fail
 * with CUDA_ERROR_INVALID_CONTEXT when the calling thread has none current, as the driver
 * does. FAKE_CUDA_DELAY_US delays every queued copy, to make missing waits show.
 *
 * Modules and kernels: cuModuleLoadData takes any image that starts with a fatbin's magic
 * number; cuModuleGetFunction knows the names of ddl's reduction kernels; cuLaunchKernel
 * copies the argument block and queues the launch, whose stream thread runs the kernels'
 * thread body for every thread of the grid, compiled for the host (fake_kernels.cc). That
 * checks ddl's dispatch (names, argument layout, grid sizing, alignment, stream order), not
 * the device code. A launch that would fault on a GPU is counted and described
 * (fake_cuda_kernel_faults), and makes later calls fail as a sticky GPU error would.
 * FAKE_CUDA_SMS sets the multiprocessor count (default 4), FAKE_CUDA_DEVICES the number of
 * devices (default 1). They share one context and one memory; the context remembers which
 * device it was retained for (cuCtxGetDevice), and cuDeviceGetPCIBusId gives entry N of
 * FAKE_CUDA_BUS_IDS (comma-separated) for device N, else 0000:0N:00.0 (N + 1, in hex).
 *
 * IPC between processes (one "GPU" shared by several processes): every allocation's shadow
 * is a memfd mapped shared. cuIpcGetMemHandle takes the base of an allocation only (as the
 * driver documents) and writes (pid, fd, size, id) into the handle; cuIpcOpenMemHandle in
 * another process takes the fd out of the exporter (pidfd_getfd, else /proc/PID/fd/N),
 * checks the allocation's id (kept in a trailer page of the memfd, so that a stale handle to
 * a freed allocation whose fd number was reused is refused), and maps it behind a fresh
 * PROT_NONE range: a second "device address" of the same bytes, as a real import is.
 * Opening a handle of one's own process fails (CUDA_ERROR_INVALID_CONTEXT), as on the driver;
 * opening one handle twice gives the same address, reference counted; cuIpcCloseMemHandle
 * takes only imported addresses. What this checks: ddl's protocol (handles of allocation
 * bases plus offsets, what is opened and closed and when, the order of its phases, that
 * reads of a peer happen after the peer's host-side signal). What it cannot: a GPU's memory
 * model (here every write is visible once the stream thread ran it; on a GPU only after the
 * work completed and, across devices, through peer access), peer access between devices,
 * what a freed exported allocation does to its importers (undefined on the driver; here the
 * memfd keeps the bytes), and any performance. fake_cuda_ipc_stats counts opens and closes;
 * FAKE_CUDA_IPC_REFUSE makes cuIpcGetMemHandle refuse every allocation; FAKE_CUDA_DIE_AT kills
 * the process inside a collective's phase.
 * Calls that synchronize the device on a real driver (allocating and freeing device or pinned
 * memory, opening and closing IPC handles, loading and unloading modules) first wait until no
 * stream of this process waits on a 32-bit value or in ddl's flag-wait kernel, as the driver
 * waits for such a stream; synchronous copies wait for the default stream. While one of these
 * waits, it holds the driver: every other thread's call that needs a context, and event
 * queries, wait until it returns (an H200 showed this, bench/gpu.md, 2026-11-28: a progress
 * thread's copy and event query blocked behind an application's free or synchronous copy). A
 * wait past FAKE_CUDA_SYNC_WAIT_MS (default 3000) is the hang a GPU shows when the thread that
 * would write the value is the one waiting, or is held by the waiting call: the call then
 * fails with CUDA_ERROR_UNKNOWN, says so on stderr, and counts it (fake_cuda_sync_hangs).
 * cuInit lets any process of the user read this one (PR_SET_PTRACER_ANY), as ddl itself does
 * for its single-copy path: Yama would otherwise refuse pidfd_getfd between sibling ranks. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fake_cuda_internal.h"

int fake_initialized;
static char primary_context;   /* the one context: its address is the CUcontext */
static __thread void *current; /* this thread's current context */
static int context_device;     /* the device the context was last retained for */

/* ---- Memory ---------------------------------------------------------------------------- */

pthread_mutex_t fake_regions_mu = PTHREAD_MUTEX_INITIALIZER;
struct region fake_regions[1024];
int fake_nregions;

struct region *fake_find_region(uintptr_t p) {
  for (int i = 0; i < fake_nregions; ++i)
    if (p >= fake_regions[i].base && p < fake_regions[i].base + fake_regions[i].size)
      return &fake_regions[i];
  return NULL;
}

/* The host address of [p, p+n) in memory the fake made (device or pinned), or NULL. */
static char *translate(uintptr_t p, size_t n) {
  pthread_mutex_lock(&fake_regions_mu);
  struct region *r = fake_find_region(p);
  char *out = NULL;
  if (r && p + n <= r->base + r->size) out = r->shadow + (p - r->base);
  pthread_mutex_unlock(&fake_regions_mu);
  return out;
}

CUresult fake_add_region(struct region region) {
  pthread_mutex_lock(&fake_regions_mu);
  CUresult r = kInvalidValue;
  if (fake_nregions < (int)(sizeof fake_regions / sizeof fake_regions[0])) {
    fake_regions[fake_nregions++] = region;
    r = kOk;
  }
  pthread_mutex_unlock(&fake_regions_mu);
  return r;
}

int fake_remove_region(uintptr_t base, struct region *out) {
  pthread_mutex_lock(&fake_regions_mu);
  int found = 0;
  for (int i = 0; i < fake_nregions; ++i)
    if (fake_regions[i].base == base) {
      *out = fake_regions[i];
      fake_regions[i] = fake_regions[--fake_nregions];
      found = 1;
      break;
    }
  pthread_mutex_unlock(&fake_regions_mu);
  return found;
}

/* ---- Streams and events ---------------------------------------------------------------- */

struct event {
  uint64_t recorded; /* generations: records issued, and the last one reached */
  uint64_t reached;
};

/* fake_kernels.cc */
const void *fake_kernel_lookup(const char *name);
const char *fake_kernel_name(const void *kernel);
size_t fake_kernel_args_bytes(const void *kernel);
int fake_kernel_waits(const void *kernel);
int fake_kernel_run(const void *kernel, const void *args_copy, unsigned long long nthreads,
                    char *(*translate)(uintptr_t address, size_t bytes), char *why,
                    size_t why_size);

/* Kernel launches that ran, and those that would have faulted (the first one's words). */
pthread_mutex_t fake_kernels_mu = PTHREAD_MUTEX_INITIALIZER;
static int kernels_run, kernel_faults, modules_loaded, modules_unloaded;
int fake_ipc_opened, fake_ipc_closed;
static char kernel_fault[512];
static unsigned last_grid, last_block;
static char last_kernel[64];

enum { kCopy, kRecord, kHostFn, kWaitValue, kWriteValue, kWaitEvent, kKernel };

struct op {
  int kind;
  char *dst;
  const char *src;
  size_t bytes;
  struct event *event;
  uint64_t generation;
  void (*fn)(void *);
  void *arg;
  const uint32_t *addr;
  uint32_t value;
  const void *kernel;
  void *args;
  unsigned grid, block;
  struct op *next;
};

struct stream {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct op *head, *tail;
  int running, stop;
  void *context;
  pthread_t thread;
};

static void run_op(struct op *op) {
  switch (op->kind) {
    case kCopy: {
      const char *delay = getenv("FAKE_CUDA_DELAY_US");
      if (delay) usleep((useconds_t)atoi(delay));
      memcpy(op->dst, op->src, op->bytes);
      break;
    }
    case kRecord:
      __atomic_store_n(&op->event->reached, op->generation, __ATOMIC_RELEASE);
      break;
    case kHostFn:
      op->fn(op->arg);
      break;
    case kWaitValue: /* CU_STREAM_WAIT_VALUE_GEQ: a cyclic comparison */
      while ((int32_t)(__atomic_load_n(op->addr, __ATOMIC_ACQUIRE) - op->value) < 0) usleep(20);
      __atomic_sub_fetch(&fake_value_waits, 1, __ATOMIC_ACQ_REL);
      break;
    case kWriteValue:
      __atomic_store_n((uint32_t *)(uintptr_t)op->addr, op->value, __ATOMIC_RELEASE);
      break;
    case kWaitEvent: /* until the event's record at the time of the call has been reached */
      while (__atomic_load_n(&op->event->reached, __ATOMIC_ACQUIRE) < op->generation) usleep(20);
      break;
    case kKernel: {
      char why[512] = "";
      const int fault =
          fake_kernel_run(op->kernel, op->args, (unsigned long long)op->grid * op->block, translate,
                          why, sizeof why);
      pthread_mutex_lock(&fake_kernels_mu);
      ++kernels_run;
      if (fault && kernel_faults++ == 0) strcpy(kernel_fault, why);
      pthread_mutex_unlock(&fake_kernels_mu);
      if (fake_kernel_waits(op->kernel)) __atomic_sub_fetch(&fake_value_waits, 1, __ATOMIC_ACQ_REL);
      free(op->args);
      break;
    }
  }
}

static void *stream_main(void *arg) {
  struct stream *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
    if (!s->head) break;
    struct op *op = s->head;
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    s->running = 1;
    pthread_mutex_unlock(&s->mu);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    run_op(op);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    free(op);
    pthread_mutex_lock(&s->mu);
    s->running = 0;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static struct stream *new_stream(void *context) {
  struct stream *s = calloc(1, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->context = context;
  pthread_create(&s->thread, NULL, stream_main, s);
  return s;
}

static pthread_mutex_t default_mu = PTHREAD_MUTEX_INITIALIZER;
static struct stream *default_stream;

/* NULL, CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) are the one default stream here. */
static struct stream *stream_of(void *handle) {
  if ((uintptr_t)handle > 2) return handle;
  pthread_mutex_lock(&default_mu);
  if (!default_stream) default_stream = new_stream(&primary_context);
  pthread_mutex_unlock(&default_mu);
  return default_stream;
}

static CUresult enqueue(void *handle, struct op *op) {
  struct stream *s = stream_of(handle);
  pthread_mutex_lock(&s->mu);
  if (s->tail)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return kOk;
}

static struct op *new_op(int kind) {
  struct op *op = calloc(1, sizeof *op);
  op->kind = kind;
  return op;
}

static int sticky_fault(void) {
  pthread_mutex_lock(&fake_kernels_mu);
  const int f = kernel_faults;
  pthread_mutex_unlock(&fake_kernels_mu);
  return f;
}

/* A kernel that faulted leaves the context unusable, as on a GPU. */
CUresult fake_need_context(void) {
  if (!fake_initialized) return kNotInitialized;
  fake_pass_driver();
  if (!current) return kInvalidContext;
  if (sticky_fault()) return kIllegalAddress;
  return kOk;
}

/* ---- The driver API ddl and the tests use ------------------------------------------------ */

CUresult cuInit(unsigned flags) {
  (void)flags;
  if (!fake_initialized) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  fake_initialized = 1;
  return kOk;
}
CUresult cuDeviceGet(int *device, int ordinal) {
  if (!fake_initialized) return kNotInitialized;
  if (ordinal < 0 || ordinal >= fake_device_count()) return kInvalidValue;
  *device = ordinal;
  return kOk;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, int device) {
  if (!fake_initialized) return kNotInitialized;
  if (device < 0 || device >= fake_device_count()) return kInvalidValue;
  context_device = device;
  *ctx = &primary_context;
  return kOk;
}
CUresult cuCtxSetCurrent(void *ctx) {
  if (!fake_initialized) return kNotInitialized;
  if (ctx && ctx != &primary_context) return kInvalidContext;
  current = ctx;
  return kOk;
}
CUresult cuCtxGetCurrent(void **ctx) {
  if (!fake_initialized) return kNotInitialized;
  *ctx = current;
  return kOk;
}

/* The id of the next allocation; the trailer page of each memfd holds its own. */
uint64_t fake_next_id = 1;
size_t fake_page_round(size_t bytes) {
  return (bytes + 4095) / 4096 * 4096;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
  NEED_CONTEXT();
  DEVICE_SYNC("cuMemAlloc");
  if (bytes == 0) return kInvalidValue;
  const size_t mapped = fake_page_round(bytes);
  const int fd = memfd_create("fake_cuda_device_memory", MFD_CLOEXEC);
  if (fd < 0) return kOutOfMemory;
  const uint64_t id =
      __atomic_fetch_add(&fake_next_id, 1, __ATOMIC_RELAXED) | ((uint64_t)getpid() << 32);
  if (ftruncate(fd, (off_t)(mapped + 4096)) != 0 ||
      pwrite(fd, &id, sizeof id, (off_t)mapped) != (ssize_t)sizeof id) {
    close(fd);
    return kOutOfMemory;
  }
  void *base = mmap(NULL, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  void *shadow = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED || shadow == MAP_FAILED) {
    close(fd);
    return kOutOfMemory;
  }
  *dptr = (uintptr_t)base;
  struct region r = {(uintptr_t)base, bytes, shadow, kTypeDevice, fd, id, 0, 0, -1, 0};
  return fake_add_region(r);
}
CUresult cuMemFree_v2(CUdeviceptr dptr) {
  DEVICE_SYNC("cuMemFree");
  struct region r;
  if (!fake_remove_region((uintptr_t)dptr, &r) || r.type != kTypeDevice) return kInvalidValue;
  if (r.imported) { /* the driver frees only its own allocations */
    fake_add_region(r);
    return kInvalidValue;
  }
  munmap((void *)r.base, fake_page_round(r.size));
  munmap(r.shadow, fake_page_round(r.size));
  close(r.fd);
  return kOk;
}
static int host_allocs; /* cuMemHostAlloc calls that succeeded */
int fake_cuda_host_allocs(void) {
  return __atomic_load_n(&host_allocs, __ATOMIC_ACQUIRE);
}
CUresult cuMemHostAlloc(void **ptr, size_t bytes, unsigned flags) {
  NEED_CONTEXT();
  DEVICE_SYNC("cuMemHostAlloc");
  __atomic_add_fetch(&host_allocs, 1, __ATOMIC_ACQ_REL);
  (void)flags;
  char *p = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!p) return 2;
  *ptr = p;
  struct region r = {(uintptr_t)p, bytes, p, kTypeHost, -1, 0, 0, 0, -1, 0};
  return fake_add_region(r);
}
CUresult cuMemFreeHost(void *ptr) {
  DEVICE_SYNC("cuMemFreeHost");
  struct region r;
  if (!fake_remove_region((uintptr_t)ptr, &r) || r.type != kTypeHost) return kInvalidValue;
  free(r.shadow);
  return kOk;
}
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *dptr, void *ptr, unsigned flags) {
  (void)flags;
  if (!translate((uintptr_t)ptr, 1)) return kInvalidValue;
  *dptr = (uintptr_t)ptr; /* unified addressing */
  return kOk;
}

CUresult cuPointerGetAttributes(unsigned n, int *attributes, void **data, CUdeviceptr ptr) {
  if (!fake_initialized) return kNotInitialized;
  pthread_mutex_lock(&fake_regions_mu);
  struct region *r = fake_find_region((uintptr_t)ptr);
  const unsigned type = r ? r->type : 0;
  pthread_mutex_unlock(&fake_regions_mu);
  for (unsigned i = 0; i < n; ++i) {
    if (attributes[i] == 1) /* CU_POINTER_ATTRIBUTE_CONTEXT */
      *(void **)data[i] = type ? &primary_context : NULL;
    else if (attributes[i] == 2) /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
      *(unsigned *)data[i] = type;
    else
      return kInvalidValue;
  }
  return kOk;
}

static CUresult copy_async(char *dst, const char *src, size_t bytes, void *stream) {
  NEED_CONTEXT();
  if (!dst || !src) return kInvalidValue;
  struct op *op = new_op(kCopy);
  op->dst = dst;
  op->src = src;
  op->bytes = bytes;
  return enqueue(stream, op);
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, void *stream) {
  return copy_async(dst, translate((uintptr_t)src, bytes), bytes, stream);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, void *stream) {
  return copy_async(translate((uintptr_t)dst, bytes), src, bytes, stream);
}

/* FAKE_CUDA_DIE_AT="launch:N" or "dtod:N": the process kills itself at its N-th kernel
 * launch or device-to-device copy (1-based), to test a rank dying inside a collective. */
void fake_maybe_die(const char *what) {
  static int launches, copies;
  const char *at = getenv("FAKE_CUDA_DIE_AT");
  if (!at) return;
  const size_t len = strlen(what);
  if (strncmp(at, what, len) != 0 || at[len] != ':') return;
  const int n = atoi(at + len + 1);
  int *counter = strcmp(what, "launch") == 0 ? &launches : &copies;
  if (__atomic_add_fetch(counter, 1, __ATOMIC_RELAXED) == n) raise(SIGKILL);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void *stream) {
  fake_maybe_die("dtod");
  return copy_async(translate((uintptr_t)dst, bytes), translate((uintptr_t)src, bytes), bytes,
                    stream);
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr ptr) {
  NEED_CONTEXT();
  pthread_mutex_lock(&fake_regions_mu);
  struct region *r = fake_find_region((uintptr_t)ptr);
  const int found = r && r->type == kTypeDevice;
  if (found) {
    if (base) *base = r->base;
    if (size) *size = r->size;
  }
  pthread_mutex_unlock(&fake_regions_mu);
  return found ? kOk : kNotFound;
}

CUresult cuStreamCreate(void **stream, unsigned flags) {
  NEED_CONTEXT();
  (void)flags;
  *stream = new_stream(current);
  return kOk;
}
CUresult cuStreamSynchronize(void *handle) {
  if (!fake_initialized) return kNotInitialized;
  struct stream *s = stream_of(handle);
  pthread_mutex_lock(&s->mu);
  while (s->head || s->running) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  return kOk;
}
CUresult cuStreamDestroy_v2(void *handle) {
  if ((uintptr_t)handle <= 2) return kInvalidHandle;
  struct stream *s = handle;
  cuStreamSynchronize(s);
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  free(s);
  return kOk;
}
CUresult cuStreamGetCtx(void *handle, void **ctx) {
  if (!fake_initialized) return kNotInitialized;
  *ctx = (uintptr_t)handle <= 2 ? current : ((struct stream *)handle)->context;
  return kOk;
}

CUresult cuEventCreate(void **event, unsigned flags) {
  NEED_CONTEXT();
  (void)flags;
  *event = calloc(1, sizeof(struct event));
  return kOk;
}
CUresult cuEventRecord(void *event, void *stream) {
  NEED_CONTEXT();
  struct op *op = new_op(kRecord);
  op->event = event;
  op->generation = __atomic_add_fetch(&op->event->recorded, 1, __ATOMIC_ACQ_REL);
  return enqueue(stream, op);
}
CUresult cuStreamWaitEvent(void *stream, void *event, unsigned flags) {
  NEED_CONTEXT();
  if (flags != 0 || !event) return kInvalidValue;
  struct op *op = new_op(kWaitEvent);
  op->event = event;
  op->generation = __atomic_load_n(&op->event->recorded, __ATOMIC_ACQUIRE);
  return enqueue(stream, op);
}
CUresult cuEventQuery(void *handle) {
  fake_pass_driver();
  struct event *e = handle;
  const uint64_t recorded = __atomic_load_n(&e->recorded, __ATOMIC_ACQUIRE);
  return __atomic_load_n(&e->reached, __ATOMIC_ACQUIRE) >= recorded ? kOk : kNotReady;
}
CUresult cuEventDestroy_v2(void *event) {
  free(event);
  return kOk;
}

/* A 32-bit stream memory operation on pinned memory (flags 0: GEQ for a wait, the default
 * for a write). */
static CUresult value_op(int kind, void *stream, CUdeviceptr addr, uint32_t value, unsigned flags) {
  NEED_CONTEXT();
  if (flags != 0 || !translate((uintptr_t)addr, 4)) return kInvalidValue;
  struct op *op = new_op(kind);
  op->addr = (const uint32_t *)(uintptr_t)addr;
  op->value = value;
  if (kind == kWaitValue) __atomic_add_fetch(&fake_value_waits, 1, __ATOMIC_ACQ_REL);
  return enqueue(stream, op);
}
CUresult cuStreamWaitValue32_v2(void *stream, CUdeviceptr addr, uint32_t value, unsigned flags) {
  return value_op(kWaitValue, stream, addr, value, flags);
}
/* FAKE_CUDA_NO_STREAM_WRITES=1: refused, as by a device without stream memory operations. */
CUresult cuStreamWriteValue32_v2(void *stream, CUdeviceptr addr, uint32_t value, unsigned flags) {
  const char *refuse = getenv("FAKE_CUDA_NO_STREAM_WRITES");
  if (refuse && strcmp(refuse, "1") == 0) return kNotSupported;
  return value_op(kWriteValue, stream, addr, value, flags);
}
CUresult cuLaunchHostFunc(void *stream, void (*fn)(void *), void *arg) {
  NEED_CONTEXT();
  struct op *op = new_op(kHostFn);
  op->fn = fn;
  op->arg = arg;
  return enqueue(stream, op);
}

/* ---- Devices (the rest in fake_cuda_devices.c), modules and kernels ---------------------- */

CUresult cuDevicePrimaryCtxRelease_v2(int device) {
  (void)device;
  return fake_initialized ? kOk : kNotInitialized;
}
CUresult cuCtxGetDevice(int *device) {
  NEED_CONTEXT();
  *device = context_device;
  return kOk;
}
CUresult cuModuleLoadData(void **module, const void *image) {
  NEED_CONTEXT();
  DEVICE_SYNC("cuModuleLoadData");
  const unsigned char magic[4] = {0x50, 0xed, 0x55, 0xba}; /* a fatbin's, little endian */
  if (!image || memcmp(image, magic, 4) != 0) return kInvalidImage;
  *module = malloc(1);
  pthread_mutex_lock(&fake_kernels_mu);
  ++modules_loaded;
  pthread_mutex_unlock(&fake_kernels_mu);
  return kOk;
}
CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
  NEED_CONTEXT();
  if (!module || !name) return kInvalidValue;
  const void *kernel = fake_kernel_lookup(name);
  if (!kernel) return kNotFound;
  *function = (void *)kernel;
  return kOk;
}
CUresult cuModuleUnload(void *module) {
  if (!module) return kInvalidHandle;
  DEVICE_SYNC("cuModuleUnload");
  free(module);
  pthread_mutex_lock(&fake_kernels_mu);
  ++modules_unloaded;
  pthread_mutex_unlock(&fake_kernels_mu);
  return kOk;
}
CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                        void **extra) {
  NEED_CONTEXT();
  fake_maybe_die("launch");
  /* The limits of a real launch, and what ddl's kernels need (1-D, no shared memory). */
  if (!function || gx < 1 || gx > 0x7fffffffu || gy != 1 || gz != 1 || bx < 1 || bx > 1024 ||
      by != 1 || bz != 1 || shared != 0 || !params || !params[0] || extra)
    return kInvalidValue;
  struct op *op = new_op(kKernel);
  op->kernel = function;
  const size_t bytes = fake_kernel_args_bytes(function);
  op->args = malloc(bytes);
  memcpy(op->args, params[0], bytes); /* the driver copies the arguments at launch */
  op->grid = gx;
  op->block = bx;
  if (fake_kernel_waits(function)) __atomic_add_fetch(&fake_value_waits, 1, __ATOMIC_ACQ_REL);
  pthread_mutex_lock(&fake_kernels_mu);
  last_grid = gx;
  last_block = bx;
  strncpy(last_kernel, fake_kernel_name(function), sizeof last_kernel - 1);
  pthread_mutex_unlock(&fake_kernels_mu);
  return enqueue(stream, op);
}

/* Waits for the default stream (the stand-in's streams are not tracked per context). */
CUresult cuCtxSynchronize(void) {
  NEED_CONTEXT();
  cuStreamSynchronize(NULL);
  return sticky_fault() ? kIllegalAddress : kOk;
}

/* Synchronous copies: ordered after the legacy default stream's work, as the driver's are, and
 * holding the driver while they wait for it (see the top). */
static int stream_busy(void *handle) {
  struct stream *s = handle;
  pthread_mutex_lock(&s->mu);
  const int busy = s->head || s->running;
  pthread_mutex_unlock(&s->mu);
  return busy;
}
static CUresult wait_default_stream_holding(const char *what) {
  return fake_wait_holding_driver(what, "the default stream", stream_busy, stream_of(NULL));
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes) {
  NEED_CONTEXT();
  char *d = translate((uintptr_t)dst, bytes);
  if (!d || !src) return kInvalidValue;
  const CUresult r = wait_default_stream_holding("cuMemcpyHtoD");
  if (r != kOk) return r;
  memcpy(d, src, bytes);
  return kOk;
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
  NEED_CONTEXT();
  const char *s = translate((uintptr_t)src, bytes);
  if (!s || !dst) return kInvalidValue;
  const CUresult r = wait_default_stream_holding("cuMemcpyDtoH");
  if (r != kOk) return r;
  memcpy(dst, s, bytes);
  return kOk;
}

/* ---- For the tests' "kernels" ------------------------------------------------------------ */

/* The host shadow of device memory at dptr (NULL for memory the fake did not make). */
void *fake_cuda_host_view(CUdeviceptr dptr) {
  return translate((uintptr_t)dptr, 1);
}

/* Kernel launches run so far, modules loaded and unloaded, the last launch's grid and
 * kernel, and the launches that would have faulted on a GPU (the first one's reason). */
void fake_cuda_kernel_stats(int *run, int *loaded, int *unloaded, unsigned *grid, unsigned *block,
                            const char **kernel) {
  pthread_mutex_lock(&fake_kernels_mu);
  *run = kernels_run;
  *loaded = modules_loaded;
  *unloaded = modules_unloaded;
  *grid = last_grid;
  *block = last_block;
  *kernel = last_kernel;
  pthread_mutex_unlock(&fake_kernels_mu);
}
int fake_cuda_kernel_faults(const char **why) {
  pthread_mutex_lock(&fake_kernels_mu);
  const int n = kernel_faults;
  *why = kernel_fault;
  pthread_mutex_unlock(&fake_kernels_mu);
  return n;
}

/* What waits for the device in the stand-in driver (fake_cuda.c's top says why): the driver's
 * lock, held by a call while it waits for the device, which every other thread's call waits
 * for (an H200 showed this, bench/gpu.md, 2026-11-28); the calls that wait (device-
 * synchronizing ones for the streams that wait on a value, synchronous copies for the default
 * stream); and the count of those waits that would have hung on a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fake_cuda_internal.h"

int fake_value_waits;
static int sync_hangs;

static pthread_mutex_t driver_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t driver_cv = PTHREAD_COND_INITIALIZER;
static int driver_held;
static pthread_t driver_holder;

static int held_by_another(void) {
  return driver_held && !pthread_equal(driver_holder, pthread_self());
}

void fake_pass_driver(void) {
  pthread_mutex_lock(&driver_mu);
  while (held_by_another()) pthread_cond_wait(&driver_cv, &driver_mu);
  pthread_mutex_unlock(&driver_mu);
}

CUresult fake_wait_holding_driver(const char *what, const char *waited_for, int (*busy)(void *),
                                  void *arg) {
  pthread_mutex_lock(&driver_mu);
  while (held_by_another()) pthread_cond_wait(&driver_cv, &driver_mu);
  ++driver_held;
  driver_holder = pthread_self();
  pthread_mutex_unlock(&driver_mu);

  const char *limit = getenv("FAKE_CUDA_SYNC_WAIT_MS");
  const long wait_us = (limit ? atol(limit) : 3000) * 1000;
  CUresult result = kOk;
  for (long waited = 0; busy(arg); waited += 100) {
    if (waited >= wait_us) {
      __atomic_add_fetch(&sync_hangs, 1, __ATOMIC_ACQ_REL);
      fprintf(stderr, "fake_cuda: %s waited %ld ms for %s: on a GPU it would hang\n", what,
              wait_us / 1000, waited_for);
      result = kUnknown;
      break;
    }
    usleep(100);
  }

  pthread_mutex_lock(&driver_mu);
  if (--driver_held == 0) pthread_cond_broadcast(&driver_cv);
  pthread_mutex_unlock(&driver_mu);
  return result;
}

static int value_waits_pending(void *unused) {
  (void)unused;
  return __atomic_load_n(&fake_value_waits, __ATOMIC_ACQUIRE) > 0;
}

CUresult fake_device_sync(const char *what) {
  return fake_wait_holding_driver(what, "streams that wait on a value", value_waits_pending, NULL);
}

/* Device-synchronizing calls and synchronous copies that waited past FAKE_CUDA_SYNC_WAIT_MS. */
int fake_cuda_sync_hangs(void) {
  return __atomic_load_n(&sync_hangs, __ATOMIC_ACQUIRE);
}

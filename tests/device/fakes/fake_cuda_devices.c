/* The stand-in driver's devices (fake_cuda.c has the overview): FAKE_CUDA_DEVICES of them
 * (default 1), sharing one context and one memory, each with a name, a PCI address (entry N of
 * FAKE_CUDA_BUS_IDS, comma-separated, else 0000:0N:00.0 for device N - 1) and FAKE_CUDA_SMS
 * multiprocessors (default 4). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda_internal.h"

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v && atoi(v) > 0 ? atoi(v) : fallback;
}

int fake_device_count(void) {
  return env_int("FAKE_CUDA_DEVICES", 1);
}
CUresult cuDeviceGetCount(int *count) {
  if (!fake_initialized) return kNotInitialized;
  *count = fake_device_count();
  return kOk;
}
CUresult cuDeviceGetName(char *name, int len, int device) {
  if (!fake_initialized) return kNotInitialized;
  if (device < 0 || device >= fake_device_count() || len < 1) return kInvalidValue;
  strncpy(name, "Fake CUDA device (tests/device/fakes)", (size_t)len - 1);
  name[len - 1] = 0;
  return kOk;
}
CUresult cuDeviceGetPCIBusId(char *bus_id, int len, int device) {
  if (!fake_initialized) return kNotInitialized;
  if (device < 0 || device >= fake_device_count() || len < 13) return kInvalidValue;
  char own[32];
  snprintf(own, sizeof own, "0000:%02X:00.0", device + 1);
  const char *listed = getenv("FAKE_CUDA_BUS_IDS");
  for (int i = 0; listed && *listed; ++i) {
    const char *comma = strchr(listed, ',');
    const size_t n = comma ? (size_t)(comma - listed) : strlen(listed);
    if (i == device && n < sizeof own) {
      memcpy(own, listed, n);
      own[n] = 0;
      break;
    }
    listed = comma ? comma + 1 : NULL;
  }
  snprintf(bus_id, (size_t)len, "%s", own);
  return kOk;
}
CUresult cuDeviceGetAttribute(int *value, int attribute, int device) {
  if (!fake_initialized) return kNotInitialized;
  if (device < 0 || device >= fake_device_count()) return kInvalidValue;
  if (attribute != 16) return kInvalidValue; /* only CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
  *value = env_int("FAKE_CUDA_SMS", 4);
  return kOk;
}

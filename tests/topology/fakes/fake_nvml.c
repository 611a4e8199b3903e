/* A stand-in libnvidia-ml.so.1 for tests on machines without a GPU. Two P100s (compute
 * capability 6.0) at 0000:04:00.0 and 0000:05:00.0, joined by four NVLinks; each has a fifth
 * link to an NVSwitch at 0000:99:00.0; the first has a sixth to an IBM NPU (the CPU). It
 * implements no nvmlDeviceGetNvLinkRemoteDeviceType, so ddl must tell the ends apart itself. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} fake_pci_info;

enum { kSuccess = 0, kInvalidArgument = 2, kUninitialized = 1 };
static int initialized;

static int gpu_of(void *device) {
  return (int)(uintptr_t)device - 1;
}

static void fill(fake_pci_info *pci, unsigned bus, unsigned ids) {
  memset(pci, 0, sizeof *pci);
  pci->bus = bus;
  pci->pciDeviceId = ids;
  snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", bus);
  snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", bus);
}

int nvmlInit_v2(void) {
  initialized = 1;
  return kSuccess;
}
int nvmlShutdown(void) {
  initialized = 0;
  return kSuccess;
}
const char *nvmlErrorString(int rc) {
  return rc == kSuccess ? "Success" : "fake NVML error";
}
int nvmlDeviceGetCount_v2(unsigned *count) {
  if (!initialized) return kUninitialized;
  *count = 2;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **device) {
  if (index >= 2) return kInvalidArgument;
  *device = (void *)(uintptr_t)(index + 1);
  return kSuccess;
}
int nvmlDeviceGetPciInfo_v3(void *device, fake_pci_info *pci) {
  fill(pci, gpu_of(device) == 0 ? 0x04 : 0x05, 0x15f810deu);
  return kSuccess;
}
int nvmlDeviceGetName(void *device, char *name, unsigned length) {
  snprintf(name, length, "Fake P100 #%d", gpu_of(device));
  return kSuccess;
}
int nvmlDeviceGetCudaComputeCapability(void *device, int *major, int *minor) {
  (void)device;
  *major = 6;
  *minor = 0;
  return kSuccess;
}
int nvmlDeviceGetNvLinkState(void *device, unsigned link, int *active) {
  if (link >= 6) return kInvalidArgument;
  *active = (link < 5 || gpu_of(device) == 0) ? 1 : 0;
  return kSuccess;
}
int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *device, unsigned link, fake_pci_info *pci) {
  if (link < 4) {
    fill(pci, gpu_of(device) == 0 ? 0x05 : 0x04, 0x15f810deu);
  } else if (link == 4) {
    fill(pci, 0x99, 0x1af110deu);
  } else {
    fill(pci, 0x00, 0x04ea1014u);
  }
  return kSuccess;
}

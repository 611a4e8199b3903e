// NVML through dlopen. Only the handful of types and entry points we call are declared here,
// with the layouts of nvml.h (the CUDA toolkit may not be installed where ddl is built).
#include "lib/topology/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <utility>

#include "lib/common/log.h"

namespace ddl {
namespace topo {
namespace {

typedef int nvmlReturn_t;  // NVML_SUCCESS == 0
typedef struct nvmlDevice_st *nvmlDevice_t;
struct nvmlPciInfo_t {  // nvmlPciInfo_st as of the _v3 / _v2 entry points
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;  // device id << 16 | vendor id
  unsigned int pciSubSystemId;
  char busId[32];
};
constexpr unsigned kNvmlMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS (Hopper has 18)
constexpr int kNvmlFeatureEnabled = 1;
constexpr int kNvlinkRemoteGpu = 0, kNvlinkRemoteIbmNpu = 1, kNvlinkRemoteSwitch = 2;
constexpr uint16_t kIbmVendor = 0x1014;  // POWER's NVLink "NPU" bridges: the CPU end

struct NvmlApi {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  const char *(*error_string)(nvmlReturn_t);
  nvmlReturn_t (*device_count)(unsigned *);
  nvmlReturn_t (*device_by_index)(unsigned, nvmlDevice_t *);
  nvmlReturn_t (*pci_info)(nvmlDevice_t, nvmlPciInfo_t *);
  nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned);
  nvmlReturn_t (*compute_capability)(nvmlDevice_t, int *, int *);
  nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned, int *);
  nvmlReturn_t (*remote_pci_info)(nvmlDevice_t, unsigned, nvmlPciInfo_t *);
  nvmlReturn_t (*remote_type)(nvmlDevice_t, unsigned, int *);  // optional (driver >= 460)
};

template <typename F>
bool load(void *handle, const char *symbol, F *fn) {
  *fn = reinterpret_cast<F>(dlsym(handle, symbol));
  return *fn != nullptr;
}

Status open_nvml(const std::string &library, NvmlApi *api) {
  // Never dlclose'd: driver libraries start threads and register handlers, and unloading
  // them is a known source of crashes at exit (NCCL keeps them loaded too).
  void *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char *why = dlerror();
    return unsupported("NVML: cannot load %s: %s", library.c_str(), why ? why : "?");
  }
  bool ok = load(handle, "nvmlInit_v2", &api->init) &&
            load(handle, "nvmlShutdown", &api->shutdown) &&
            load(handle, "nvmlErrorString", &api->error_string) &&
            load(handle, "nvmlDeviceGetCount_v2", &api->device_count) &&
            load(handle, "nvmlDeviceGetHandleByIndex_v2", &api->device_by_index) &&
            load(handle, "nvmlDeviceGetPciInfo_v3", &api->pci_info) &&
            load(handle, "nvmlDeviceGetName", &api->name) &&
            load(handle, "nvmlDeviceGetCudaComputeCapability", &api->compute_capability) &&
            load(handle, "nvmlDeviceGetNvLinkState", &api->link_state) &&
            load(handle, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &api->remote_pci_info);
  if (!ok) {
    const char *why = dlerror();
    return unsupported("NVML: %s lacks an entry point: %s", library.c_str(), why ? why : "?");
  }
  load(handle, "nvmlDeviceGetNvLinkRemoteDeviceType", &api->remote_type);
  return Status::Ok();
}

NvRemoteKind remote_kind_from_nvml(int type) {
  switch (type) {
    case kNvlinkRemoteGpu:
      return NvRemoteKind::kGpu;
    case kNvlinkRemoteIbmNpu:
      return NvRemoteKind::kCpu;
    case kNvlinkRemoteSwitch:
      return NvRemoteKind::kNvSwitch;
    default:
      return NvRemoteKind::kUnknown;
  }
}

void query_links(const NvmlApi &api, nvmlDevice_t device, const NvmlGpu &gpu,
                 std::vector<NvmlLink> *links) {
  std::map<std::string, NvmlLink> by_remote;
  for (unsigned link = 0; link < kNvmlMaxLinks; ++link) {
    int state = 0;
    // Links past the GPU's count answer NVML_ERROR_INVALID_ARGUMENT or NOT_SUPPORTED.
    if (api.link_state(device, link, &state) != 0 || state != kNvmlFeatureEnabled) continue;
    nvmlPciInfo_t remote = {};
    std::string remote_bus;
    if (api.remote_pci_info(device, link, &remote) != 0 ||
        !normalize_pci_bus_id(remote.busId, &remote_bus)) {
      continue;
    }
    NvmlLink &entry = by_remote[remote_bus];
    entry.gpu_bus_id = gpu.bus_id;
    entry.remote_bus_id = remote_bus;
    entry.remote_vendor = static_cast<uint16_t>(remote.pciDeviceId & 0xffff);
    int type = -1;
    if (api.remote_type != nullptr && api.remote_type(device, link, &type) == 0) {
      entry.remote = remote_kind_from_nvml(type);
    }
    entry.links += 1;
    entry.gbs += nvlink_lane_gbs(gpu.cc_major);
  }
  for (auto &kv : by_remote) links->push_back(kv.second);
}

// How apply_nvml_report sees the remote end of a link when NVML did not say: a GPU it knows,
// an IBM NPU (the CPU), else an NVSwitch, as NCCL assumes.
NvRemoteKind resolve_remote(const NvmlLink &link, const Topology &topology) {
  if (link.remote != NvRemoteKind::kUnknown) return link.remote;
  if (find_gpu(topology, link.remote_bus_id) >= 0) return NvRemoteKind::kGpu;
  if (link.remote_vendor == kIbmVendor) return NvRemoteKind::kCpu;
  return NvRemoteKind::kNvSwitch;
}

int nvswitch_index(const Topology &topology, const std::string &bus_id) {
  for (size_t i = 0; i < topology.nvswitches.size(); ++i) {
    if (topology.nvswitches[i].bus_id == bus_id) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

double nvlink_lane_gbs(int cc_major) {
  if (cc_major == 6) return 20.0;   // P100, NVLink 1
  if (cc_major >= 10) return 50.0;  // Blackwell, NVLink 5
  return 25.0;                      // NVLink 2 (V100), 3 (A100), 4 (H100)
}

Status query_nvml(const std::string &library, NvmlReport *report) {
  *report = NvmlReport();
  NvmlApi api = {};
  DDL_RETURN_IF_ERROR(open_nvml(library, &api));
  nvmlReturn_t rc = api.init();
  if (rc != 0) return unsupported("NVML: nvmlInit failed: %s", api.error_string(rc));
  unsigned count = 0;
  rc = api.device_count(&count);
  if (rc != 0) {
    api.shutdown();
    return unsupported("NVML: nvmlDeviceGetCount failed: %s", api.error_string(rc));
  }
  std::vector<std::pair<nvmlDevice_t, NvmlGpu>> devices;
  for (unsigned i = 0; i < count && i < 1024; ++i) {
    nvmlDevice_t device = nullptr;
    nvmlPciInfo_t pci = {};
    NvmlGpu gpu;
    if (api.device_by_index(i, &device) != 0 || api.pci_info(device, &pci) != 0 ||
        !normalize_pci_bus_id(pci.busId, &gpu.bus_id)) {
      DDL_DEBUG("NVML: skipping device %u (no handle or PCI info)", i);
      continue;
    }
    char name[96] = {};
    if (api.name(device, name, sizeof name - 1) == 0) gpu.name = name;
    int minor = 0;
    if (api.compute_capability(device, &gpu.cc_major, &minor) != 0) gpu.cc_major = 0;
    devices.emplace_back(device, gpu);
  }
  for (const auto &d : devices) {
    report->gpus.push_back(d.second);
    query_links(api, d.first, d.second, &report->links);
  }
  api.shutdown();
  DDL_DEBUG("NVML: %zu GPUs, %zu NVLink bundles", report->gpus.size(), report->links.size());
  return Status::Ok();
}

void apply_nvml_report(const NvmlReport &report, Topology *topology) {
  for (const NvmlGpu &gpu : report.gpus) {
    int index = find_gpu(*topology, gpu.bus_id);
    if (index >= 0 && !gpu.name.empty()) topology->gpus[index].model = gpu.name;
  }
  if (!topology->nvlinks.empty()) return;  // hwloc's matrix already said it

  // Switches first, so that sorting them does not move indices the links hold.
  for (const NvmlLink &link : report.links) {
    if (resolve_remote(link, *topology) == NvRemoteKind::kNvSwitch &&
        nvswitch_index(*topology, link.remote_bus_id) < 0) {
      topology->nvswitches.push_back(NvSwitch{link.remote_bus_id});
    }
  }
  std::sort(topology->nvswitches.begin(), topology->nvswitches.end(),
            [](const NvSwitch &a, const NvSwitch &b) { return a.bus_id < b.bus_id; });

  // GPU-GPU bundles are reported from both ends: keep one, at the larger figure.
  std::map<std::pair<int, int>, double> gpu_pairs;
  for (const NvmlLink &link : report.links) {
    int gpu = find_gpu(*topology, link.gpu_bus_id);
    if (gpu < 0) continue;
    NvLink edge;
    edge.a = NvEnd{NvEndKind::kGpu, gpu};
    edge.gbs = link.gbs;
    switch (resolve_remote(link, *topology)) {
      case NvRemoteKind::kGpu: {
        int peer = find_gpu(*topology, link.remote_bus_id);
        if (peer < 0 || peer == gpu) continue;
        double &gbs = gpu_pairs[std::make_pair(std::min(gpu, peer), std::max(gpu, peer))];
        gbs = std::max(gbs, link.gbs);
        continue;
      }
      case NvRemoteKind::kCpu:
        // The NPU's own bus id is not in hwloc's tree; NCCL too ties it to the GPU's CPU.
        if (topology->gpus[gpu].pci.socket < 0) continue;
        edge.b = NvEnd{NvEndKind::kCpu, topology->gpus[gpu].pci.socket};
        break;
      case NvRemoteKind::kNvSwitch:
      case NvRemoteKind::kUnknown:
        edge.b = NvEnd{NvEndKind::kNvSwitch, nvswitch_index(*topology, link.remote_bus_id)};
        break;
    }
    topology->nvlinks.push_back(edge);
  }
  for (const auto &kv : gpu_pairs) {
    NvLink edge;
    edge.a = NvEnd{NvEndKind::kGpu, kv.first.first};
    edge.b = NvEnd{NvEndKind::kGpu, kv.first.second};
    edge.gbs = kv.second;
    topology->nvlinks.push_back(edge);
  }
}

}  // namespace topo
}  // namespace ddl

// libibverbs through dlopen. verbs.h gives the struct layouts only; nothing is linked.
#include "lib/topology/ibverbs.h"

#include <dlfcn.h>

#include <algorithm>

#include "lib/common/log.h"

#if __has_include(<infiniband/verbs.h>)
#include <infiniband/verbs.h>
#define DDL_HAVE_VERBS_H 1
#endif

namespace ddl {
namespace topo {

int ib_width_lanes(int active_width) {
  switch (active_width) {
    case 1:
      return 1;
    case 2:
      return 4;
    case 4:
      return 8;
    case 8:
      return 12;
    case 16:
      return 2;
    default:
      return 0;
  }
}

double ib_lane_gbps(int active_speed) {
  switch (active_speed) {
    case 1:
      return 2.5;  // SDR
    case 2:
      return 5.0;  // DDR
    case 4:
    case 8:
      return 10.0;  // QDR, FDR10
    case 16:
      return 14.0;  // FDR
    case 32:
      return 25.0;  // EDR
    case 64:
      return 50.0;  // HDR
    case 128:
      return 100.0;  // NDR
    case 256:
      return 200.0;  // XDR
    default:
      return 0.0;
  }
}

#ifdef DDL_HAVE_VERBS_H

namespace {

// The exported ibv_query_port is the compat entry point verbs.h's inline wrapper falls back
// to; it fills the leading fields of ibv_port_attr, which are all we read.
struct VerbsApi {
  ibv_device **(*get_device_list)(int *);
  void (*free_device_list)(ibv_device **);
  const char *(*get_device_name)(ibv_device *);
  ibv_context *(*open_device)(ibv_device *);
  int (*close_device)(ibv_context *);
  int (*query_device)(ibv_context *, ibv_device_attr *);
  int (*query_port)(ibv_context *, uint8_t, ibv_port_attr *);
};

template <typename F>
bool load(void *handle, const char *symbol, F *fn) {
  *fn = reinterpret_cast<F>(dlsym(handle, symbol));
  return *fn != nullptr;
}

NicPort port_from_attr(int number, const ibv_port_attr &attr) {
  NicPort port;
  port.number = number;
  port.state = attr.state == IBV_PORT_ACTIVE_DEFER
                   ? PortState::kActive
                   : static_cast<PortState>(std::min<int>(attr.state, 4));
  port.link_layer = attr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
  port.width = ib_width_lanes(attr.active_width);
  port.speed_gbps = port.width * ib_lane_gbps(attr.active_speed);
  return port;
}

}  // namespace

Status query_ibverbs(const std::string &library, std::vector<VerbsDevice> *devices) {
  devices->clear();
  // Kept loaded for the life of the process: providers (libmlx5) register with it.
  void *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char *why = dlerror();
    return unsupported("ibverbs: cannot load %s: %s", library.c_str(), why ? why : "?");
  }
  VerbsApi api = {};
  if (!load(handle, "ibv_get_device_list", &api.get_device_list) ||
      !load(handle, "ibv_free_device_list", &api.free_device_list) ||
      !load(handle, "ibv_get_device_name", &api.get_device_name) ||
      !load(handle, "ibv_open_device", &api.open_device) ||
      !load(handle, "ibv_close_device", &api.close_device) ||
      !load(handle, "ibv_query_device", &api.query_device) ||
      !load(handle, "ibv_query_port", &api.query_port)) {
    return unsupported("ibverbs: %s lacks an entry point", library.c_str());
  }
  int count = 0;
  ibv_device **list = api.get_device_list(&count);
  if (list == nullptr) return Status::Ok();  // no RDMA subsystem: no devices
  for (int i = 0; i < count; ++i) {
    const char *name = api.get_device_name(list[i]);
    if (name == nullptr) continue;
    VerbsDevice device;
    device.name = name;
    ibv_context *context = api.open_device(list[i]);
    if (context == nullptr) {
      DDL_DEBUG("ibverbs: cannot open %s; keeping what hwloc said", name);
      continue;
    }
    ibv_device_attr device_attr = {};
    if (api.query_device(context, &device_attr) == 0) {
      for (int p = 1; p <= device_attr.phys_port_cnt && p <= 255; ++p) {
        ibv_port_attr attr = {};
        if (api.query_port(context, static_cast<uint8_t>(p), &attr) != 0) continue;
        device.ports.push_back(port_from_attr(p, attr));
      }
    }
    api.close_device(context);
    devices->push_back(device);
  }
  api.free_device_list(list);
  return Status::Ok();
}

#else  // !DDL_HAVE_VERBS_H

Status query_ibverbs(const std::string &library, std::vector<VerbsDevice> *devices) {
  devices->clear();
  return unsupported("ibverbs: ddl was built without infiniband/verbs.h");
}

#endif

void apply_ibverbs_ports(const std::vector<VerbsDevice> &devices, Topology *topology) {
  for (const VerbsDevice &device : devices) {
    int index = find_nic(*topology, device.name);
    if (index >= 0 && topology->nics[index].rdma) {
      if (!device.ports.empty()) topology->nics[index].ports = device.ports;
      continue;
    }
    Nic nic;
    nic.name = device.name;
    nic.rdma = true;
    nic.ports = device.ports;
    topology->nics.push_back(nic);
    DDL_DEBUG("ibverbs: %s is not in hwloc's tree; its location is unknown", device.name.c_str());
  }
  // Keep RDMA devices first, in natural name order.
  std::stable_sort(topology->nics.begin(), topology->nics.end(), [](const Nic &a, const Nic &b) {
    if (a.rdma != b.rdma) return a.rdma;
    return natural_less(a.name, b.name);
  });
}

}  // namespace topo
}  // namespace ddl

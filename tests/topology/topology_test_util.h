// Helpers shared by the topology tests: loading a topology file, finding the real servers.
#pragma once

#include <criterion/criterion.h>

#include <sys/stat.h>
#include <cstdlib>
#include <string>

#include "lib/topology/nic_pairing.h"
#include "lib/topology/topology.h"

namespace topo_test {

inline std::string data_file(const char *name) {
  return std::string(DDL_TOPO_TEST_DATA) + "/" + name;
}

// A real server's topology from $DDL_SHARED_DIR/topologies, or "" when it is not there.
inline std::string shared_file(const char *name) {
  const char *dir = std::getenv("DDL_SHARED_DIR");
  if (dir == nullptr) return std::string();
  std::string path = std::string(dir) + "/topologies/" + name;
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? path : std::string();
}

inline ddl::topo::Topology load(const std::string &path) {
  ddl::topo::DiscoverOptions options;
  options.xml_file = path;
  ddl::topo::Topology topology;
  ddl::Status status = ddl::topo::discover(options, &topology);
  cr_assert(status.ok(), "discover(%s): %s", path.c_str(), status.message().c_str());
  return topology;
}

// Pairing as on a machine with a peer-memory module loaded and the default GDR level.
inline std::vector<ddl::topo::GpuNic> pair(const ddl::topo::Topology &topology,
                                           bool include_down_ports = false) {
  ddl::topo::PairingOptions options;
  options.gdr.peer_memory = true;
  options.include_down_ports = include_down_ports;
  return ddl::topo::pair_gpus_with_nics(topology, options);
}

inline std::string nic_of(const ddl::topo::Topology &topology,
                          const std::vector<ddl::topo::GpuNic> &pairs, int gpu) {
  return pairs[gpu].nic < 0 ? std::string("none") : topology.nics[pairs[gpu].nic].name;
}

}  // namespace topo_test

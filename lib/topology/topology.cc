// Small helpers on the topology model: names, look-ups, PCI bus id spelling.
#include "lib/topology/topology.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "lib/common/params.h"

namespace ddl {
namespace topo {

const char *port_state_name(PortState state) {
  switch (state) {
    case PortState::kDown:
      return "down";
    case PortState::kInit:
      return "init";
    case PortState::kArmed:
      return "armed";
    case PortState::kActive:
      return "active";
    case PortState::kUnknown:
      break;
  }
  return "unknown";
}

bool Nic::usable() const {
  if (ports.empty()) return true;
  for (const NicPort &port : ports) {
    if (port.state == PortState::kActive || port.state == PortState::kUnknown) return true;
  }
  return false;
}

double Nic::port_gbs() const {
  double best = 0;
  for (const NicPort &port : ports) {
    if (port.state == PortState::kDown || port.state == PortState::kInit) continue;
    best = std::max(best, port.speed_gbps / 8.0);
  }
  return best;
}

DiscoverOptions discover_options_from_env() {
  DiscoverOptions options;
  options.xml_file = env_string("DDL_TOPO_FILE");
  options.dump_file = env_string("DDL_TOPO_DUMP");
  options.file_is_this_machine = true;
  return options;
}

namespace {

// Parses hex digits [begin, end) of text; false when empty, too long or not hex.
bool parse_hex(const std::string &text, size_t begin, size_t end, size_t max_digits,
               unsigned long *value) {
  if (end <= begin || end - begin > max_digits) return false;
  unsigned long v = 0;
  for (size_t i = begin; i < end; ++i) {
    int c = std::tolower(static_cast<unsigned char>(text[i]));
    int digit = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (digit < 0) return false;
    v = v * 16 + static_cast<unsigned long>(digit);
  }
  *value = v;
  return true;
}

}  // namespace

bool normalize_pci_bus_id(const std::string &text, std::string *normalized) {
  // [domain:]bus:device.function
  size_t dot = text.rfind('.');
  size_t last_colon = text.rfind(':');
  if (dot == std::string::npos || last_colon == std::string::npos || last_colon > dot) return false;
  size_t first_colon = text.find(':');
  unsigned long domain = 0, bus = 0, device = 0, function = 0;
  size_t bus_begin = 0;
  if (first_colon != last_colon) {
    if (!parse_hex(text, 0, first_colon, 8, &domain) || domain > 0xffff) return false;
    bus_begin = first_colon + 1;
  }
  if (!parse_hex(text, bus_begin, last_colon, 2, &bus) ||
      !parse_hex(text, last_colon + 1, dot, 2, &device) || device > 0x1f ||
      !parse_hex(text, dot + 1, text.size(), 1, &function) || function > 7) {
    return false;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04lx:%02lx:%02lx.%lx", domain, bus, device, function);
  *normalized = buf;
  return true;
}

int find_gpu(const Topology &topology, const std::string &bus_id) {
  std::string wanted;
  if (!normalize_pci_bus_id(bus_id, &wanted)) return -1;
  for (size_t i = 0; i < topology.gpus.size(); ++i) {
    if (topology.gpus[i].pci.bus_id == wanted) return static_cast<int>(i);
  }
  return -1;
}

int find_nic(const Topology &topology, const std::string &name) {
  for (size_t i = 0; i < topology.nics.size(); ++i) {
    if (topology.nics[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int outermost_switch(const Topology &topology, const PciLocation &location) {
  return location.switches.empty() ? -1 : location.switches.back();
}

bool natural_less(const std::string &a, const std::string &b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0;
    bool db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      // Compare numerically without overflow: strip leading zeros, then length, then digits.
      size_t is = i, js = j;
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      int cmp = a.compare(is, ie - is, b, js, je - js);
      if (cmp != 0) return cmp < 0;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

}  // namespace topo
}  // namespace ddl

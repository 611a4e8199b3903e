// ddl_topo: what ddl sees of a machine. A short tree, each GPU's NIC with its path class and
// GPUDirect RDMA decision (one greppable line per GPU), and optionally a Graphviz picture.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lib/topology/dot.h"
#include "lib/topology/nic_pairing.h"
#include "lib/topology/report.h"
#include "lib/topology/topology.h"

namespace {

const char kUsage[] =
    "usage: ddl_topo [--input FILE] [--dump FILE] [--dot FILE] [--png FILE] [--matrix]\n"
    "                [--include-down-ports]\n"
    "\n"
    "Prints the machine as ddl sees it: sockets, NUMA nodes, PCIe switches, GPUs, NICs and\n"
    "NVLinks, then one line per GPU:\n"
    "  gpu <pci-bus-id> nic <name|none> path <LOC|NVL|PIX|PXB|PHB|SYS|-> gdr <yes|no>\n"
    "\n"
    "  --input FILE          describe the machine of this hwloc XML (lstopo --of xml, or a\n"
    "                        DDL_TOPO_DUMP file); GPUDirect decisions then assume that machine\n"
    "                        has its peer-memory module loaded\n"
    "  --dump FILE           write what was found as hwloc XML (as DDL_TOPO_DUMP)\n"
    "  --dot FILE            write a Graphviz drawing\n"
    "  --png FILE            render that drawing with Graphviz's dot\n"
    "  --matrix              print the path class between every two GPUs and NICs\n"
    "  --include-down-ports  let GPUs pair with NICs whose ports are all down\n"
    "\n"
    "Environment: DDL_TOPO_FILE (this machine's topology from a file: GPUDirect checks this\n"
    "machine's modules), DDL_TOPO_DUMP, DDL_GDR_LEVEL (LOC, PIX, PXB, PHB, SYS; default PXB).\n";

struct Args {
  std::string input, dump, dot, png;
  bool matrix = false;
  bool include_down_ports = false;
};

// Returns 0 on success, 2 on a usage error (already reported).
int parse_args(int argc, char **argv, Args *args) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string *out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    bool ok = true;
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--input") {
      ok = value(&args->input);
    } else if (arg == "--dump") {
      ok = value(&args->dump);
    } else if (arg == "--dot") {
      ok = value(&args->dot);
    } else if (arg == "--png") {
      ok = value(&args->png);
    } else if (arg == "--matrix") {
      args->matrix = true;
    } else if (arg == "--include-down-ports") {
      args->include_down_ports = true;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "ddl_topo: bad argument '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  return 0;
}

int fail(const ddl::Status &status) {
  std::fprintf(stderr, "ddl_topo: %s\n", status.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char **argv) {
  using namespace ddl::topo;
  Args args;
  if (int rc = parse_args(argc, argv, &args)) return rc;

  DiscoverOptions options = discover_options_from_env();
  if (!args.input.empty()) {
    options.xml_file = args.input;
    options.file_is_this_machine = false;
  }
  if (!args.dump.empty()) options.dump_file = args.dump;
  Topology topology;
  ddl::Status status = discover(options, &topology);
  if (!status.ok()) return fail(status);

  PairingOptions pairing;
  pairing.include_down_ports = args.include_down_ports;
  status = gdr_policy_from_env(&pairing.gdr);
  if (!status.ok()) return fail(status);
  std::string module = loaded_peer_memory_module();
  std::string gdr_note = module.empty() ? "no peer-memory module loaded" : module + " loaded";
  if (!args.input.empty()) {
    pairing.gdr.peer_memory = true;  // judging another machine: assume it is set up for GDR
    gdr_note = "peer-memory module assumed (--input)";
  }
  std::vector<GpuNic> pairs = pair_gpus_with_nics(topology, pairing);

  std::fputs(topology_tree(topology).c_str(), stdout);
  if (args.matrix) {
    std::printf("\n%s\n", path_matrix(topology, candidate_nics(topology, true)).c_str());
  }
  if (!topology.gpus.empty()) {
    std::printf("gdr: up to %s, %s\n", path_type_name(pairing.gdr.max_path), gdr_note.c_str());
  }
  std::fputs(gpu_nic_lines(topology, pairs).c_str(), stdout);

  if (!args.dot.empty() || !args.png.empty()) {
    std::string dot = topology_dot(topology, pairs);
    if (!args.dot.empty()) {
      FILE *f = std::fopen(args.dot.c_str(), "w");
      if (f == nullptr || std::fputs(dot.c_str(), f) < 0 || std::fclose(f) != 0) {
        return fail(ddl::system_error(errno, "cannot write %s", args.dot.c_str()));
      }
    }
    if (!args.png.empty()) {
      status = render_png(dot, args.png);
      if (!status.ok()) return fail(status);
    }
  }
  return 0;
}

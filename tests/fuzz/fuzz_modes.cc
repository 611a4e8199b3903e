// The mode strings users set: DDL_ALGO (known_algorithm, as resolve_config checks it, and
// choose_algorithm, which honours it per call: lib/algorithms/registry.h) and DDL_GDR_LEVEL
// (parse_path_type, lib/topology/paths.h, as gdr_policy_from_env reads it). resolve_config's own
// handling of DDL_ALGO, DDL_TIMEOUT_MS, DDL_CHUNK_BYTES and DDL_JOB_TOKEN is fuzz_config's;
// sizes and integers are fuzz_params'; datatype and op names fuzz_datatype's.
//
// Input: byte 0 picks the collective, byte 1 the rank count, the rest is the string. Checked:
// a name is known exactly when it is "" or in the algorithm table; choose_algorithm returns an
// algorithm of the asked-for collective, the named one when the name is one of that
// collective's; a path level is accepted exactly when it is one of the six names in any case,
// and maps back to that name.
#include <strings.h>

#include <cctype>
#include <cstring>
#include <string>

#include "fuzz_util.h"
#include "lib/algorithms/registry.h"
#include "lib/topology/paths.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  const auto collective = static_cast<ddl::Collective>(data[0] % 5);
  const int nranks = 1 + data[1] % 64;
  const std::string text(reinterpret_cast<const char *>(data + 2), size - 2);

  // DDL_ALGO.
  bool in_table = false, for_this = false;
  for (const ddl::AlgorithmInfo &info : ddl::algorithm_table()) {
    in_table = in_table || text == info.name;
    for_this = for_this || (text == info.name && info.collective == collective);
  }
  FUZZ_CHECK(ddl::known_algorithm(text) == (text.empty() || in_table), "known_algorithm('%s')",
             text.c_str());
  ddl::CollectiveArgs args;
  args.collective = collective;
  args.nranks = nranks;
  args.rank = data[0] % nranks;
  args.count = static_cast<size_t>(data[1]) << (data[0] >> 3);
  args.algorithm = text;
  std::string why;
  const ddl::AlgorithmInfo &chosen = ddl::choose_algorithm(args, &why);
  FUZZ_CHECK(chosen.collective == collective, "%s chosen for %s", chosen.name,
             ddl::collective_name(collective));
  if (for_this)
    FUZZ_CHECK(text == chosen.name, "asked for '%s', got %s", text.c_str(), chosen.name);
  FUZZ_CHECK(!why.empty(), "no reason given");

  // DDL_GDR_LEVEL.
  ddl::topo::PathType type = ddl::topo::PathType::kSys;
  const bool accepted = ddl::topo::parse_path_type(text, &type);
  bool want = false;
  for (int i = 0; i < ddl::topo::kPathTypeCount; ++i) {
    const char *name = ddl::topo::path_type_name(static_cast<ddl::topo::PathType>(i));
    if (text.size() == std::strlen(name) && strncasecmp(text.data(), name, text.size()) == 0) {
      want = true;
      FUZZ_CHECK(accepted && type == static_cast<ddl::topo::PathType>(i), "'%s' is %s",
                 text.c_str(), name);
    }
  }
  FUZZ_CHECK(accepted == want, "parse_path_type('%s') says %d", text.c_str(), accepted);
  return 0;
}

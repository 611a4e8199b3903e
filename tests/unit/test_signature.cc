// How an error names a call from its signature (lib/exec/signature.h): every collective with
// the fields that matter for it, the v forms (whose values lie after the point-to-point kinds)
// included, and bytes from a peer that name no collective.
#include <criterion/criterion.h>

#include <string>

#include "lib/common/call.h"
#include "lib/exec/signature.h"

using ddl::Collective;

namespace {

std::string described(Collective c, uint64_t count, int op, int root) {
  ddl::CallSignature s;
  s.seq = 3;
  s.collective = static_cast<uint8_t>(c);
  s.dtype = DDL_FLOAT32;
  s.op = static_cast<uint8_t>(op);
  s.root = root;
  s.count = count;
  return ddl::describe_signature(s);
}

}  // namespace

Test(signature, each_collective_with_its_fields) {
  const std::pair<Collective, const char *> cases[] = {
      {Collective::kAllreduce, "allreduce #3 (count 7, float32, max)"},
      {Collective::kBroadcast, "broadcast #3 (count 7, float32, root 1)"},
      {Collective::kReduce, "reduce #3 (count 7, float32, max, root 1)"},
      {Collective::kAlltoallv, "alltoallv #3 (float32)"},
      {Collective::kAllgatherv, "allgatherv #3 (float32)"},
      {Collective::kReduceScatterv, "reduce_scatterv #3 (float32, max)"},
      {Collective::kExscan, "exscan #3 (count 7, float32, max)"},
      {Collective::kBarrier, "barrier #3"},
  };
  for (const auto &[collective, want] : cases) {
    const std::string got = described(collective, 7, DDL_MAX, 1);
    cr_assert(got == want, "got \"%s\", want \"%s\"", got.c_str(), want);
  }
}

Test(signature, a_byte_that_names_no_collective) {
  const std::string got = described(static_cast<Collective>(200), 7, DDL_MAX, 1);
  cr_assert(got == "unknown #3 (count 7, float32)", "got \"%s\"", got.c_str());
}

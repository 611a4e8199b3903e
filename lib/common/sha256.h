// SHA-256 (FIPS 180-4), for deriving per-job secrets from a long-lived one without sending the
// latter over the network (lib/bootstrap/slurm_root.cc).
#pragma once
#include <string>

namespace ddl {

// The digest of `data` as 64 lowercase hex digits.
std::string sha256_hex(const std::string &data);

}  // namespace ddl

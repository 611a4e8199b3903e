// The communicator's settings: ddl_config_t (as far as the caller's struct reaches), then
// the DDL_* environment variables, then defaults.
#pragma once

#include <string>

#include "ddl/ddl.h"
#include "lib/common/status.h"

namespace ddl {

struct CommConfig {
  int timeout_ms = 300000;
  std::string job_token;
  // What ranks that join through ddl_comm_grow present: the job's token as given at init (split
  // and shrink give their communicators fresh tokens for their own rendezvous, not this).
  std::string join_token;
  size_t chunk_bytes = 512 * 1024;
  std::string algorithm;  // DDL_ALGO: force an algorithm ("" = the cost models choose)
  // DDL_FUSION_BYTES: grouped allreduces up to this size are fused, into buffers of at most
  // this size (0: never).
  size_t fusion_bytes = 64 * 1024;
  // DDL_HIER_PIECES: hier cuts the vector into this many pieces whose tiers overlap
  // (lib/algorithms/hier.h); 0: the cost models choose.
  int hier_pieces = 0;
};

// Validates `config` (may be null) and fills *out. Bad values are DDL_ERR_INVALID_ARGUMENT
// naming the field or variable.
Status resolve_config(const ddl_config_t *config, CommConfig *out);

}  // namespace ddl

#include "lib/core/config.h"

#include <cstddef>
#include <cstdlib>

#include "lib/algorithms/hier.h"
#include "lib/algorithms/registry.h"
#include "lib/common/log.h"
#include "lib/common/params.h"

namespace ddl {
namespace {

// Whether the caller's struct (of config->size bytes) contains `field`.
#define DDL_HAS_FIELD(config, field) \
  ((config)->size >= offsetof(ddl_config_t, field) + sizeof((config)->field))

// One bound for config.timeout_ms and DDL_TIMEOUT_MS: a deadline beyond a day is no deadline
// (a hung job would sit on its GPUs for that long), and most such values are mistakes (seconds
// or microseconds given as milliseconds, an uninitialised field).
constexpr int64_t kMaxTimeoutMs = 24LL * 3600 * 1000;
constexpr uint64_t kMinChunkBytes = 4096, kMaxChunkBytes = 1ULL << 30;

}  // namespace

Status resolve_config(const ddl_config_t *config, CommConfig *out) {
  *out = CommConfig();
  if (config) {
    // version is read only once size says the caller's struct holds it.
    if (config->size < offsetof(ddl_config_t, timeout_ms))
      return invalid_argument(
          "config: size %zu is too small for a ddl_config_t; initialise it with "
          "DDL_CONFIG_INITIALIZER",
          config->size);
    if (config->version == 0 || config->version > 1000)
      return invalid_argument(
          "config: version %u does not look like a ddl_config_t; initialise it with "
          "DDL_CONFIG_INITIALIZER",
          config->version);
  }
  std::string env = env_string("DDL_TIMEOUT_MS");
  int64_t value = 0;
  if (config && DDL_HAS_FIELD(config, timeout_ms) && config->timeout_ms != 0) {
    if (config->timeout_ms < 0 || config->timeout_ms > kMaxTimeoutMs)
      return invalid_argument(
          "config.timeout_ms = %d: expected milliseconds in 1..%lld (at most 24 h; 0 = "
          "DDL_TIMEOUT_MS or the default)",
          config->timeout_ms, static_cast<long long>(kMaxTimeoutMs));
    out->timeout_ms = config->timeout_ms;
  } else if (!env.empty()) {
    if (!parse_int(env, 1, kMaxTimeoutMs, &value))
      return invalid_argument("DDL_TIMEOUT_MS=%s: expected milliseconds in 1..%lld (at most 24 h)",
                              env.c_str(), static_cast<long long>(kMaxTimeoutMs));
    out->timeout_ms = static_cast<int>(value);
  }
  if (config && DDL_HAS_FIELD(config, job_token) && config->job_token)
    out->job_token = config->job_token;
  else
    out->job_token = env_string("DDL_JOB_TOKEN");
  out->join_token = out->job_token;

  env = env_string("DDL_CHUNK_BYTES");
  uint64_t bytes = 0;
  if (config && DDL_HAS_FIELD(config, chunk_bytes) && config->chunk_bytes != 0) {
    bytes = config->chunk_bytes;
  } else if (!env.empty() && !parse_bytes(env, &bytes)) {
    return invalid_argument("DDL_CHUNK_BYTES=%s: expected a size like 512K or 1M", env.c_str());
  }
  if (bytes != 0) {
    if (bytes < kMinChunkBytes || bytes > kMaxChunkBytes)
      return invalid_argument("chunk size %llu B: must be within 4 KiB..1 GiB",
                              static_cast<unsigned long long>(bytes));
    out->chunk_bytes = bytes;
  }
  env = env_string("DDL_FUSION_BYTES");
  if (!env.empty()) {
    uint64_t fusion = 0;
    if (!parse_bytes(env, &fusion) || fusion > kMaxChunkBytes)
      return invalid_argument(
          "DDL_FUSION_BYTES=%s: expected a size up to 1G like 64K (0: no fusion)", env.c_str());
    out->fusion_bytes = fusion;
  }
  env = env_string("DDL_HIER_PIECES");
  if (!env.empty()) {
    char *end = nullptr;
    const long pieces = std::strtol(env.c_str(), &end, 10);
    if (end == env.c_str() || *end != '\0' || pieces < 0 || pieces > kMaxHierPieces)
      return invalid_argument(
          "DDL_HIER_PIECES=%s: expected a number of pieces up to %d (0: the cost models choose)",
          env.c_str(), kMaxHierPieces);
    out->hier_pieces = static_cast<int>(pieces);
  }
  out->algorithm = env_string("DDL_ALGO");
  // "direct" and "flat" are no schedules but allreduces of their own
  // (lib/core/direct_allreduce.h, lib/core/flat_collectives.h).
  if (out->algorithm != "direct" && out->algorithm != "flat" && !known_algorithm(out->algorithm))
    return invalid_argument("DDL_ALGO=%s: not an algorithm; known: %s, direct, flat",
                            out->algorithm.c_str(), algorithm_names().c_str());
  if (config && DDL_HAS_FIELD(config, log_level) && config->log_level >= 0) {
    if (config->log_level > 3)
      return invalid_argument("config.log_level = %d: expected -1..3", config->log_level);
    set_log_level(static_cast<LogLevel>(config->log_level));
  }
  return Status::Ok();
}

}  // namespace ddl

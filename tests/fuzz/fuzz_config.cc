// resolve_config (lib/core/config.h) with fuzzed ddl_config_t fields and DDL_TIMEOUT_MS,
// DDL_CHUNK_BYTES, DDL_JOB_TOKEN, DDL_ALGO. The caller's struct is allocated with exactly
// config->size bytes, as an older or newer caller would have it, so that AddressSanitizer catches a
// read of a field the caller's struct does not have. Checked against the documented rules: config
// field (when present and non-zero) over environment over default; bounds on each value.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "lib/algorithms/registry.h"
#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/core/config.h"

namespace {

// One bound for config.timeout_ms and DDL_TIMEOUT_MS: a day (config.cc).
constexpr int64_t kMaxTimeoutMs = 24LL * 3600 * 1000;

void set_or_unset(const char *name, bool set, const std::string &value) {
  if (set)
    setenv(name, value.c_str(), 1);
  else
    unsetenv(name);
}

bool has(size_t size, size_t offset, size_t field) {
  return size >= offset + field;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  ddl::set_log_level(ddl::LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ddl_fuzz::Reader in(data, size);
  const uint8_t flags = in.byte();
  const bool null_config = flags & 1, env_timeout = flags & 2, env_chunk = flags & 4,
             env_token = flags & 8, field_token = flags & 16, env_algo = flags & 128;
  ddl_config_t c = DDL_CONFIG_INITIALIZER;
  c.size = in.byte() % (sizeof(ddl_config_t) + 24);
  if (flags & 32) c.size = sizeof(ddl_config_t);
  c.version = (flags & 64) ? 1u : in.u16();
  c.timeout_ms = static_cast<int32_t>(in.u32());
  c.chunk_bytes = static_cast<size_t>(in.u64());
  c.log_level = static_cast<int8_t>(in.byte());
  const std::string timeout_text = in.until('\0'), chunk_text = in.until('\0'),
                    env_token_text = in.until('\0'), field_token_text = in.until('\0'),
                    algo_text = in.until('\0');
  c.job_token = field_token ? field_token_text.c_str() : nullptr;

  set_or_unset("DDL_TIMEOUT_MS", env_timeout, timeout_text);
  set_or_unset("DDL_CHUNK_BYTES", env_chunk, chunk_text);
  set_or_unset("DDL_JOB_TOKEN", env_token, env_token_text);
  set_or_unset("DDL_ALGO", env_algo, algo_text);

  // The caller's struct: c.size bytes (at least its size field, which is always read), the
  // tail beyond ddl_config_t filled with 0xa5. (Fuzzing found resolve_config reading version
  // from a struct too small to hold it; fixed in 9d17169, so the allocation is exact again.)
  const size_t min_alloc = sizeof(size_t);
  const size_t alloc = c.size < min_alloc ? min_alloc : c.size;
  unsigned char *mem = static_cast<unsigned char *>(std::malloc(alloc));
  std::memset(mem, 0xa5, alloc);
  std::memcpy(mem, &c, alloc < sizeof c ? alloc : sizeof c);
  const ddl_config_t *config = null_config ? nullptr : reinterpret_cast<ddl_config_t *>(mem);

  ddl::CommConfig out;
  ddl::Status st = ddl::resolve_config(config, &out);
  std::free(mem);
  ddl::set_log_level(ddl::LogLevel::kError);

  // What the rules say.
  bool want_ok = true;
  int want_timeout = 300000;
  size_t want_chunk = 512 * 1024;
  std::string want_token = env_token ? env_token_text : "";
  const size_t n = c.size;
  if (!null_config &&
      (n < offsetof(ddl_config_t, timeout_ms) || c.version == 0 || c.version > 1000))
    want_ok = false;
  const bool cfg = !null_config;
  int64_t v = 0;
  if (want_ok) {
    if (cfg && has(n, offsetof(ddl_config_t, timeout_ms), 4) && c.timeout_ms != 0) {
      if (c.timeout_ms < 0 || c.timeout_ms > kMaxTimeoutMs) want_ok = false;
      want_timeout = c.timeout_ms;
    } else if (env_timeout && !timeout_text.empty()) {
      if (!ddl::parse_int(timeout_text, 1, kMaxTimeoutMs, &v)) want_ok = false;
      want_timeout = static_cast<int>(v);
    }
  }
  if (cfg && has(n, offsetof(ddl_config_t, job_token), sizeof(char *)) && field_token)
    want_token = field_token_text;
  if (want_ok) {
    uint64_t bytes = 0;
    if (cfg && has(n, offsetof(ddl_config_t, chunk_bytes), 8) && c.chunk_bytes != 0) {
      bytes = c.chunk_bytes;
    } else if (env_chunk && !chunk_text.empty() && !ddl::parse_bytes(chunk_text, &bytes)) {
      want_ok = false;
    }
    if (want_ok && bytes != 0) {
      if (bytes < 4096 || bytes > (1ull << 30)) want_ok = false;
      want_chunk = bytes;
    }
  }
  // DDL_ALGO: "" (the cost models choose) or a name from the registry's table, exactly.
  // (The table, not a copy of its names here: algorithms get added, "rhd" and "tree" lately.)
  const std::string want_algo = env_algo ? algo_text : "";
  bool algo_known = want_algo.empty();
  for (const ddl::AlgorithmInfo &a : ddl::algorithm_table())
    algo_known = algo_known || want_algo == a.name;
  if (want_ok && !algo_known) want_ok = false;
  if (want_ok && cfg && has(n, offsetof(ddl_config_t, log_level), 4) && c.log_level > 3)
    want_ok = false;

  FUZZ_CHECK(st.ok() == want_ok, "resolve_config says %s; the rules say %s",
             st.ok() ? "ok" : st.message().c_str(), want_ok ? "ok" : "error");
  if (!st.ok()) {
    FUZZ_CHECK(st.code() == DDL_ERR_INVALID_ARGUMENT, "code %d", st.code());
    return 0;
  }
  FUZZ_CHECK(out.timeout_ms == want_timeout && out.timeout_ms > 0, "timeout %d, want %d",
             out.timeout_ms, want_timeout);
  FUZZ_CHECK(out.chunk_bytes == want_chunk, "chunk %zu, want %zu", out.chunk_bytes, want_chunk);
  FUZZ_CHECK(out.job_token == want_token, "token '%s', want '%s'", out.job_token.c_str(),
             want_token.c_str());
  FUZZ_CHECK(out.algorithm == want_algo, "algorithm '%s', want '%s'", out.algorithm.c_str(),
             want_algo.c_str());
  return 0;
}

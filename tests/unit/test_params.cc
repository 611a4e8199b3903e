// Settings and their checks: sizes, integers and names of the environment variables and tools,
// timeout bounds, host ids, and the rank that log lines name.
#include <criterion/criterion.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/core/config.h"
#include "lib/topology/tiers.h"
#include "lib/topology/topology.h"

using namespace ddl;

Test(params, parse_bytes_accepts_suffixes_and_refuses_garbage) {
  uint64_t v = 0;
  cr_assert(parse_bytes("4096", &v) && v == 4096);
  cr_assert(parse_bytes("64K", &v) && v == 65536);
  cr_assert(parse_bytes("2M", &v) && v == 2u << 20);
  cr_assert(parse_bytes("1G", &v) && v == 1u << 30);
  cr_assert(parse_bytes("8b", &v) && v == 8);
  cr_assert_not(parse_bytes("", &v));
  cr_assert_not(parse_bytes("K", &v));
  cr_assert_not(parse_bytes("12Q", &v));
  cr_assert_not(parse_bytes("-1", &v));
  cr_assert_not(parse_bytes("99999999999999999999", &v));
  cr_assert_not(parse_bytes("17179869184G", &v));  // overflows 64 bits
}

Test(params, parse_int_checks_range) {
  int64_t v = 0;
  cr_assert(parse_int("42", 0, 100, &v) && v == 42);
  cr_assert_not(parse_int("101", 0, 100, &v));
  cr_assert_not(parse_int("4x", 0, 100, &v));
  cr_assert_not(parse_int("", 0, 100, &v));
  cr_assert_not(parse_int(std::string("42\0junk", 7), 0, 100, &v));
  cr_assert_not(parse_int(" 42", 0, 100, &v));
  cr_assert_not(parse_int("+42", 0, 100, &v));
  cr_assert(parse_int("-5", -10, 10, &v) && v == -5);
}

Test(params, datatype_and_op_names_round_trip) {
  for (int d = 0; d < DDL_DATATYPE_COUNT; ++d) {
    ddl_datatype_t back;
    cr_assert(datatype_from_name(datatype_name(static_cast<ddl_datatype_t>(d)), &back));
    cr_assert_eq(back, d);
  }
  ddl_datatype_t d;
  cr_assert(datatype_from_name("half", &d) && d == DDL_FLOAT16);
  cr_assert(datatype_from_name("float", &d) && d == DDL_FLOAT32);
  cr_assert_not(datatype_from_name("complex", &d));
  ddl_op_t op;
  cr_assert(op_from_name("max", &op) && op == DDL_MAX);
  cr_assert_not(op_from_name("xor", &op));
}

// config.timeout_ms and DDL_TIMEOUT_MS share one bound: a day. Beyond it a deadline is no
// deadline (a hung job would hold its machines that long); such values are usually seconds or
// microseconds taken for milliseconds.
Test(params, timeouts_are_bounded_by_a_day) {
  const int day_ms = 24 * 3600 * 1000;
  ddl_config_t config = DDL_CONFIG_INITIALIZER;
  CommConfig out;
  unsetenv("DDL_TIMEOUT_MS");
  config.timeout_ms = day_ms;
  cr_assert(resolve_config(&config, &out).ok());
  cr_assert_eq(out.timeout_ms, day_ms);
  for (int32_t bad : {day_ms + 1, INT32_MAX, -1, INT32_MIN}) {
    config.timeout_ms = bad;
    Status s = resolve_config(&config, &out);
    cr_assert_eq(s.code(), DDL_ERR_INVALID_ARGUMENT, "timeout_ms %d: %s", bad, s.message().c_str());
    cr_assert(s.message().find("config.timeout_ms = " + std::to_string(bad)) != std::string::npos,
              "%s", s.message().c_str());
  }
  config.timeout_ms = 0;  // from the environment
  setenv("DDL_TIMEOUT_MS", "86400001", 1);
  Status s = resolve_config(&config, &out);
  cr_assert_eq(s.code(), DDL_ERR_INVALID_ARGUMENT, "%s", s.message().c_str());
  cr_assert(s.message().find("DDL_TIMEOUT_MS=86400001") != std::string::npos, "%s",
            s.message().c_str());
  setenv("DDL_TIMEOUT_MS", "86400000", 1);
  cr_assert(resolve_config(nullptr, &out).ok());
  cr_assert_eq(out.timeout_ms, day_ms);
  unsetenv("DDL_TIMEOUT_MS");
}

namespace {

// What log_message writes to stderr while `fn` runs.
template <typename Fn>
std::string stderr_of(Fn fn) {
  char path[] = "/tmp/ddl-test-log-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  unlink(path);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string text(4096, '\0');
  ssize_t n = pread(fd, &text[0], text.size(), 0);
  close(fd);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return text;
}

}  // namespace

// The rank in log lines belongs to the calling thread for the length of a call, so that two
// communicators in one process (ranks as threads, or two jobs) each log under their own rank.
Test(params, log_lines_name_the_rank_of_the_calling_thread) {
  set_log_level(LogLevel::kWarn);
  set_log_rank(-1);
  std::string text = stderr_of([] {
    {
      LogRank outer(3);
      DDL_WARN("first");
      {
        LogRank inner(5);
        DDL_WARN("second");
        std::thread other([] { DDL_WARN("third"); });  // another thread: no rank of its own
        other.join();
      }
      DDL_WARN("fourth");
    }
    DDL_WARN("fifth");
  });
  cr_assert(text.find("ddl[3] warn: first\n") != std::string::npos, "%s", text.c_str());
  cr_assert(text.find("ddl[5] warn: second\n") != std::string::npos, "%s", text.c_str());
  cr_assert(text.find("ddl warn: third\n") != std::string::npos, "%s", text.c_str());
  cr_assert(text.find("ddl[3] warn: fourth\n") != std::string::npos, "%s", text.c_str());
  cr_assert(text.find("ddl warn: fifth\n") != std::string::npos, "%s", text.c_str());
}

// DDL_HOST_ID tells emulated hosts apart. Ids longer than the placement's field, or with
// characters a placement cannot carry, are hashed, not truncated: ids that differ only at
// their end (or only in such a character) stay different hosts.
Test(params, long_host_ids_stay_distinct) {
  using namespace ddl::topo;
  const Topology none;
  auto id_for = [&](const std::string &value) {
    setenv("DDL_HOST_ID", value.c_str(), 1);
    Placement p = local_placement(none, -1);
    Placement back;
    cr_assert(parse_placement(serialize(p), &back).ok(), "%s", serialize(p).c_str());
    cr_assert(back == p, "%s", serialize(p).c_str());
    return p.host_id;
  };
  cr_assert_eq(id_for("emulated-host-3"), "env:emulated-host-3");
  std::vector<std::string> ids;
  for (size_t length : {120, 124, 125, 126, 127, 128, 129, 200, 5000}) {
    for (char last : {'a', 'b'}) {
      std::string value(length - 1, 'h');
      value += last;
      ids.push_back(id_for(value));
      cr_assert_leq(ids.back().size(), 128u, "%s", ids.back().c_str());
    }
  }
  ids.push_back(id_for("bad id with spaces"));
  ids.push_back(id_for("bad id with_spaces"));
  ids.push_back(id_for("bad_id_with_spaces"));
  unsetenv("DDL_HOST_ID");
  std::set<std::string> distinct(ids.begin(), ids.end());
  cr_assert_eq(distinct.size(), ids.size(), "two DDL_HOST_ID values gave the same host id");
  // The same value gives the same id in every process (a stable hash, not std::hash).
  setenv("DDL_HOST_ID", std::string(300, 'x').c_str(), 1);
  const std::string once = local_placement(none, -1).host_id;
  cr_assert_eq(local_placement(none, -1).host_id, once);
  cr_assert(once.find("env-hash:xxxx") == 0, "%s", once.c_str());
  unsetenv("DDL_HOST_ID");
}

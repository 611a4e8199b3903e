// parse_bytes and parse_int (lib/common/params.h): every DDL_* size and integer variable goes
// through them. Checked against a reference written independently here: same verdict, same
// value, bounds respected, and values print and parse back to themselves.
#include <cctype>
#include <climits>
#include <cstdlib>
#include <string>

#include "fuzz_util.h"
#include "lib/common/params.h"

namespace {

// parse_bytes' contract: 1+ digits, an optional K/M/G/T (either case), an optional B/b, at
// most 24 characters, no overflow of uint64_t.
bool reference_bytes(const std::string &t, uint64_t *out) {
  if (t.empty() || t.size() > 24) return false;
  size_t i = 0;
  unsigned __int128 v = 0;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') {
    v = v * 10 + static_cast<unsigned>(t[i] - '0');
    if (v > UINT64_MAX) return false;
    ++i;
  }
  if (i == 0) return false;
  int shift = 0;
  if (i < t.size()) {
    switch (t[i]) {
      case 'K':
      case 'k':
        shift = 10;
        ++i;
        break;
      case 'M':
      case 'm':
        shift = 20;
        ++i;
        break;
      case 'G':
      case 'g':
        shift = 30;
        ++i;
        break;
      case 'T':
      case 't':
        shift = 40;
        ++i;
        break;
      default:
        break;
    }
  }
  if (i < t.size() && (t[i] == 'B' || t[i] == 'b')) ++i;
  if (i != t.size()) return false;
  v <<= shift;
  if (v > UINT64_MAX) return false;
  *out = static_cast<uint64_t>(v);
  return true;
}

// parse_int's contract (strict since the fuzzing of 9d17169 found "42\0junk" accepted as 42):
// an optional '-' and 1+ ASCII digits, nothing else (no white space, no '+', no NUL), at most
// 20 characters, within [min, max].
bool reference_int(const std::string &t, int64_t min, int64_t max, int64_t *out) {
  if (t.empty() || t.size() > 20) return false;
  const bool neg = t[0] == '-';
  size_t i = neg ? 1 : 0;
  size_t digits = 0;
  __int128 v = 0;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') {
    if (v < (static_cast<__int128>(1) << 70)) v = v * 10 + (t[i] - '0');
    ++i;
    ++digits;
  }
  if (digits == 0 || i != t.size()) return false;
  if (neg) v = -v;
  if (v < INT64_MIN || v > INT64_MAX) return false;
  if (v < min || v > max) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // Inputs of 16+ bytes start with two bounds for parse_int; the text is the rest. Shorter
  // inputs are all text (so that the seed corpus can be plain strings).
  ddl_fuzz::Reader in(data, size);
  int64_t a = INT64_MIN, b = INT64_MAX;
  if (size >= 16 && data[0] == '#') {
    in.byte();
    a = static_cast<int64_t>(in.u64());
    b = static_cast<int64_t>(in.u64());
  }
  const std::string text = in.rest();

  uint64_t bytes = 0xdeadbeef, want_bytes = 0;
  bool ok = ddl::parse_bytes(text, &bytes);
  bool want = reference_bytes(text, &want_bytes);
  FUZZ_CHECK(ok == want, "parse_bytes('%s') says %d, reference %d", text.c_str(), ok, want);
  if (ok) {
    FUZZ_CHECK(bytes == want_bytes, "parse_bytes('%s') = %llu, reference %llu", text.c_str(),
               (unsigned long long)bytes, (unsigned long long)want_bytes);
    uint64_t again = 0;
    FUZZ_CHECK(ddl::parse_bytes(std::to_string(bytes), &again) && again == bytes,
               "%llu does not parse back", (unsigned long long)bytes);
  } else {
    FUZZ_CHECK(bytes == 0xdeadbeef, "parse_bytes wrote its output on failure");
  }

  int64_t min = a < b ? a : b, max = a < b ? b : a;
  for (auto bounds : {std::make_pair(INT64_MIN, INT64_MAX), std::make_pair(min, max)}) {
    int64_t v = 0x5a5a, want_v = 0;
    ok = ddl::parse_int(text, bounds.first, bounds.second, &v);
    want = reference_int(text, bounds.first, bounds.second, &want_v);
    FUZZ_CHECK(ok == want, "parse_int('%s', %lld, %lld) says %d, reference %d", text.c_str(),
               (long long)bounds.first, (long long)bounds.second, ok, want);
    if (!ok) {
      FUZZ_CHECK(v == 0x5a5a, "parse_int wrote its output on failure");
      continue;
    }
    FUZZ_CHECK(v == want_v && v >= bounds.first && v <= bounds.second,
               "parse_int('%s') = %lld, reference %lld", text.c_str(), (long long)v,
               (long long)want_v);
    int64_t again = 0;
    FUZZ_CHECK(ddl::parse_int(std::to_string(v), v, v, &again) && again == v,
               "%lld does not parse back within [v, v]", (long long)v);
    if (v < INT64_MAX)
      FUZZ_CHECK(!ddl::parse_int(text, v + 1, INT64_MAX, &again), "'%s' accepted above itself",
                 text.c_str());
  }
  return 0;
}

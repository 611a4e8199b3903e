// Parsing of the environment variables and strings that configure ddl. Self-contained
// (no other ddl code) so that tools can compile it in too.
#pragma once

#include <cstdint>
#include <string>

namespace ddl {

// "4096", "64K", "2M", "1G" (powers of 1024; a trailing B/b is accepted) -> bytes.
// Returns false on anything else, including overflow.
bool parse_bytes(const std::string &text, uint64_t *bytes);

// A decimal integer within [min, max]; false on garbage or out of range.
bool parse_int(const std::string &text, int64_t min, int64_t max, int64_t *value);

// The value of an environment variable, or "" when unset.
std::string env_string(const char *name);

}  // namespace ddl

// parse_host_port / join_host_port (lib/bootstrap/socket.h): DDL_ROOT, MASTER_ADDR:PORT and the
// rendezvous file's contents all go through them. Checked: accepted hosts are non-empty and
// hold only the allowed characters, ports are in 0..65535, and join_host_port's output parses
// back to the same pair.
#include <string>

#include "fuzz_util.h"
#include "lib/bootstrap/socket.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string text(reinterpret_cast<const char *>(data), size);
  std::string host = "untouched";
  int port = -42;
  ddl::Status st = ddl::bootstrap::parse_host_port(text, &host, &port);
  if (!st.ok()) {
    FUZZ_CHECK(st.code() == DDL_ERR_INVALID_ARGUMENT, "code %d", st.code());
    FUZZ_CHECK(!st.message().empty(), "an error without words");
    FUZZ_CHECK(host == "untouched" && port == -42, "outputs written on failure");
    return 0;
  }
  FUZZ_CHECK(!host.empty(), "empty host accepted from '%s'", text.c_str());
  FUZZ_CHECK(port >= 0 && port <= 65535, "port %d from '%s'", port, text.c_str());
  for (char c : host)
    FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '.' || c == '-' || c == '_' || c == ':' || c == '%',
               "host '%s' holds 0x%02x", host.c_str(), static_cast<unsigned char>(c));
  std::string joined = ddl::bootstrap::join_host_port(host, port);
  std::string host2;
  int port2 = -1;
  st = ddl::bootstrap::parse_host_port(joined, &host2, &port2);
  FUZZ_CHECK(st.ok(), "'%s' (from '%s') does not parse back: %s", joined.c_str(), text.c_str(),
             st.message().c_str());
  FUZZ_CHECK(host2 == host && port2 == port, "'%s' -> %s:%d -> %s:%d", text.c_str(), host.c_str(),
             port, host2.c_str(), port2);
  (void)ddl::bootstrap::is_loopback_host(host);
  return 0;
}

// Fresh rendezvous secrets. Shared by the launcher rendezvous (rank 0 makes one and hands it
// out through PMIx or the rendezvous file) and ddl_comm_split (each new group's rank 0 makes
// one and announces it over the parent's bootstrap).
#pragma once

#include <string>

#include "lib/common/status.h"

namespace ddl {

// 16 bytes from the kernel (/dev/urandom) as 32 lowercase hex digits.
Status random_token(std::string *token);

}  // namespace ddl

#include "lib/bootstrap/slurm_root.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lib/bootstrap/token.h"
#include "lib/common/sha256.h"

namespace ddl {

std::string slurm_first_host(const std::string &nodelist) {
  std::string host;
  bool in_brackets = false, skipping = false;
  for (char c : nodelist) {
    if (in_brackets) {
      if (c == ']') {
        in_brackets = skipping = false;
      } else if (c == ',' || c == '-') {
        skipping = true;  // the rest of the range: only its first value counts
      } else if (c == '[') {
        return "";
      } else if (!skipping) {
        host += c;
      }
      continue;
    }
    if (c == ',') break;
    if (c == ']') return "";
    if (c == '[')
      in_brackets = true;
    else
      host += c;
  }
  return in_brackets ? "" : host;
}

int slurm_root_port(uint64_t job, uint64_t step) {
  return 10000 + static_cast<int>((job * 64 + step) % 20000);
}

Status slurm_job_token(const std::string &secret_file, const std::string &job_step,
                       std::string *token) {
  const size_t slash = secret_file.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = secret_file.substr(0, slash);
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return system_error(errno, "making %s", dir.c_str());
  }
  // Made once, by whichever task gets there first (O_EXCL): the others read it.
  int fd = open(secret_file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) {
    std::string fresh;
    Status s = random_token(&fresh);
    const bool written =
        s.ok() && write(fd, fresh.data(), fresh.size()) == static_cast<ssize_t>(fresh.size());
    close(fd);
    if (!written) {
      unlink(secret_file.c_str());
      return s.ok() ? system_error(errno, "writing %s", secret_file.c_str()) : s;
    }
  } else if (errno != EEXIST) {
    return system_error(errno, "creating %s", secret_file.c_str());
  }
  std::string secret;
  // A task that lost the race may find the file still empty for a moment.
  for (int tries = 0; tries < 100 && secret.size() < 32; ++tries) {
    fd = open(secret_file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return system_error(errno, "opening %s", secret_file.c_str());
    struct stat st;
    if (fstat(fd, &st) == 0 && (st.st_mode & 077) != 0) {
      close(fd);
      return invalid_argument("%s is readable by others (mode %o): it must be 0600",
                              secret_file.c_str(), static_cast<unsigned>(st.st_mode & 0777));
    }
    char buf[128];
    const ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    secret.assign(buf, n > 0 ? static_cast<size_t>(n) : 0);
    if (secret.size() < 32) usleep(10000);
  }
  if (secret.size() < 32)
    return invalid_argument("%s holds no secret (fewer than 32 bytes)", secret_file.c_str());
  *token = sha256_hex(secret + "|" + job_step).substr(0, 32);
  return Status::Ok();
}

}  // namespace ddl

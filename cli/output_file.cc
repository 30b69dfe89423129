#include "cli/output_file.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "fulcrum/core/error.h"

namespace fulcrum {

void write_file_atomically(const std::string& path, std::string_view content) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::string pattern = (target.parent_path() / fs::path("." + target.filename().string() + ".XXXXXX")).string();
  if (target.parent_path().empty()) pattern = "." + target.filename().string() + ".XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) throw InputError(fmt::format("{}: cannot write ({})", path, std::strerror(errno)));
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      ::unlink(name.data());
      throw InputError(fmt::format("{}: cannot write ({})", path, std::strerror(error)));
    }
    written += static_cast<size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0 || ::close(fd) != 0 || std::rename(name.data(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(name.data());
    throw InputError(fmt::format("{}: cannot write ({})", path, std::strerror(error)));
  }
}

}  // namespace fulcrum

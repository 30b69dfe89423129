#include "cli/output_file.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "fulcrum/core/error.h"

namespace fulcrum {

namespace {

// A temporary file beside `path` holding `content`; its name, or InputError naming `path`.
std::string stage(const std::string& path, std::string_view content) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string hidden = fmt::format(".{}.XXXXXX", target.filename().string());
  const std::string pattern = target.parent_path().empty() ? hidden : (target.parent_path() / hidden).string();
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
  const bool modes_set = ::fchmod(fd, 0644) == 0;
  const int mode_error = errno;
  if (::close(fd) != 0 || !modes_set) {  // closed either way: no descriptor left open
    const int error = modes_set ? errno : mode_error;
    ::unlink(name.data());
    throw InputError(fmt::format("{}: cannot write ({})", path, std::strerror(error)));
  }
  return name.data();
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view content) {
  OutputFiles one;
  one.add(path, std::string(content));
  one.write();
}

void OutputFiles::add(std::string path, std::string content) {
  files_.emplace_back(std::move(path), std::move(content));
}

void OutputFiles::write() {
  // What would make a rename fail once others are done: a directory in a target's place, a target named twice.
  std::set<std::string> seen;
  for (const auto& [path, content] : files_) {
    std::error_code error;
    if (std::filesystem::is_directory(path, error)) {
      throw InputError(fmt::format("{}: cannot write (Is a directory)", path));
    }
    // Absolute first: weakly_canonical leaves a relative path whose every part is new ("plan.json") relative.
    const std::filesystem::path resolved = std::filesystem::weakly_canonical(std::filesystem::absolute(path), error);
    if (!error && !seen.insert(resolved.string()).second) {  // a path it cannot resolve fails in stage(), named
      throw InputError(fmt::format("{}: given for two outputs of one run", path));
    }
  }
  std::vector<std::string> staged;
  try {
    for (const auto& [path, content] : files_) staged.push_back(stage(path, content));
  } catch (...) {
    for (const std::string& name : staged) ::unlink(name.c_str());
    throw;
  }
  for (size_t i = 0; i < files_.size(); ++i) {
    if (std::rename(staged[i].c_str(), files_[i].first.c_str()) != 0) {
      const int error = errno;
      for (size_t j = i; j < staged.size(); ++j) ::unlink(staged[j].c_str());
      throw InputError(fmt::format("{}: cannot write ({})", files_[i].first, std::strerror(error)));
    }
  }
  files_.clear();
}

}  // namespace fulcrum

#include "cli/output_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/core/input_files.h"

namespace fulcrum {

namespace {

// Writes all of `content` to `fd`; 0, or the errno of the write that failed.
int write_all(int fd, std::string_view content) {
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    written += static_cast<size_t>(n);
  }
  return 0;
}

// A temporary file beside `target` holding `content`; its name, or InputError naming `path` (what the user gave).
std::string stage(const std::string& target, const std::string& path, std::string_view content) {
  namespace fs = std::filesystem;
  const fs::path file(target);
  const std::string hidden = fmt::format(".{}.XXXXXX", file.filename().string());
  const std::string pattern = file.parent_path().empty() ? hidden : (file.parent_path() / hidden).string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) throw InputError(fmt::format("{}: cannot write ({})", path, std::strerror(errno)));
  if (const int error = write_all(fd, content)) {
    ::close(fd);
    ::unlink(name.data());
    throw InputError(fmt::format("{}: cannot write ({})", path, std::strerror(error)));
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

// `path`, then each path its symbolic links lead to, the last the file it names (which may not exist yet).
std::vector<std::filesystem::path> link_chain(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> chain{fs::path(path)};
  std::error_code error;
  while (chain.size() <= 40 && fs::is_symlink(fs::symlink_status(chain.back(), error))) {
    const fs::path to = fs::read_symlink(chain.back(), error);
    if (error) break;
    chain.push_back(to.is_absolute() ? to : chain.back().parent_path() / to);
  }
  return chain;
}

// The descriptor this process already has open that `path` (or a link on the way to its file) names: /dev/stdout,
// /dev/stderr, /dev/fd/N, /proc/self/fd/N. Written through that descriptor, a redirection keeps its mode (appending,
// say) and its earlier content; reopened or replaced, it would not.
std::optional<int> inherited_descriptor(const std::vector<std::filesystem::path>& chain) {
  for (const std::filesystem::path& p : chain) {
    const std::string s = p.lexically_normal().string();
    if (s == "/dev/stdout") return 1;
    if (s == "/dev/stderr") return 2;
    for (const std::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
      if (s.starts_with(prefix)) {
        int fd = -1;
        const char* first = s.data() + prefix.size();
        const auto [end, ec] = std::from_chars(first, s.data() + s.size(), fd);
        if (ec == std::errc() && end == s.data() + s.size()) return fd;
      }
    }
  }
  return std::nullopt;
}

// `content` written straight into `path`, a device or pipe that cannot be staged beside and renamed.
void write_in_place(const std::string& path, std::string_view content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
  if (fd < 0) throw InputError(fmt::format("{}: cannot write ({})", path, std::strerror(errno)));
  const int error = write_all(fd, content);
  if (::close(fd) != 0 || error) {
    throw InputError(fmt::format("{}: cannot write ({})", path, std::strerror(error ? error : errno)));
  }
}

// Renames held back until the run's standard output is written (defer_output_renames): staged file → target, with
// the path the run was given, which errors name.
struct HeldRename {
  std::string staged, target, path;
};
struct HeldRenames {
  bool defer = false;
  std::vector<HeldRename> renames;
};
HeldRenames& held_renames() {
  static HeldRenames held;
  return held;
}

}  // namespace

void defer_output_renames() { held_renames().defer = true; }

void commit_outputs() {
  HeldRenames& held = held_renames();
  std::vector<HeldRename> renames = std::move(held.renames);
  held.renames.clear();
  for (size_t i = 0; i < renames.size(); ++i) {
    if (std::rename(renames[i].staged.c_str(), renames[i].target.c_str()) != 0) {
      const int error = errno;
      for (size_t j = i; j < renames.size(); ++j) ::unlink(renames[j].staged.c_str());
      throw InputError(fmt::format("{}: cannot write ({})", renames[i].path, std::strerror(error)));
    }
  }
}

void discard_outputs() {
  HeldRenames& held = held_renames();
  for (const HeldRename& r : held.renames) ::unlink(r.staged.c_str());
  held.renames.clear();
}

void write_file_atomically(const std::string& path, std::string_view content) {
  OutputFiles one;
  one.add(path, std::string(content));
  one.write();
}

void OutputFiles::add(std::string path, std::string content) {
  files_.emplace_back(std::move(path), std::move(content));
}

void OutputFiles::write() {
  namespace fs = std::filesystem;
  // Where each output goes: through a symbolic link to the file it names; a device or pipe (/dev/stdout) is
  // written in place, as it cannot be replaced. What would make a rename fail once others are done, or lose a
  // file: a directory in a target's place, a target named twice, an input of the run.
  std::set<std::string> seen;
  std::vector<std::string> targets;
  std::vector<bool> in_place;
  std::vector<std::optional<int>> descriptors;
  for (const auto& [path, content] : files_) {
    std::error_code error;
    if (fs::is_directory(path, error)) throw InputError(fmt::format("{}: cannot write (Is a directory)", path));
    const std::vector<fs::path> chain = link_chain(path);
    descriptors.push_back(inherited_descriptor(chain));
    targets.push_back(chain.back().string());
    // Absolute first: weakly_canonical leaves a relative path whose every part is new ("plan.json") relative.
    const fs::path resolved = fs::weakly_canonical(fs::absolute(targets.back()), error);
    const std::string key = descriptors.back() ? fmt::format("descriptor {}", *descriptors.back()) : resolved.string();
    if ((descriptors.back() || !error) && !seen.insert(key).second) {  // one it cannot resolve fails in stage()
      throw InputError(fmt::format("{}: given for two outputs of one run", path));
    }
    if (is_input_file(path)) {
      throw InputError(fmt::format("{}: is an input of this run; write the output to another file", path));
    }
    const fs::file_status status = fs::status(path, error);
    in_place.push_back(descriptors.back() || (!error && fs::exists(status) && !fs::is_regular_file(status)));
  }
  std::vector<std::string> staged(files_.size());
  auto unstage = [&] {
    for (const std::string& name : staged) {
      if (!name.empty()) ::unlink(name.c_str());
    }
  };
  try {
    for (size_t i = 0; i < files_.size(); ++i) {
      if (!in_place[i]) staged[i] = stage(targets[i], files_[i].first, files_[i].second);
    }
    for (size_t i = 0; i < files_.size(); ++i) {
      if (!in_place[i]) continue;
      if (!descriptors[i]) {
        write_in_place(files_[i].first, files_[i].second);
        continue;
      }
      std::cout.flush();  // what the run printed before stays before
      if (const int error = write_all(*descriptors[i], files_[i].second)) {
        throw InputError(fmt::format("{}: cannot write ({})", files_[i].first, std::strerror(error)));
      }
    }
  } catch (...) {
    unstage();
    throw;
  }
  if (held_renames().defer) {  // renamed once the run's standard output is written
    for (size_t i = 0; i < files_.size(); ++i) {
      if (!in_place[i]) held_renames().renames.push_back({staged[i], targets[i], files_[i].first});
    }
    files_.clear();
    return;
  }
  for (size_t i = 0; i < files_.size(); ++i) {
    if (in_place[i]) continue;
    if (std::rename(staged[i].c_str(), targets[i].c_str()) != 0) {
      const int error = errno;
      for (size_t j = 0; j < i; ++j) staged[j].clear();  // renamed into place already
      unstage();
      throw InputError(fmt::format("{}: cannot write ({})", files_[i].first, std::strerror(error)));
    }
  }
  files_.clear();
}

}  // namespace fulcrum

#include "fulcrum/core/input_files.h"

#include <filesystem>
#include <mutex>
#include <set>

namespace fulcrum {
namespace {

std::mutex& files_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& files() {
  static std::set<std::string> read;
  return read;
}

// Symbolic links followed, so that two names of one file are one.
std::string resolved(const std::string& path) {
  std::error_code error;
  const std::filesystem::path p = std::filesystem::weakly_canonical(std::filesystem::absolute(path, error), error);
  return error ? path : p.string();
}

}  // namespace

void note_input_file(const std::string& path) {
  const std::string key = resolved(path);
  const std::lock_guard<std::mutex> lock(files_mutex());
  files().insert(key);
}

bool is_input_file(const std::string& path) {
  const std::string key = resolved(path);
  const std::lock_guard<std::mutex> lock(files_mutex());
  return files().count(key) > 0;
}

}  // namespace fulcrum

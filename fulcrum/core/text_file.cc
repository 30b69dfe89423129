#include "fulcrum/core/text_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fulcrum/core/error.h"
#include "fulcrum/core/input_files.h"

namespace fulcrum {

std::string read_text_file(const std::string& path) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) throw InputError(fmt::format("{}: is a folder, not a file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open ({})", path, std::strerror(errno)));
  note_input_file(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace fulcrum

#ifndef FULCRUM_CLI_OUTPUT_FILE_H_
#define FULCRUM_CLI_OUTPUT_FILE_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fulcrum {

// Writes `content` to a temporary file beside `path` and renames it into place, so a failed run never leaves a
// partial output file. Throws InputError naming `path` when it cannot be written.
void write_file_atomically(const std::string& path, std::string_view content);

// A command's output files and its standard output go out together: after defer_output_renames(), each file is
// staged beside its path when written, and renamed into place by commit_outputs() once the run's standard output
// is written, or removed by discard_outputs() when the run fails after staging it (standard output that cannot be
// written, an error after the files). commit_outputs() throws InputError naming the first it cannot rename.
void defer_output_renames();
void commit_outputs();
void discard_outputs();

// Several outputs of one run, written all or none: each is staged in a temporary file beside its path, and only
// when every one is staged are they renamed into place. write() throws InputError naming the first path that
// cannot be written (a missing folder, a directory in its place, a path given twice, a file the run read as input),
// leaving none of the set written; only a rename the file system refuses after the checks could leave the files
// renamed before it. A symbolic link is written through (the file it names is replaced, the link kept); a device
// or pipe (/dev/stdout) is written in place.
class OutputFiles {
 public:
  void add(std::string path, std::string content);
  void write();

 private:
  std::vector<std::pair<std::string, std::string>> files_;
};

// The JSON text of a command's output. Names from the command line (file names) may hold bytes that are not UTF-8,
// which JSON cannot: each such byte is written as U+FFFD, where the writer would otherwise stop the run after its
// work is done.
template <typename JsonValue>
std::string json_text(const JsonValue& value, int indent) {
  return value.dump(indent, ' ', false, JsonValue::error_handler_t::replace);
}

// Whether `text` is UTF-8, as JSON text must be.
inline bool is_utf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

}  // namespace fulcrum

#endif  // FULCRUM_CLI_OUTPUT_FILE_H_

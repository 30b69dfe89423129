#ifndef FULCRUM_CLI_OUTPUT_FILE_H_
#define FULCRUM_CLI_OUTPUT_FILE_H_

#include <string>
#include <string_view>

namespace fulcrum {

// Writes `content` to a temporary file beside `path` and renames it into place, so a failed run never leaves a
// partial output file. Throws InputError naming `path` when it cannot be written.
void write_file_atomically(const std::string& path, std::string_view content);

}  // namespace fulcrum

#endif  // FULCRUM_CLI_OUTPUT_FILE_H_

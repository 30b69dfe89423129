#ifndef FULCRUM_CORE_TEXT_FILE_H_
#define FULCRUM_CORE_TEXT_FILE_H_

#include <string>

namespace fulcrum {

// The whole file at `path`, as it is on disk. Throws InputError "<path>: cannot open" when it cannot be read.
std::string read_text_file(const std::string& path);

}  // namespace fulcrum

#endif  // FULCRUM_CORE_TEXT_FILE_H_

#ifndef FULCRUM_CLI_ERROR_LINE_H_
#define FULCRUM_CLI_ERROR_LINE_H_

#include <string>
#include <string_view>

namespace fulcrum {

// `text` made one line for stderr: control characters a file, key or argument carried into a message (a newline
// in a JSON key, a path with a tab) are written as escapes (\n, \r, \t, \xNN), so an error stays one line.
std::string one_line(std::string_view text);

}  // namespace fulcrum

#endif  // FULCRUM_CLI_ERROR_LINE_H_

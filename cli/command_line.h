#ifndef FULCRUM_CLI_COMMAND_LINE_H_
#define FULCRUM_CLI_COMMAND_LINE_H_

#include <string>

namespace fulcrum {

// `text` as one word of a shell command that reproduces a result: as it is when it holds only letters, digits
// and -_./:=,@+, else in single quotes.
std::string shell_word(const std::string& text);

}  // namespace fulcrum

#endif  // FULCRUM_CLI_COMMAND_LINE_H_

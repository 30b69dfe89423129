#ifndef FULCRUM_CLI_COMMAND_LINE_H_
#define FULCRUM_CLI_COMMAND_LINE_H_

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace fulcrum {

// `text` as one word of a shell command that reproduces a result: as it is when it holds only letters, digits
// and -_./:=,@+, else in single quotes.
std::string shell_word(const std::string& text);

// An option's check that its value is an integer of at least `low`: "--opt: must be at least 1, got 0". For options
// whose unset value (0 or -1) stands for a default, which a given value must not be taken for.
CLI::Validator at_least(int64_t low);

}  // namespace fulcrum

#endif  // FULCRUM_CLI_COMMAND_LINE_H_

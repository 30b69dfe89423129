#include "cli/command_line.h"

#include <fmt/format.h>


namespace fulcrum {

std::string shell_word(const std::string& text) {
  const bool plain = !text.empty() && text.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "0123456789-_./:=,@+") == std::string::npos;
  if (plain) return text;
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

CLI::Validator at_least(int64_t low) {
  return CLI::Validator(
      [low](std::string& value) {
        int64_t v = 0;  // read as CLI11 reads the option's value itself
        if (!CLI::detail::lexical_cast(value, v) || v < low) {
          return fmt::format("must be an integer of at least {}, got {}", low, value);
        }
        return std::string();
      },
      fmt::format("INT>={}", low));
}

}  // namespace fulcrum

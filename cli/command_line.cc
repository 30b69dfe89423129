#include "cli/command_line.h"

#include <fmt/format.h>

#include <charconv>

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
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (ec != std::errc() || end != value.data() + value.size() || v < low) {
          return fmt::format("must be an integer of at least {}, got {}", low, value);
        }
        return std::string();
      },
      fmt::format("INT>={}", low));
}

}  // namespace fulcrum

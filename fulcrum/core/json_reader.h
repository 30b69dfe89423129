#ifndef FULCRUM_CORE_JSON_READER_H_
#define FULCRUM_CORE_JSON_READER_H_

#include <fmt/format.h>

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "fulcrum/core/error.h"

namespace fulcrum {

// What every strict reader of a user's JSON file needs: errors as one line "<file>: <where>: <what>", no key
// that does not belong where it stands, required keys named when missing. The file name must outlive it.
class JsonReader {
 public:
  explicit JsonReader(const std::string& file) : file_(file) {}

  template <typename... Args>
  [[noreturn]] void fail(const std::string& where, fmt::format_string<Args...> format, Args&&... args) const {
    throw InputError(fmt::format("{}: {}: {}", file_, where, fmt::format(format, std::forward<Args>(args)...)));
  }

  // InputError unless `object` is an object whose keys are all among `keys`.
  void only_keys(const nlohmann::json& object, std::initializer_list<const char*> keys, const std::string& where) const {
    if (!object.is_object()) fail(where, "expected an object");
    for (const auto& [key, value] : object.items()) {
      bool known = false;
      for (const char* k : keys) known = known || key == k;
      if (!known) fail(where, "unknown key \"{}\"", key.substr(0, 40));
    }
  }

  const nlohmann::json& member(const nlohmann::json& object, const char* key, const std::string& where) const {
    const auto it = object.find(key);
    if (it == object.end()) fail(where, "missing key \"{}\"", key);
    return *it;
  }

 protected:
  const std::string& file() const { return file_; }

 private:
  const std::string& file_;
};

}  // namespace fulcrum

#endif  // FULCRUM_CORE_JSON_READER_H_

#include "fulcrum/core/json_document.h"

#include <fmt/format.h>

#include <set>
#include <vector>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

template <typename Json>
Json parse_document(std::string_view text, const std::string& file, RepeatedKeys repeated) {
  // The keys of each object open on the way down, so that a key given twice is refused: the parser would keep the
  // last silently, and a setting (or a dataset in a meta index) written first would be lost without a word.
  std::vector<std::set<std::string>> open_objects;
  const typename Json::parser_callback_t check = [&](int depth, typename Json::parse_event_t event, Json& parsed) {
    using Event = typename Json::parse_event_t;
    // The parser does not recurse, but copying and writing a value do, once a level: past the stack at a few
    // hundred thousand levels.
    if ((event == Event::object_start || event == Event::array_start) && depth >= kMostJsonDepth) {
      throw InputError(fmt::format("{}: values nested more than {} deep", file, kMostJsonDepth));
    }
    if (repeated == RepeatedKeys::kLastWins) return true;
    if (event == Event::object_start) {
      open_objects.emplace_back();
    } else if (event == Event::object_end) {
      open_objects.pop_back();
    } else if (event == Event::key && !open_objects.back().insert(parsed.template get<std::string>()).second) {
      throw InputError(fmt::format("{}: key '{}' appears twice in one object", file,
                                   parsed.template get<std::string>().substr(0, 60)));
    }
    return true;
  };
  try {
    return Json::parse(text, check);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(fmt::format("{}: malformed JSON at byte {}", file, e.byte));
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double
    // The library's reason without its "[json.exception.out_of_range.406] " tag.
    std::string_view what = e.what();
    if (what.starts_with("[json.exception.") && what.find("] ") != std::string_view::npos) {
      what.remove_prefix(what.find("] ") + 2);
    }
    throw InputError(fmt::format("{}: malformed JSON ({})", file, what));
  }
}

}  // namespace

nlohmann::json parse_json_document(std::string_view text, const std::string& file, RepeatedKeys repeated) {
  return parse_document<nlohmann::json>(text, file, repeated);
}

nlohmann::ordered_json parse_ordered_json_document(std::string_view text, const std::string& file,
                                                   RepeatedKeys repeated) {
  return parse_document<nlohmann::ordered_json>(text, file, repeated);
}

}  // namespace fulcrum

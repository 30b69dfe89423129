#ifndef FULCRUM_CORE_JSON_DOCUMENT_H_
#define FULCRUM_CORE_JSON_DOCUMENT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace fulcrum {

// Parses a whole JSON document of a user's file (meta index, model config, cluster, profile, cost).
// Malformed text throws InputError "<file>: malformed JSON at byte N"; anything else the parser refuses
// (a number too large for a double) "<file>: malformed JSON (reason)"; a key given twice in one object "<file>: key
// 'k' appears twice in one object"; values nested more than kMostJsonDepth deep "<file>: values nested more than
// 256 deep" (no file of Fulcrum's nests past ten; copying or writing a value recurses once a level).
// Traces recorded by other tools (Chrome's, PyTorch's) may repeat keys in the event details a reader skips: read
// with kLastWins, they keep the last as the parser does.
enum class RepeatedKeys { kRefuse, kLastWins };
inline constexpr int kMostJsonDepth = 256;
nlohmann::json parse_json_document(std::string_view text, const std::string& file,
                                   RepeatedKeys repeated = RepeatedKeys::kRefuse);
// The same with each object's keys in the order the file gives them (nlohmann::json sorts them): for a document
// whose order means something, a meta index's entries, whose concatenation numbers the samples.
nlohmann::ordered_json parse_ordered_json_document(std::string_view text, const std::string& file,
                                                   RepeatedKeys repeated = RepeatedKeys::kRefuse);

}  // namespace fulcrum

#endif  // FULCRUM_CORE_JSON_DOCUMENT_H_

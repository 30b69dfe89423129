#ifndef FULCRUM_CORE_JSON_DOCUMENT_H_
#define FULCRUM_CORE_JSON_DOCUMENT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace fulcrum {

// Parses a whole JSON document of a user's file (meta index, model config, cluster, profile, cost).
// Malformed text throws InputError "<file>: malformed JSON at byte N"; anything else the parser refuses
// (a number too large for a double) "<file>: malformed JSON (reason)"; a key given twice in one object "<file>: key
// 'k' appears twice in one object".
nlohmann::json parse_json_document(std::string_view text, const std::string& file);

}  // namespace fulcrum

#endif  // FULCRUM_CORE_JSON_DOCUMENT_H_

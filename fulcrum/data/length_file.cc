#include "fulcrum/data/length_file.h"

#include <csv.h>
#include <fmt/format.h>
#include <simdjson.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <filesystem>
#include <limits>
#include <unordered_set>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/core/input_files.h"

namespace fulcrum {
namespace {

namespace od = simdjson::ondemand;

// The fields of one record before validation; `where` names the record in messages ("record 3", "line 4").
struct RecordFields {
  std::optional<int64_t> vit_num, vision_tokens, token_num, image_flags;
  std::string task;
};

// Validates a record and appends it; all rules live here so every format agrees.
class RecordSink {
 public:
  RecordSink(const std::string& file, Dataset& dataset) : file_(file), dataset_(dataset) {
    if (!dataset_.empty()) unit_ = dataset_.vision_unit();
  }

  [[noreturn]] void fail(std::string_view where, std::string_view what) const {
    throw InputError(fmt::format("{}: {}: {}", file_, where, what));
  }

  void add(const RecordFields& r, std::string_view where) {
    if (!r.token_num) fail(where, "missing field token_num");
    if (*r.token_num <= 0) fail(where, fmt::format("token_num must be a positive integer, got {}", *r.token_num));
    if (r.vit_num && r.vision_tokens) fail(where, "has both vit_num and vision_tokens; give one");
    if (!r.vit_num && !r.vision_tokens) fail(where, "missing field vit_num (or vision_tokens)");
    const VisionUnit unit = r.vit_num ? VisionUnit::kTiles : VisionUnit::kPatchTokens;
    const char* field = r.vit_num ? "vit_num" : "vision_tokens";
    const int64_t vision = r.vit_num ? *r.vit_num : *r.vision_tokens;
    if (vision < 0) fail(where, fmt::format("{} must be >= 0, got {}", field, vision));
    if (unit_ && *unit_ != unit) {
      fail(where, fmt::format("gives {} but earlier records give {}; one dataset uses one vision unit", field,
                              *unit_ == VisionUnit::kTiles ? "vit_num" : "vision_tokens"));
    }
    if (!unit_) {
      unit_ = unit;
      if (dataset_.empty()) dataset_.set_vision_unit(unit);
    }
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    if (vision > kMax) fail(where, fmt::format("{} is too large: {}", field, vision));
    if (*r.token_num > kMax) fail(where, fmt::format("token_num is too large: {}", *r.token_num));
    int64_t images = r.image_flags ? *r.image_flags : vision;
    if (unit == VisionUnit::kPatchTokens && !r.image_flags) images = vision > 0 ? 1 : 0;
    if (images < 0) {
      fail(where, fmt::format("image_flags must be >= 0, got {} (a sample that failed preprocessing)", images));
    }
    if (images > kMax) fail(where, fmt::format("image_flags is too large: {}", images));
    dataset_.add(static_cast<uint32_t>(vision), static_cast<uint32_t>(*r.token_num), static_cast<int32_t>(images),
                 r.task);
    ++records_;
  }

  uint32_t records() const { return records_; }

 private:
  const std::string& file_;
  Dataset& dataset_;
  std::optional<VisionUnit> unit_;
  uint32_t records_ = 0;
};

std::string_view json_error_text(simdjson::error_code error) { return simdjson::error_message(error); }

// True when nothing but whitespace follows what was read (simdjson reports the end as out of bounds).
bool at_end(od::document& doc) { return doc.current_location().error() == simdjson::OUT_OF_BOUNDS; }

// Whether `token` (a raw JSON token, trailing spaces included) is a number by JSON's grammar:
// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?. Its value is not needed, so one past what a double or an integer
// holds (a long id, 1e400) is still JSON.
bool is_json_number(std::string_view token) {
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t' || token.back() == '\n' || token.back() == '\r')) {
    token.remove_suffix(1);
  }
  size_t i = 0;
  const auto digits = [&] {
    const size_t first = i;
    while (i < token.size() && token[i] >= '0' && token[i] <= '9') ++i;
    return i > first;
  };
  if (i < token.size() && token[i] == '-') ++i;
  if (i < token.size() && token[i] == '0') {
    ++i;
  } else if (i >= token.size() || token[i] < '1' || token[i] > '9' || !digits()) {
    return false;
  }
  if (i < token.size() && token[i] == '.' && (++i, !digits())) return false;
  if (i < token.size() && (token[i] == 'e' || token[i] == 'E')) {
    ++i;
    if (i < token.size() && (token[i] == '+' || token[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == token.size();
}

// Nesting past this in a field the record does not use is refused, before it could exhaust the stack.
constexpr int kMostSkippedDepth = 1024;

// Reads a value the record does not use, all of it: simdjson skips such a value without checking that it is JSON.
// Returns the first error; DEPTH_ERROR past kMostSkippedDepth.
simdjson::error_code check_skipped_value(od::value value, int depth = 1) {
  if (depth > kMostSkippedDepth) return simdjson::DEPTH_ERROR;
  od::json_type type;
  if (auto error = value.type().get(type)) return error;
  switch (type) {
    case od::json_type::object: {
      od::object object;
      if (auto error = value.get_object().get(object)) return error;
      for (auto field_result : object) {
        od::field field;
        if (auto error = std::move(field_result).get(field)) return error;
        std::string_view key;
        if (auto error = field.unescaped_key().get(key)) return error;
        if (auto error = check_skipped_value(field.value(), depth + 1)) return error;
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::array: {
      od::array array;
      if (auto error = value.get_array().get(array)) return error;
      for (auto element : array) {
        od::value item;
        if (auto error = element.get(item)) return error;
        if (auto error = check_skipped_value(item, depth + 1)) return error;
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::string: return value.get_string().error();
    case od::json_type::number: {
      return is_json_number(value.raw_json_token()) ? simdjson::SUCCESS : simdjson::NUMBER_ERROR;
    }
    case od::json_type::boolean: return value.get_bool().error();
    case od::json_type::null: {
      bool null = false;
      if (auto error = value.is_null().get(null)) return error;
      return null ? simdjson::SUCCESS : simdjson::N_ATOM_ERROR;
    }
  }
  return simdjson::INCORRECT_TYPE;
}

// Reads the fields of one JSON object record. simdjson finds text that is not JSON inside a record only as it
// reads it: `malformed(error)` refuses the file there, and does not return.
template <typename Malformed>
void read_json_record(od::object object, RecordSink& sink, std::string_view where, RecordFields& r,
                      Malformed&& malformed) {
  // A `malformed` that returned would leave the field unread: a fault here, never a record read on.
  const auto refuse = [&](simdjson::error_code error) {
    malformed(error);
    throw InternalError(fmt::format("{}: a malformed record was not refused", where));
  };
  r = RecordFields{};
  // The keys read so far, to refuse one given twice (its second value would silently win): records hold a few
  // keys, so a scan of a fixed array, and a vector only past it. The views live in the document's string buffer.
  std::array<std::string_view, 8> first_keys;
  std::unordered_set<std::string_view> more_keys;  // past them: a record of many keys stays linear
  size_t keys = 0;
  for (auto field_result : object) {
    od::field field;
    if (auto error = std::move(field_result).get(field)) refuse(error);
    std::string_view key;
    if (auto error = field.unescaped_key().get(key)) refuse(error);
    const auto first_end = first_keys.begin() + static_cast<std::ptrdiff_t>(std::min(keys, first_keys.size()));
    if (std::find(first_keys.begin(), first_end, key) != first_end || more_keys.count(key) > 0) {
      sink.fail(where, fmt::format("field {} appears twice", key));
    }
    if (keys < first_keys.size()) {
      first_keys[keys] = key;
    } else {
      more_keys.insert(key);
    }
    ++keys;
    std::optional<int64_t>* slot = nullptr;
    if (key == "vit_num") slot = &r.vit_num;
    else if (key == "vision_tokens") slot = &r.vision_tokens;
    else if (key == "token_num") slot = &r.token_num;
    else if (key == "image_flags") slot = &r.image_flags;
    if (slot) {
      int64_t value = 0;
      if (field.value().get_int64().get(value)) sink.fail(where, fmt::format("{} must be an integer", key));
      *slot = value;
    } else if (key == "task") {
      std::string_view task;
      if (field.value().get_string().get(task)) sink.fail(where, "task must be a string");
      r.task.assign(task);
    } else if (auto error = check_skipped_value(field.value())) {  // other fields are allowed, and read through
      if (error == simdjson::DEPTH_ERROR) {
        sink.fail(where, fmt::format("field {} nests arrays and objects more than {} deep", key, kMostSkippedDepth));
      }
      refuse(error);
    }
  }
}

// Refuses a JSON array that simdjson refused as a whole (a truncated file, a bracket left open) with the record it
// goes wrong in and the byte (counted from 0), found by a second pass through nlohmann's SAX parser, which stops
// at the first error and builds nothing: "record 3: malformed JSON at byte 120 (why)", "record 3: malformed JSON:
// the file ends inside the record (byte 130)", without the record where the error lies outside every record, and
// with simdjson's reason alone where that parser finds nothing wrong. The reason given with a byte is the second
// parser's, which found it there (the two may stop at different faults). Run only once the file is known to be bad.
class JsonArrayRefusal : public nlohmann::json_sax<nlohmann::json> {
 public:
  // `where`: the record simdjson was reading, named where the second parser finds nothing wrong.
  [[noreturn]] static void refuse(std::string_view text, const std::string& file, simdjson::error_code error,
                                  std::string_view where = {}) {
    JsonArrayRefusal place;
    nlohmann::json::sax_parse(text, &place);
    if (!place.byte_) {
      throw InputError(fmt::format("{}: {}malformed JSON ({})", file, where.empty() ? "" : fmt::format("{}: ", where),
                                   json_error_text(error)));
    }
    // A record is an element of the top-level array: depth 2 or more is inside one.
    const bool in_record = place.depth_ >= 2;
    const std::string record = in_record ? fmt::format("record {}: ", place.records_) : "";
    // The parser counts bytes from 1, and the end of the input as one more.
    const size_t byte = *place.byte_ - 1;
    if (byte >= text.size()) {
      if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
        throw InputError(fmt::format("{}: malformed JSON: the file holds no JSON value", file));
      }
      throw InputError(fmt::format("{}: {}malformed JSON: the file ends inside the {} (byte {})", file, record,
                                   in_record ? "record" : place.depth_ == 1 ? "array" : "document", text.size()));
    }
    throw InputError(fmt::format("{}: {}malformed JSON at byte {} ({})", file, record, byte, place.reason_));
  }

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t byte, const std::string&, const nlohmann::json::exception& e) override {
    byte_ = byte;
    reason_ = reason_of(e.what());
    return false;
  }

 private:
  // "[json.exception.parse_error.101] parse error at line 1, column 3: syntax error while parsing array - invalid
  // literal; last read: '1}'" without the location before the reason (the byte replaces it) and the text last read
  // after it (it can run long and hold bytes that are not UTF-8).
  static std::string reason_of(std::string_view what) {
    const size_t column = what.find("column ");
    const size_t colon = what.find(": ", column == std::string_view::npos ? 0 : column);
    if (colon != std::string_view::npos) what.remove_prefix(colon + 2);
    return std::string(what.substr(0, what.find("; last read:")));
  }
  bool value() {
    records_ += depth_ == 1;  // a bare value as a record
    return true;
  }
  bool open() {
    ++depth_;
    return true;
  }
  bool close() {
    --depth_;
    records_ += depth_ == 1;
    return true;
  }

  int64_t depth_ = 0;
  uint64_t records_ = 0;  // complete ones
  std::optional<size_t> byte_;
  std::string reason_;
};

void parse_json_array(std::string_view text, const std::string& file, RecordSink& sink) {
  od::parser parser;
  od::document doc;
  if (auto error = parser.iterate(text.data(), text.size(), text.size() + simdjson::SIMDJSON_PADDING).get(doc)) {
    JsonArrayRefusal::refuse(text, file, error);
  }
  od::array array;
  if (auto error = doc.get_array().get(array)) {
    if (error == simdjson::INCORRECT_TYPE) throw InputError(fmt::format("{}: expected a JSON array of records", file));
    JsonArrayRefusal::refuse(text, file, error);
  }
  RecordFields fields;
  uint64_t index = 0;
  for (auto element : array) {
    const std::string where = fmt::format("record {}", index);
    // Text that is not JSON is placed at its byte, as when simdjson refuses the whole file.
    const auto malformed = [&](simdjson::error_code error) { JsonArrayRefusal::refuse(text, file, error, where); };
    od::object object;
    if (auto error = element.get_object().get(object)) {
      // Not an object: a value of another type, or text that is not JSON (`[{...},]`, `tru`), placed at its byte.
      od::value value;
      if (error != simdjson::INCORRECT_TYPE) malformed(error);
      if (auto bad = element.get(value)) malformed(bad);
      if (auto bad = check_skipped_value(value); bad && bad != simdjson::DEPTH_ERROR) malformed(bad);
      sink.fail(where, "expected a JSON object");
    }
    read_json_record(object, sink, where, fields, malformed);
    sink.add(fields, where);
    ++index;
  }
  if (!at_end(doc)) throw InputError(fmt::format("{}: malformed JSON (content after the array)", file));
}

void parse_json_lines(std::string_view text, RecordSink& sink) {
  od::parser parser;
  RecordFields fields;
  size_t line_start = 0;
  uint64_t line_number = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = text.size();
    ++line_number;
    std::string_view line = text.substr(line_start, line_end - line_start);
    const size_t capacity = text.size() + simdjson::SIMDJSON_PADDING - line_start;
    line_start = line_end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = fmt::format("line {}", line_number);
    od::document doc;
    if (auto error = parser.iterate(line.data(), line.size(), capacity).get(doc)) {
      sink.fail(where, fmt::format("malformed JSON ({})", json_error_text(error)));
    }
    od::object object;
    if (auto error = doc.get_object().get(object)) {
      sink.fail(where, error == simdjson::INCORRECT_TYPE ? std::string("expected a JSON object")
                                                         : fmt::format("malformed JSON ({})", json_error_text(error)));
    }
    read_json_record(object, sink, where, fields, [&](simdjson::error_code error) {
      sink.fail(where, fmt::format("malformed JSON ({})", json_error_text(error)));
    });
    if (!at_end(doc)) sink.fail(where, "malformed JSON (content after the object)");
    sink.add(fields, where);
  }
}

// CSV through libcsv: the first row names the columns.
class CsvReader {
 public:
  CsvReader(const std::string& file, RecordSink& sink) : file_(file), sink_(sink) {}

  void parse(std::string_view text) {
    csv_parser parser;
    if (csv_init(&parser, CSV_STRICT | CSV_STRICT_FINI | CSV_EMPTY_IS_NULL) != 0) {
      throw std::bad_alloc();
    }
    struct Guard {
      csv_parser* p;
      ~Guard() { csv_free(p); }
    } guard{&parser};
    // Fed a line at a time, so a row is named by the line it ends on: libcsv skips blank lines and lets a quoted
    // field run over several, so its row count is not the line.
    auto malformed = [&] {
      return InputError(fmt::format("{}: line {}: malformed CSV ({})", file_, std::max<uint64_t>(line_, 1),
                                    csv_strerror(csv_error(&parser))));
    };
    for (size_t at = 0; at < text.size();) {
      // A line ends at \n, \r\n or a lone \r, as libcsv ends rows.
      const size_t newline = text.find_first_of("\r\n", at);
      size_t end = newline == std::string_view::npos ? text.size() : newline + 1;
      if (newline != std::string_view::npos && text[newline] == '\r' && end < text.size() && text[end] == '\n') ++end;
      ++line_;
      if (csv_parse(&parser, text.data() + at, end - at, &CsvReader::on_field, &CsvReader::on_row, this) != end - at) {
        throw malformed();
      }
      at = end;
    }
    if (csv_fini(&parser, &CsvReader::on_field, &CsvReader::on_row, this) != 0) throw malformed();
    if (!header_done_) throw InputError(fmt::format("{}: empty CSV file (no header row)", file_));
  }

 private:
  enum Column { kVitNum, kVisionTokens, kTokenNum, kImageFlags, kTask, kOther };

  static void on_field(void* data, size_t size, void* self) {
    static_cast<CsvReader*>(self)->fields_.push_back(
        data ? std::optional<std::string>(std::string(static_cast<const char*>(data), size)) : std::nullopt);
  }
  static void on_row(int, void* self) { static_cast<CsvReader*>(self)->end_row(); }

  void end_row() {
    std::vector<std::optional<std::string>> fields = std::move(fields_);
    fields_.clear();
    if (!header_done_) {
      for (const auto& name : fields) {
        const std::string n = name.value_or("");
        const Column column = n == "vit_num" ? kVitNum : n == "vision_tokens" ? kVisionTokens
                              : n == "token_num" ? kTokenNum : n == "image_flags" ? kImageFlags
                              : n == "task" ? kTask : kOther;
        // A field named twice would be read from its last column, the first silently dropped.
        if (column != kOther && std::find(columns_.begin(), columns_.end(), column) != columns_.end()) {
          sink_.fail(fmt::format("line {}", line_), fmt::format("names column '{}' twice", n));
        }
        columns_.push_back(column);
      }
      header_done_ = true;
      return;
    }
    const std::string where = fmt::format("line {}", line_);
    if (fields.size() != columns_.size()) {
      sink_.fail(where, fmt::format("has {} fields, the header has {}", fields.size(), columns_.size()));
    }
    RecordFields r;
    for (size_t i = 0; i < fields.size(); ++i) {
      if (columns_[i] == kOther) continue;
      if (columns_[i] == kTask) {
        r.task = fields[i].value_or("");
        // Task names are written out in JSON (stats --json), which holds only UTF-8 text.
        if (!simdjson::validate_utf8(r.task.data(), r.task.size())) sink_.fail(where, "task is not UTF-8 text");
        continue;
      }
      if (!fields[i]) continue;  // an empty cell is an absent field
      const std::string& text = *fields[i];
      int64_t value = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      const char* name = columns_[i] == kVitNum ? "vit_num" : columns_[i] == kVisionTokens ? "vision_tokens"
                         : columns_[i] == kTokenNum ? "token_num" : "image_flags";
      if (ec != std::errc() || end != text.data() + text.size()) {
        sink_.fail(where, fmt::format("{} must be an integer, got '{}'", name, text));
      }
      (columns_[i] == kVitNum ? r.vit_num : columns_[i] == kVisionTokens ? r.vision_tokens
       : columns_[i] == kTokenNum ? r.token_num : r.image_flags) = value;
    }
    sink_.add(r, where);
  }

  const std::string& file_;
  RecordSink& sink_;
  bool header_done_ = false;
  std::vector<Column> columns_;
  std::vector<std::optional<std::string>> fields_;
  uint64_t line_ = 0;  // the line being read
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::string_view without_byte_order_mark(char* data, size_t size, std::string_view path) {
  std::string_view text(data, size);
  if (!text.starts_with("\xEF\xBB\xBF")) return text;
  if (ends_with(path, ".csv")) return text.substr(3);
  data[0] = data[1] = data[2] = ' ';
  return text;
}

std::optional<LengthFormat> detect_length_format(std::string_view path, std::string_view text) {
  if (ends_with(path, ".jsonl") || ends_with(path, ".ndjson")) return LengthFormat::kJsonLines;
  if (ends_with(path, ".csv")) return LengthFormat::kCsv;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '[') return LengthFormat::kJsonArray;
  if (first != std::string_view::npos && text[first] == '{') {
    if (ends_with(path, ".json")) return std::nullopt;  // a meta index
    return LengthFormat::kJsonLines;
  }
  return LengthFormat::kJsonArray;  // and let the parser say what is wrong
}

uint32_t parse_length_records(std::string_view text, LengthFormat format, const std::string& file,
                              Dataset& dataset) {
  const size_t size_before = dataset.size();
  // A record takes at least ~24 bytes of JSON (~8 of CSV): reserving that many keeps the columns from being copied
  // as they grow; pages reserved but never written are never resident.
  dataset.reserve(size_before + text.size() / (format == LengthFormat::kCsv ? 8 : 24));
  RecordSink sink(file, dataset);
  try {
    switch (format) {
      case LengthFormat::kJsonArray: parse_json_array(text, file, sink); break;
      case LengthFormat::kJsonLines: parse_json_lines(text, sink); break;
      case LengthFormat::kCsv: CsvReader(file, sink).parse(text); break;
    }
  } catch (...) {
    dataset.truncate(size_before);
    throw;
  }
  return sink.records();
}

uint32_t read_length_file(const std::string& path, Dataset& dataset) {
  simdjson::padded_string text;
  if (auto error = simdjson::padded_string::load(path).get(text)) {
    std::error_code ignored;
    throw InputError(fmt::format("{}: cannot read ({})", path,
                                 std::filesystem::exists(path, ignored) ? simdjson::error_message(error)
                                                                        : "no such file"));
  }
  note_input_file(path);
  const std::string_view view = without_byte_order_mark(text.data(), text.size(), path);
  std::optional<LengthFormat> format = detect_length_format(path, view);
  if (!format) throw InputError(fmt::format("{}: a JSON object, not a length file (a meta index?)", path));
  return parse_length_records(view, *format, path, dataset);
}

}  // namespace fulcrum

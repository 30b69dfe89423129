#ifndef FULCRUM_DATA_LENGTH_FILE_H_
#define FULCRUM_DATA_LENGTH_FILE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fulcrum/core/dataset.h"

namespace fulcrum {

// Per-sample length files. A record has `token_num` (LLM tokens, image tokens included), either `vit_num`
// (448-px tiles) or `vision_tokens` (encoder patch tokens), optionally `image_flags` (real image tiles,
// default: the vision count) and `task` (a string). Other fields are ignored. Formats:
//   kJsonArray  the OmniBal file: [{"vit_num": 5, "token_num": 811, "image_flags": 5}, ...]
//   kJsonLines  one such object per line
//   kCsv        a header row naming the fields, then one row per sample
enum class LengthFormat { kJsonArray, kJsonLines, kCsv };

// The format a file's name and first byte say it has; nullopt for a JSON object, which is a meta index.
std::optional<LengthFormat> detect_length_format(std::string_view path, std::string_view text);

// Appends the records of `text` to `dataset`, all or none: a bad record throws InputError naming `file` and
// the record (array position, or line for JSON Lines and CSV). `text` must stay readable for
// simdjson::SIMDJSON_PADDING bytes past its end. Returns the number of records read.
uint32_t parse_length_records(std::string_view text, LengthFormat format, const std::string& file,
                              Dataset& dataset);

// The text of a file read whole (`data`, `size` bytes, writable) without a leading UTF-8 byte order mark, which
// spreadsheets write before CSV: a CSV file's text starts after it (its lines keep their numbers); any other's
// mark is blanked, so that byte offsets in messages stay the file's.
std::string_view without_byte_order_mark(char* data, size_t size, std::string_view path);

// Reads a whole length file (format detected) into `dataset`.
uint32_t read_length_file(const std::string& path, Dataset& dataset);

}  // namespace fulcrum

#endif  // FULCRUM_DATA_LENGTH_FILE_H_

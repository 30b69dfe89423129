#include "fulcrum/data/meta_index.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>

#include "fulcrum/core/error.h"
#include "fulcrum/core/input_files.h"
#include "fulcrum/core/json_document.h"
#include "fulcrum/data/length_file.h"

namespace fulcrum {
namespace {

// repeat_time's ceiling, and the most samples a concatenation may hold (sample ids are 32-bit).
constexpr double kMostRepeats = 1e6;
constexpr double kMostSamples = 4294967295.0;

namespace fs = std::filesystem;

simdjson::padded_string read_padded(const std::string& path) {
  std::error_code ignored;
  if (fs::is_directory(path, ignored)) throw InputError(fmt::format("{}: is a folder, not a file", path));
  simdjson::padded_string text;
  if (auto error = simdjson::padded_string::load(path).get(text)) {
    std::error_code ignored;
    throw InputError(fmt::format("{}: cannot read ({})", path,
                                 fs::exists(path, ignored) ? simdjson::error_message(error) : "no such file"));
  }
  note_input_file(path);
  return text;
}

// Where an index path points: absolute as is, else the index's folder, then the root.
std::optional<std::string> resolve(const std::string& written, const fs::path& index_dir, const std::string& root) {
  fs::path p(written);
  std::error_code ec;
  if (p.is_absolute()) return fs::is_regular_file(p, ec) ? std::optional(p.string()) : std::nullopt;
  for (const fs::path& base : {index_dir, fs::path(root)}) {
    fs::path candidate = (base / p).lexically_normal();
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  return std::nullopt;
}

void append_source(LoadedData& loaded, const MetaEntry& entry, const std::string& path, const std::string& index) {
  Dataset& data = loaded.dataset;
  const size_t first = data.size();
  const uint32_t records = read_length_file(path, data);
  const double r = entry.repeat_time;
  // Sample ids are 32-bit: the concatenation must stay below 2^32 samples, checked before any repeat is made.
  if (static_cast<double>(first) + std::floor(static_cast<double>(records) * r) > kMostSamples) {
    throw InputError(fmt::format("{}: entry '{}': {} records × repeat_time {} take the index past {} samples", index,
                                 entry.name, records, r, kMostSamples));
  }
  const double whole = std::floor(r);
  if (r < 1.0) {
    data.truncate(first + static_cast<size_t>(std::floor(records * r)));
  } else {
    for (int k = 1; k < static_cast<int>(whole); ++k) data.repeat_range(static_cast<uint32_t>(first), records);
    data.repeat_range(static_cast<uint32_t>(first), static_cast<uint32_t>(std::floor(records * (r - whole))));
  }
  data.add_source({entry.name, path, static_cast<uint32_t>(first), static_cast<uint32_t>(data.size() - first),
                   records, r});
}

}  // namespace

std::vector<MetaEntry> parse_meta_index(std::string_view text, const std::string& file) {
  // In the file's order: the entries' concatenation numbers the samples, as the training code's dataset does.
  const nlohmann::ordered_json index = parse_ordered_json_document(text, file);
  if (!index.is_object()) throw InputError(fmt::format("{}: a meta index must be a JSON object", file));
  std::vector<MetaEntry> entries;
  for (const auto& item : index.items()) {
    const std::string& name = item.key();
    const nlohmann::ordered_json& value = item.value();
    auto fail = [&](std::string_view what) {
      throw InputError(fmt::format("{}: entry '{}': {}", file, name, what));
    };
    if (!value.is_object()) fail("must be an object");
    auto lengths = value.find("token_lengths");
    if (lengths == value.end()) fail("has no token_lengths (the per-sample length file)");
    if (!lengths->is_string()) fail("token_lengths must be a string");
    MetaEntry entry{name, lengths->get<std::string>(), 1.0};
    if (auto r = value.find("repeat_time"); r != value.end()) {
      if (!r->is_number() || !(r->get<double>() > 0.0) || !(r->get<double>() <= kMostRepeats)) {
        fail(fmt::format("repeat_time must be a number above 0 and at most {}", kMostRepeats));
      }
      entry.repeat_time = r->get<double>();
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

LoadedData load_dataset(const std::string& path, const LoadOptions& options) {
  LoadedData loaded;
  simdjson::padded_string text = read_padded(path);
  const std::string_view view = without_byte_order_mark(text.data(), text.size(), path);
  if (std::optional<LengthFormat> format = detect_length_format(path, view)) {
    const uint32_t records = parse_length_records(view, *format, path, loaded.dataset);
    if (records == 0) throw InputError(fmt::format("{}: no records", path));
    loaded.dataset.add_source({fs::path(path).filename().string(), path, 0, records, records, 1.0});
    return loaded;
  }
  std::vector<MetaEntry> entries;
  try {
    entries = parse_meta_index(view, path);
  } catch (const InputError& e) {
    // A JSON Lines length file named .json reads as an index: say what it looks like.
    const std::string_view first_line = view.substr(0, view.find('\n'));
    if (first_line.find("\"token_num\"") == std::string_view::npos) throw;
    throw InputError(fmt::format("{} (its first line is a length record: a JSON Lines file is named .jsonl)",
                                 e.what()));
  }
  text = simdjson::padded_string();  // the index is small, but free it before the length files
  const fs::path index_dir = fs::path(path).parent_path();
  for (const MetaEntry& entry : entries) {
    std::optional<std::string> file = resolve(entry.token_lengths, index_dir, options.root);
    if (!file) {
      if (options.strict) {
        throw InputError(fmt::format("{}: entry '{}': {} not found (in {} or {})", path, entry.name,
                                     entry.token_lengths, index_dir.empty() ? "." : index_dir.string(), options.root));
      }
      loaded.missing.push_back(entry);
      continue;
    }
    append_source(loaded, entry, *file, path);
  }
  if (loaded.dataset.empty()) {
    if (entries.empty()) throw InputError(fmt::format("{}: the index has no entries", path));
    if (loaded.missing.empty()) {  // repeat_time below 1 kept none of their records
      throw InputError(fmt::format("{}: its {} entries keep no samples", path, entries.size()));
    }
    const MetaEntry& first = loaded.missing.front();
    throw InputError(fmt::format("{}: none of its {} entries could be loaded (entry '{}': {} not found)", path,
                                 entries.size(), first.name, first.token_lengths));
  }
  // Reported only once loading succeeded, so a failed load says one thing: why it failed.
  for (const MetaEntry& entry : loaded.missing) {
    if (options.warnings) {
      *options.warnings << fmt::format("fulcrum: warning: {}: entry '{}': {} not found; skipped\n", path, entry.name,
                                       entry.token_lengths);
    }
  }
  return loaded;
}

}  // namespace fulcrum

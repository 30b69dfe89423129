#ifndef FULCRUM_DATA_META_INDEX_H_
#define FULCRUM_DATA_META_INDEX_H_

#include <iosfwd>
#include <string>
#include <vector>

#include "fulcrum/core/dataset.h"

namespace fulcrum {

// An InternVL-style meta index: a JSON object mapping dataset name → {"token_lengths": path, "repeat_time": r}.
// repeat_time < 1 keeps the first ⌊n·r⌋ records, r > 1 repeats the file ⌊r⌋ times then adds the first
// ⌊n·(r − ⌊r⌋)⌋ records, as InternVL's loader does. Paths resolve against the index's folder, then `root`.
struct MetaEntry {
  std::string name;
  std::string token_lengths;  // as written in the index
  double repeat_time = 1.0;
};

std::vector<MetaEntry> parse_meta_index(std::string_view text, const std::string& file);

struct LoadOptions {
  std::string root = ".";          // second place to resolve index paths
  bool strict = false;             // a missing index entry is an error, not a warning
  std::ostream* warnings = nullptr;  // where skipped entries are reported (one line each)
};

struct LoadedData {
  Dataset dataset;
  std::vector<MetaEntry> missing;  // index entries whose file was absent (skipped, reported)
};

// Loads a length file or a meta index. Throws InputError when nothing could be loaded or any record is bad.
LoadedData load_dataset(const std::string& path, const LoadOptions& options);

}  // namespace fulcrum

#endif  // FULCRUM_DATA_META_INDEX_H_

#ifndef FULCRUM_DATA_DATASET_STATS_H_
#define FULCRUM_DATA_DATASET_STATS_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "fulcrum/core/dataset.h"

namespace fulcrum {

// Mean, spread and nearest-rank percentiles of one per-sample column.
struct Distribution {
  double mean = 0, stddev = 0;
  int64_t min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
  int64_t total = 0;
  int64_t bin_width = 1;
  std::vector<std::pair<int64_t, int64_t>> histogram;  // (lower bound of a bin, samples), empty bins left out
};

Distribution summarize(std::span<const uint32_t> values, int64_t bin_width);

struct DatasetStats {
  int64_t samples = 0;
  int64_t text_only = 0;  // samples with no real image (image_flags 0)
  VisionUnit vision_unit = VisionUnit::kTiles;
  Distribution vision;
  Distribution tokens;
  std::vector<std::pair<std::string, int64_t>> tasks;  // task → samples, when the data names tasks
  std::vector<DatasetSource> sources;
};

DatasetStats compute_stats(const Dataset& data);
nlohmann::ordered_json stats_to_json(const DatasetStats& stats);

}  // namespace fulcrum

#endif  // FULCRUM_DATA_DATASET_STATS_H_

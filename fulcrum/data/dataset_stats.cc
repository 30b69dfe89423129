#include "fulcrum/data/dataset_stats.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace fulcrum {

Distribution summarize(std::span<const uint32_t> values, int64_t bin_width) {
  Distribution d;
  d.bin_width = bin_width;
  if (values.empty()) return d;
  std::vector<uint32_t> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  // Nearest rank: the smallest value with at least q·n values at or below it.
  auto rank = [&](double q) {
    const size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
    return static_cast<int64_t>(sorted[std::clamp<size_t>(k, 1, n) - 1]);
  };
  d.min = sorted.front();
  d.max = sorted.back();
  d.p50 = rank(0.50);
  d.p90 = rank(0.90);
  d.p99 = rank(0.99);
  long double sum = 0, sum_sq = 0;
  for (uint32_t v : sorted) {
    sum += v;
    sum_sq += static_cast<long double>(v) * v;
  }
  d.total = static_cast<int64_t>(sum);
  d.mean = static_cast<double>(sum / n);
  d.stddev = static_cast<double>(std::sqrt(std::max<long double>(0, sum_sq / n - (sum / n) * (sum / n))));
  for (size_t i = 0; i < n;) {
    const int64_t bin = static_cast<int64_t>(sorted[i]) / bin_width * bin_width;
    size_t j = i;
    while (j < n && static_cast<int64_t>(sorted[j]) < bin + bin_width) ++j;
    d.histogram.emplace_back(bin, static_cast<int64_t>(j - i));
    i = j;
  }
  return d;
}

DatasetStats compute_stats(const Dataset& data) {
  DatasetStats s;
  s.samples = static_cast<int64_t>(data.size());
  s.vision_unit = data.vision_unit();
  s.vision = summarize(data.vision_column(), data.vision_unit() == VisionUnit::kTiles ? 1 : 256);
  s.tokens = summarize(data.tokens_column(), 256);
  std::vector<int64_t> per_task(data.task_names().size(), 0);
  for (uint32_t id = 0; id < data.size(); ++id) {
    s.text_only += data.images(id) == 0;
    ++per_task[data.task(id)];
  }
  if (data.task_names().size() > 1) {
    for (size_t t = 0; t < per_task.size(); ++t) {
      if (per_task[t] > 0) s.tasks.emplace_back(t == 0 ? "(none)" : data.task_names()[t], per_task[t]);
    }
  }
  s.sources = data.sources();
  return s;
}

namespace {
nlohmann::ordered_json distribution_json(const Distribution& d) {
  nlohmann::ordered_json histogram = nlohmann::ordered_json::array();
  for (const auto& [low, count] : d.histogram) histogram.push_back({low, count});
  return {{"total", d.total}, {"mean", d.mean}, {"stddev", d.stddev}, {"min", d.min}, {"p50", d.p50},
          {"p90", d.p90},     {"p99", d.p99},   {"max", d.max},       {"histogram_bin_width", d.bin_width},
          {"histogram", histogram}};
}
}  // namespace

nlohmann::ordered_json stats_to_json(const DatasetStats& s) {
  nlohmann::ordered_json sources = nlohmann::ordered_json::array();
  for (const DatasetSource& src : s.sources) {
    sources.push_back({{"name", src.name}, {"path", src.path}, {"first_id", src.first_id},
                       {"samples", src.samples}, {"records", src.records}, {"repeat_time", src.repeat_time}});
  }
  nlohmann::ordered_json out{{"samples", s.samples},
                             {"text_only", s.text_only},
                             {"vision_unit", std::string(vision_unit_name(s.vision_unit))},
                             {"vision", distribution_json(s.vision)},
                             {"tokens", distribution_json(s.tokens)},
                             {"sources", sources}};
  if (!s.tasks.empty()) {
    nlohmann::ordered_json tasks = nlohmann::ordered_json::object();
    for (const auto& [name, count] : s.tasks) tasks[name] = count;
    out["tasks"] = tasks;
  }
  return out;
}

}  // namespace fulcrum

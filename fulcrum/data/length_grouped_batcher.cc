#include "fulcrum/data/length_grouped_batcher.h"

#include <algorithm>
#include <limits>

#include "fulcrum/core/rng.h"
#include "fulcrum/data/epoch_stream.h"

namespace fulcrum {

namespace {
constexpr uint64_t kLengthGroupedPurpose = 0x6c656e67726f7570ULL;  // "lengroup"
}

std::vector<std::vector<uint32_t>> split_to_even_chunks(std::span<const uint32_t> ids,
                                                        std::span<const uint32_t> tokens, int chunks) {
  std::vector<std::vector<uint32_t>> out(chunks);
  const size_t n = ids.size();
  if (n % static_cast<size_t>(chunks) != 0) {
    for (size_t i = 0; i < n; ++i) out[i % chunks].push_back(ids[i]);
    return out;
  }
  const size_t per_chunk = n / chunks;
  std::vector<uint64_t> lengths(chunks, 0);
  constexpr uint64_t kFull = std::numeric_limits<uint64_t>::max();
  for (uint32_t id : ids) {
    const int shortest = static_cast<int>(std::min_element(lengths.begin(), lengths.end()) - lengths.begin());
    out[shortest].push_back(id);
    lengths[shortest] += tokens[id];
    if (out[shortest].size() == per_chunk) lengths[shortest] = kFull;
  }
  return out;
}

std::vector<uint32_t> modality_length_grouped_order(const Dataset& data, int64_t megabatch, int dp,
                                                    uint64_t seed, int64_t epoch) {
  std::span<const uint32_t> tokens(data.tokens_column());
  // One modality: shuffle, cut into megabatches, sort each longest first, split evenly over the ranks.
  auto grouped = [&](std::vector<uint32_t> ids, uint64_t purpose) {
    Rng rng({seed, static_cast<uint64_t>(epoch), kLengthGroupedPurpose, purpose});
    rng.shuffle(std::span<uint32_t>(ids));
    std::vector<std::vector<uint32_t>> megabatches;
    for (size_t begin = 0; begin < ids.size(); begin += static_cast<size_t>(megabatch)) {
      const size_t end = std::min(ids.size(), begin + static_cast<size_t>(megabatch));
      std::vector<uint32_t> mb(ids.begin() + static_cast<std::ptrdiff_t>(begin),
                               ids.begin() + static_cast<std::ptrdiff_t>(end));
      std::stable_sort(mb.begin(), mb.end(), [&](uint32_t a, uint32_t b) { return tokens[a] > tokens[b]; });
      std::vector<uint32_t> flat;
      for (auto& chunk : split_to_even_chunks(mb, tokens, dp)) flat.insert(flat.end(), chunk.begin(), chunk.end());
      megabatches.push_back(std::move(flat));
    }
    return megabatches;
  };
  std::vector<uint32_t> multimodal, text_only;
  for (uint32_t id = 0; id < data.size(); ++id) (data.images(id) > 0 ? multimodal : text_only).push_back(id);
  if (multimodal.empty() || text_only.empty()) {
    std::vector<uint32_t> order;
    for (auto& mb : grouped(multimodal.empty() ? std::move(text_only) : std::move(multimodal), 1)) {
      order.insert(order.end(), mb.begin(), mb.end());
    }
    return order;
  }
  auto mm = grouped(std::move(multimodal), 1);
  auto lang = grouped(std::move(text_only), 2);
  std::vector<uint32_t> additional = mm.back();
  additional.insert(additional.end(), lang.back().begin(), lang.back().end());
  std::sort(additional.begin(), additional.end());
  mm.pop_back();
  lang.pop_back();
  std::vector<std::vector<uint32_t>> megabatches = std::move(mm);
  for (auto& mb : lang) megabatches.push_back(std::move(mb));
  Rng rng({seed, static_cast<uint64_t>(epoch), kLengthGroupedPurpose, 3});
  rng.shuffle(std::span<std::vector<uint32_t>>(megabatches));
  std::vector<uint32_t> order;
  order.reserve(data.size());
  for (auto& mb : megabatches) order.insert(order.end(), mb.begin(), mb.end());
  order.insert(order.end(), additional.begin(), additional.end());
  return order;
}

BatchPlan LengthGroupedBatcher::plan(const Dataset& data, const BatchParams& params, const SampleCost&,
                                     int64_t first_step) const {
  return plan_from_order(
      name(), modality_length_grouped_order(data, params.resolved_samples_per_step(), params.dp, params.seed, params.epoch),
      params, data, /*padded=*/true, first_step);
}

}  // namespace fulcrum

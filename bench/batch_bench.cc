// Speed of parsing and balancing at the scale of InternVL's 1.2M-sample SFT mix: the bundled records resampled
// to 1.2M samples in memory.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <simdjson.h>

#include <iterator>
#include <string>

#include "fulcrum/core/rng.h"
#include "fulcrum/cost/flops_sample_cost.h"
#include "fulcrum/data/balanced_batcher.h"
#include "fulcrum/data/isf.h"
#include "fulcrum/data/isf_search.h"
#include "fulcrum/data/length_file.h"
#include "fulcrum/data/meta_index.h"

namespace fulcrum {
namespace {

constexpr size_t kSamples = 1200000;

const Dataset& bundled() {
  static const Dataset data = load_dataset(std::string(FULCRUM_SOURCE_DIR) + "/data/internvl_sft_1.2M.json",
                                           {FULCRUM_SOURCE_DIR, false, nullptr})
                                  .dataset;
  return data;
}

const Dataset& resampled() {
  static const Dataset data = [] {
    const Dataset& source = bundled();
    Rng rng({0, 0x726573616d706c65ULL});
    Dataset out;
    out.reserve(kSamples);
    for (size_t i = 0; i < kSamples; ++i) {
      const auto id = static_cast<uint32_t>(rng.below(source.size()));
      out.add(source.vision(id), source.tokens(id), source.images(id));
    }
    return out;
  }();
  return data;
}

const FlopsSampleCost kCost(VisionUnit::kTiles);

void BM_ParseJsonArray(benchmark::State& state) {
  const Dataset& data = resampled();
  std::string text = "[\n";
  auto it = std::back_inserter(text);
  for (uint32_t id = 0; id < data.size(); ++id) {
    fmt::format_to(it, "    {{\n        \"vit_num\": {},\n        \"token_num\": {},\n        \"image_flags\": {}\n    }}{}\n",
                   data.vision(id), data.tokens(id), data.images(id), id + 1 < data.size() ? "," : "");
  }
  text += "]\n";
  const simdjson::padded_string padded(text);
  for (auto _ : state) {
    Dataset parsed;
    benchmark::DoNotOptimize(parse_length_records(std::string_view(padded.data(), padded.size()),
                                                  LengthFormat::kJsonArray, "bench.json", parsed));
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(data.size()));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
}
BENCHMARK(BM_ParseJsonArray)->Unit(benchmark::kMillisecond);

void BM_Fulcrum(benchmark::State& state) {
  const Dataset& data = resampled();
  BatchParams params;
  params.dp = static_cast<int>(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(BalancedBatcher().plan(data, params, kCost, 0));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(data.size()));
}
BENCHMARK(BM_Fulcrum)->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond);

void BM_IsfFixedCaps(benchmark::State& state) {
  const Dataset& data = resampled();
  BatchParams params;
  params.dp = static_cast<int>(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(IsfBatcher().plan(data, params, kCost, 0));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(data.size()));
}
BENCHMARK(BM_IsfFixedCaps)->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond);

void BM_IsfSearch(benchmark::State& state) {
  const Dataset& data = resampled();
  BatchParams params;
  params.dp = 8;
  for (auto _ : state) benchmark::DoNotOptimize(isf_search(data, params, kCost));
}
BENCHMARK(BM_IsfSearch)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace fulcrum

BENCHMARK_MAIN();

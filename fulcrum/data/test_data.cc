#include "fulcrum/data/test_data.h"

#include "fulcrum/core/rng.h"
#include "fulcrum/data/meta_index.h"

namespace fulcrum::testing {

Dataset random_dataset(size_t samples, uint64_t seed) {
  Rng rng({seed, 0x74657374ULL});
  static constexpr uint32_t kTiles[] = {0, 1, 1, 3, 3, 3, 4, 5, 5, 5};
  Dataset data;
  data.reserve(samples);
  for (size_t i = 0; i < samples; ++i) {
    const uint32_t tiles = kTiles[rng.below(10)];
    const uint32_t tokens = 256 * tiles + 50 + static_cast<uint32_t>(rng.below(1451));
    data.add(tiles, tokens, static_cast<int32_t>(tiles));
  }
  return data;
}

std::string source_path(const std::string& relative) { return std::string(FULCRUM_SOURCE_DIR) + "/" + relative; }

Dataset bundled_dataset() {
  LoadOptions options;
  options.root = FULCRUM_SOURCE_DIR;
  return load_dataset(source_path("data/internvl_sft_1.2M.json"), options).dataset;
}

}  // namespace fulcrum::testing

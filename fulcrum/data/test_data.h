#ifndef FULCRUM_DATA_TEST_DATA_H_
#define FULCRUM_DATA_TEST_DATA_H_

#include <cstdint>
#include <string>

#include "fulcrum/core/dataset.h"

namespace fulcrum::testing {

// A random dataset shaped like InternVL's mix: tiles from {0 (text-only), 1, 3, 4, 5}, tokens 256 per tile plus
// 50..1500 text tokens.
Dataset random_dataset(size_t samples, uint64_t seed);

// The bundled InternVL SFT length files (three datasets, 60,495 samples).
Dataset bundled_dataset();
std::string source_path(const std::string& relative);

}  // namespace fulcrum::testing

#endif  // FULCRUM_DATA_TEST_DATA_H_

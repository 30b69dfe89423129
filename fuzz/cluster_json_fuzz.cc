// libFuzzer target: any bytes given to the cluster JSON reader either make a ClusterSpec or an InputError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fulcrum/core/error.h"
#include "fulcrum/model/cluster_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const fulcrum::ClusterSpec cluster =
        fulcrum::cluster_from_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    (void)cluster.usable_memory_bytes();
    (void)cluster.nodes();
  } catch (const fulcrum::InputError&) {
  }
  return 0;
}

// libFuzzer target: any bytes given to the profile table reader either make a ProfileTable or an InputError, and
// every table it makes prices each entry's own layer pass (and the whole backward, and the other passes) at, between
// and beyond its measured token counts with a finite, non-negative time.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/profiled_cost.h"
#include "fulcrum/model/cluster_spec.h"

namespace {

fulcrum::LayerSpec layer_of(const fulcrum::ProfileEntry& e) {
  fulcrum::LayerSpec l;
  l.kind = e.kind;
  l.hidden = e.hidden;
  l.ffn = e.ffn;
  l.heads = e.heads;
  l.kv_heads = e.kv_heads;
  l.head_dim = e.head_dim;
  l.vocab = e.vocab;
  l.in_features = e.in_features;
  l.mlp = e.mlp;
  l.window_tokens = e.window_tokens;
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fulcrum::AnalyticCost analytic(fulcrum::cluster_preset("cpu:2"));
  fulcrum::ProfileTable table;
  try {
    table = fulcrum::parse_profile_table(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const fulcrum::InputError&) {
    return 0;
  }
  const fulcrum::ProfiledCost cost(analytic, table);
  for (const fulcrum::ProfileEntry& e : table.entries) {
    // Shapes too large to price meaningfully are the analytic model's business, not the table's.
    if (e.hidden > (1 << 20) || e.ffn > (1 << 22) || e.heads > 4096 || e.head_dim > 4096 || e.vocab > (1 << 22) ||
        e.in_features > (1 << 22)) {
      continue;
    }
    const fulcrum::LayerSpec layer = layer_of(e);
    for (double measured : {e.tokens.front(), e.tokens.back()}) {
      for (double factor : {0.5, 1.0, 1.5, 4.0}) {
        const int64_t tokens = std::max<int64_t>(1, static_cast<int64_t>(std::min(measured * factor, 1e7)));
        for (fulcrum::Pass pass : {e.pass, fulcrum::Pass::kBackward, fulcrum::Pass::kForward}) {
          fulcrum::LayerWork work;
          work.layer = &layer;
          work.pass = pass;
          work.batch = {1, tokens, tokens * tokens};
          work.sharding.tp = e.tp;
          work.sharding.sequence_parallel = e.sequence_parallel;
          work.dtype = e.dtype;
          work.recompute = fulcrum::Recompute::kFull;
          double seconds = 0;
          try {
            seconds = cost.layer_cost(work).seconds;
          } catch (const fulcrum::InputError&) {
            continue;  // a shape the analytic model refuses (heads not dividing, ...) says so
          }
          if (!std::isfinite(seconds) || seconds < 0) std::abort();
        }
      }
    }
  }
  return 0;
}

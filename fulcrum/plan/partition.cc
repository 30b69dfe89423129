#include "fulcrum/plan/partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

double boundary(const LayerChain& chain, int64_t after_layer) {
  if (after_layer < 0 || static_cast<size_t>(after_layer) >= chain.boundary_seconds.size()) return 0;
  return chain.boundary_seconds[after_layer];
}

void check(size_t layers, size_t boundaries, int stages) {
  if (stages < 1) throw InputError(fmt::format("{} pipeline stages: at least one is needed", stages));
  if (layers < static_cast<size_t>(stages)) {
    throw InputError(fmt::format("{} layers cannot fill {} pipeline stages", layers, stages));
  }
  if (boundaries != 0 && boundaries + 1 != layers) {
    throw InputError(fmt::format("{} boundary costs for {} layers: one per cut, {} expected", boundaries, layers,
                                 layers - 1));
  }
}

}  // namespace

std::vector<double> stage_seconds(const LayerChain& chain, const std::vector<int32_t>& ends) {
  std::vector<double> out;
  int32_t begin = 0;
  for (int32_t end : ends) {
    double seconds = 0;
    for (int32_t i = begin; i < end; ++i) seconds += chain.layer_seconds[i];
    seconds += boundary(chain, begin - 1) + (end < static_cast<int32_t>(chain.layer_seconds.size()) ? boundary(chain, end - 1) : 0);
    out.push_back(seconds);
    begin = end;
  }
  return out;
}

Partition min_max_partition(const LayerChain& chain, int stages) {
  const int64_t n = static_cast<int64_t>(chain.layer_seconds.size());
  check(chain.layer_seconds.size(), chain.boundary_seconds.size(), stages);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> prefix(n + 1, 0);
  std::vector<int64_t> required(n + 1, 0);  // required layers before each position
  const bool constrained = !chain.required.empty();
  if (constrained && chain.required.size() != static_cast<size_t>(n)) {
    throw InputError(fmt::format("{} required flags for {} layers", chain.required.size(), n));
  }
  for (int64_t i = 0; i < n; ++i) {
    prefix[i + 1] = prefix[i] + chain.layer_seconds[i];
    required[i + 1] = required[i] + (constrained && chain.required[i] ? 1 : 0);
  }
  if (constrained && required[n] < stages) {
    throw InputError(fmt::format("{} layers may start a stage, too few for {} stages", required[n], stages));
  }
  // Cost of a stage holding layers [j, l): its layers, the transfer in (after j − 1) and out (after l − 1).
  auto cost = [&](int64_t j, int64_t l) {
    if (constrained && required[l] == required[j]) return kInf;
    return prefix[l] - prefix[j] + boundary(chain, j - 1) + (l < n ? boundary(chain, l - 1) : 0);
  };
  // best[k][l]: the smallest slowest stage for layers [0, l) in k + 1 stages; cut[k][l]: where the last begins.
  std::vector<std::vector<double>> best(stages, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int32_t>> cut(stages, std::vector<int32_t>(n + 1, -1));
  for (int64_t l = 1; l <= n; ++l) best[0][l] = cost(0, l);
  for (int k = 1; k < stages; ++k) {
    for (int64_t l = k + 1; l <= n; ++l) {
      // The last stage is [j, l); the first k stages need at least k layers.
      for (int64_t j = k; j < l; ++j) {
        const double v = std::max(best[k - 1][j], cost(j, l));
        if (v < best[k][l]) {  // strict: the earliest j wins ties
          best[k][l] = v;
          cut[k][l] = static_cast<int32_t>(j);
        }
      }
    }
  }
  Partition p;
  p.max_stage_seconds = best[stages - 1][n];
  p.ends.assign(stages, 0);
  int64_t l = n;
  for (int k = stages - 1; k >= 0; --k) {
    p.ends[k] = static_cast<int32_t>(l);
    if (k > 0) l = cut[k][l];
  }
  return p;
}

std::vector<OmnibalCandidate> omnibal_partitions(const std::vector<double>& forward_seconds,
                                                 const std::vector<double>& boundary_bytes, int stages, int radius,
                                                 int keep) {
  check(forward_seconds.size(), boundary_bytes.size(), stages);
  const int32_t n = static_cast<int32_t>(forward_seconds.size());
  const Partition anchor = min_max_partition({forward_seconds, {}}, stages);
  std::vector<double> prefix(n + 1, 0);
  for (int32_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + forward_seconds[i];
  std::vector<OmnibalCandidate> all;
  auto add = [&](const std::vector<int32_t>& ends) {
    OmnibalCandidate c;
    c.ends = ends;
    const double mean = prefix[n] / stages;
    int32_t begin = 0;
    for (int32_t end : ends) {
      const double t = prefix[end] - prefix[begin];
      c.forward_variance += (t - mean) * (t - mean) / stages;
      if (end < n && !boundary_bytes.empty()) c.boundary_bytes += boundary_bytes[end - 1];
      begin = end;
    }
    all.push_back(std::move(c));
  };
  // Whether boundary s of `ends` may be at e: non-empty stages on both sides.
  auto allowed = [&](const std::vector<int32_t>& ends, int s, int32_t e) {
    const int32_t previous = s == 0 ? 0 : ends[s - 1];
    return e > previous && e < ends[s + 1];
  };
  double neighbourhood = 1;
  for (int s = 0; s + 1 < stages; ++s) neighbourhood *= 2.0 * radius + 1;
  if (neighbourhood <= kMaxOmnibalCandidates) {
    // Every combination of the inner boundaries, each within ±radius of the anchor's, strictly increasing.
    std::vector<int32_t> ends(stages, n);
    auto visit = [&](auto&& self, int s) -> void {
      if (s == stages - 1) {
        add(ends);
        return;
      }
      const int32_t previous = s == 0 ? 0 : ends[s - 1];
      for (int32_t e = anchor.ends[s] - radius; e <= anchor.ends[s] + radius; ++e) {
        if (e <= previous || e > n - (stages - 1 - s)) continue;
        ends[s] = e;
        self(self, s + 1);
      }
    };
    visit(visit, 0);
  } else {
    // Too many stages to try every combination: the anchor and each boundary moved alone.
    add(anchor.ends);
    for (int s = 0; s + 1 < stages; ++s) {
      for (int32_t d = -radius; d <= radius; ++d) {
        if (d == 0) continue;
        std::vector<int32_t> ends = anchor.ends;
        if (!allowed(ends, s, ends[s] + d)) continue;
        ends[s] += d;
        add(ends);
      }
    }
  }
  // Ranks in both orders, then their sum.
  std::vector<size_t> by_var(all.size()), by_bytes(all.size());
  std::iota(by_var.begin(), by_var.end(), 0);
  std::iota(by_bytes.begin(), by_bytes.end(), 0);
  std::stable_sort(by_var.begin(), by_var.end(),
                   [&](size_t a, size_t b) { return all[a].forward_variance < all[b].forward_variance; });
  std::stable_sort(by_bytes.begin(), by_bytes.end(),
                   [&](size_t a, size_t b) { return all[a].boundary_bytes < all[b].boundary_bytes; });
  std::vector<size_t> rank_sum(all.size(), 0);
  for (size_t r = 0; r < all.size(); ++r) {
    rank_sum[by_var[r]] += r;
    rank_sum[by_bytes[r]] += r;
  }
  std::vector<size_t> order(all.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (rank_sum[a] != rank_sum[b]) return rank_sum[a] < rank_sum[b];
    if (all[a].forward_variance != all[b].forward_variance) return all[a].forward_variance < all[b].forward_variance;
    if (all[a].boundary_bytes != all[b].boundary_bytes) return all[a].boundary_bytes < all[b].boundary_bytes;
    return all[a].ends < all[b].ends;
  });
  std::vector<OmnibalCandidate> out;
  for (size_t i = 0; i < order.size() && static_cast<int>(i) < keep; ++i) out.push_back(all[order[i]]);
  return out;
}

}  // namespace fulcrum

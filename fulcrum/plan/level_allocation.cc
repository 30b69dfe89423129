#include "fulcrum/plan/level_allocation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "fulcrum/core/error.h"

namespace fulcrum {

Relaxation relax_level(const std::vector<LevelOp>& ops, int devices) {
  if (devices < 1) throw InputError(fmt::format("a level needs at least one device, not {}", devices));
  if (ops.empty()) throw InputError("a level needs at least one MetaOp");
  double low = 0, high = 0;
  for (const LevelOp& op : ops) {
    if (!op.curve || op.curve->points().empty() || op.layers < 1) {
      throw InputError("every MetaOp of a level needs a scalability curve and at least one operator");
    }
    const double layers = static_cast<double>(op.layers);
    low = std::max(low, op.curve->largest_within(devices)->seconds * layers);  // each on all it can use
    high += op.curve->points().front().seconds * layers;                        // all on one device in turn
  }
  auto demand = [&](double makespan) {
    double n = 0;
    for (const LevelOp& op : ops) n += op.curve->devices_for(makespan / static_cast<double>(op.layers));
    return n;
  };
  Relaxation out;
  // Σ n_m(C) falls as C grows: bisect for the least C whose demand fits N, to a relative 1e-12.
  while (high - low > 1e-12 * high && out.iterations < 200) {
    const double mid = 0.5 * (low + high);
    if (demand(mid) <= static_cast<double>(devices)) {
      high = mid;
    } else {
      low = mid;
    }
    ++out.iterations;
  }
  out.makespan_seconds = high;
  for (const LevelOp& op : ops) out.devices.push_back(op.curve->devices_for(high / static_cast<double>(op.layers)));
  return out;
}

std::vector<LevelPart> bipoint(const std::vector<LevelOp>& ops, const Relaxation& relaxation) {
  std::vector<LevelPart> out;
  const double c = relaxation.makespan_seconds;
  for (size_t m = 0; m < ops.size(); ++m) {
    const ScalabilityCurve& curve = *ops[m].curve;
    const double n = relaxation.devices.at(m);
    const int64_t layers = ops[m].layers;
    // Below the first envelope point the low one is the dummy 0, which takes no time.
    // Neighbours on the speed envelope (the relaxation's points; a count under it is never chosen).
    const CurvePoint* hi = nullptr;
    const CurvePoint* lo = nullptr;
    for (int i : curve.envelope()) {
      const CurvePoint& p = curve.points()[i];
      if (static_cast<double>(p.devices) <= n) lo = &p;
      if (static_cast<double>(p.devices) >= n && !hi) hi = &p;
    }
    if (!hi) hi = &curve.points()[curve.envelope().back()];
    if (lo == hi || (lo && lo->devices == hi->devices)) {
      out.push_back({static_cast<int>(m), hi->devices, layers});
      continue;
    }
    const double t_hi = hi->seconds;
    const double t_lo = lo ? lo->seconds : 0.0;
    // C* = t_hi·l_hi + t_lo·l_lo with l_hi + l_lo = L (eq. 10): l_hi = (C* − t_lo·L) / (t_hi − t_lo). With the dummy
    // (t_lo = 0) all operators go on n_hi.
    double l_hi = lo ? (c - t_lo * static_cast<double>(layers)) / (t_hi - t_lo) : static_cast<double>(layers);
    l_hi = std::clamp(l_hi, 0.0, static_cast<double>(layers));
    const int64_t whole_hi = std::llround(l_hi);
    if (whole_hi > 0) out.push_back({static_cast<int>(m), hi->devices, whole_hi});
    if (lo && layers - whole_hi > 0) out.push_back({static_cast<int>(m), lo->devices, layers - whole_hi});
  }
  return out;
}

}  // namespace fulcrum

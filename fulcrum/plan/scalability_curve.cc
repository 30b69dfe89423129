#include "fulcrum/plan/scalability_curve.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/collective_cost.h"
#include "fulcrum/cost/dtype.h"

namespace fulcrum {

ScalabilityCurve::ScalabilityCurve(std::vector<CurvePoint> points) : points_(std::move(points)) {
  if (points_.empty() || points_.front().devices != 1) {
    throw InputError("a scalability curve starts at one device");
  }
  for (size_t i = 0; i < points_.size(); ++i) {
    if (!(points_[i].seconds > 0) || !std::isfinite(points_[i].seconds)) {
      throw InputError(fmt::format("a scalability curve's time on {} devices must be positive", points_[i].devices));
    }
    if (i > 0 && (points_[i].devices <= points_[i - 1].devices || points_[i].seconds >= points_[i - 1].seconds)) {
      throw InputError(fmt::format("a scalability curve must fall as devices grow: {} devices take {} s, {} take {} s",
                                   points_[i - 1].devices, points_[i - 1].seconds, points_[i].devices,
                                   points_[i].seconds));
    }
  }  // The upper concave hull of (n, 1/T) with the origin (Andrew's monotone chain, upper half).
  auto speed = [&](int i) { return 1.0 / points_[i].seconds; };
  auto cross = [&](double ax, double ay, int b, int c) {
    return (points_[b].devices - ax) * (speed(c) - ay) - (speed(b) - ay) * (points_[c].devices - ax);
  };
  for (int i = 0; i < static_cast<int>(points_.size()); ++i) {
    while (!envelope_.empty()) {
      const int b = envelope_.back();
      const double ax = envelope_.size() > 1 ? points_[envelope_[envelope_.size() - 2]].devices : 0.0;
      const double ay = envelope_.size() > 1 ? speed(envelope_[envelope_.size() - 2]) : 0.0;
      // b strictly under the segment from its predecessor to i (a relative margin keeps collinear points, which
      // linear scaling makes of every point).
      const double scale = std::abs((points_[b].devices - ax) * (speed(i) - ay)) +
                           std::abs((speed(b) - ay) * (points_[i].devices - ax));
      if (cross(ax, ay, b, i) > 1e-9 * scale) {
        envelope_.pop_back();
      } else {
        break;
      }
    }
    envelope_.push_back(i);
  }
}

ScalabilityCurve ScalabilityCurve::from_fastest_per_count(const std::vector<CurvePoint>& fastest) {
  std::vector<CurvePoint> points;
  for (const CurvePoint& p : fastest) {
    if (!points.empty() && p.seconds >= points.back().seconds) continue;  // no faster than fewer devices
    points.push_back(p);
  }
  ScalabilityCurve curve(std::move(points));
  curve.measured_ = fastest;
  return curve;
}

const CurvePoint* ScalabilityCurve::measured_at(int devices) const {
  if (measured_.empty()) return at(devices);
  for (const CurvePoint& p : measured_) {
    if (p.devices == devices) return &p;
  }
  return nullptr;
}

const CurvePoint* ScalabilityCurve::at(int devices) const {
  for (const CurvePoint& p : points_) {
    if (p.devices == devices) return &p;
  }
  return nullptr;
}

const CurvePoint* ScalabilityCurve::largest_within(int limit) const {
  const CurvePoint* best = nullptr;
  for (const CurvePoint& p : points_) {
    if (p.devices <= limit) best = &p;
  }
  return best;
}

const CurvePoint* ScalabilityCurve::next_after(int devices) const {
  for (const CurvePoint& p : points_) {
    if (p.devices > devices) return &p;
  }
  return nullptr;
}

double ScalabilityCurve::devices_for(double seconds) const {
  if (!(seconds > 0)) return std::numeric_limits<double>::infinity();
  const double wanted = 1.0 / seconds;  // operators per second
  const CurvePoint& first = points_[envelope_.front()];
  if (wanted <= 1.0 / first.seconds) return first.devices * first.seconds * wanted;
  for (size_t k = 1; k < envelope_.size(); ++k) {
    const CurvePoint& lo = points_[envelope_[k - 1]];
    const CurvePoint& hi = points_[envelope_[k]];
    const double v_lo = 1.0 / lo.seconds, v_hi = 1.0 / hi.seconds;
    if (wanted <= v_hi) return lo.devices + (wanted - v_lo) / (v_hi - v_lo) * (hi.devices - lo.devices);
  }
  return std::numeric_limits<double>::infinity();
}

LayerWork metaop_work(const MetaOp& op, int dp, int tp, bool trainable, Dtype dtype) {
  const int64_t sequences = op.sequences / dp;
  LayerWork w;
  w.layer = &op.layer;
  w.batch = {sequences, sequences * op.tokens, sequences * op.tokens * op.tokens};
  w.sharding.tp = tp;
  w.sharding.sequence_parallel = tp > 1;
  w.trainable = trainable;
  w.dtype = dtype;
  w.pass = Pass::kForward;
  return w;
}

ScalabilityCurve metaop_curve(const MetaOp& op, const ComponentSpec& component, const CostModel& cost,
                              const ClusterSpec& cluster, int max_devices, const CurveOptions& options) {
  const Dtype dtype = options.dtype;
  const double gradient_bytes = component.trainable ? activation_element_bytes(dtype) *
                                                          static_cast<double>(op.layer.parameters())
                                                    : 0.0;
  const int per_node = std::max(1, cluster.device.devices_per_node);
  const int64_t heads = op.layer.kind == LayerKind::kTransformerBlock ? op.layer.heads : 0;
  const int64_t kv_heads = op.layer.kind == LayerKind::kTransformerBlock ? op.layer.kv_heads : 0;
  // The operator's share of its gradients' all-reduce over dp copies, 1/tp of them on each device.
  auto sync_on = [&](int dp, int tp) {
    if (gradient_bytes <= 0 || dp <= 1) return 0.0;
    // The dp copies of each tensor-parallel shard sit tp devices apart.
    return collective_seconds(CollectiveOp::kAllReduce, gradient_bytes / tp, cluster, options.efficiency,
                              DeviceGroupShape{dp, tp}) /
           std::max(1, options.sharers);
  };
  auto compute_on = [&](int dp, int tp) {
    LayerWork w = metaop_work(op, dp, tp, component.trainable, dtype);
    double s = cost.layer_cost(w).seconds;
    if (component.trainable) {
      s += backward_cost(cost, w).seconds;
    } else if (op.input_gradient) {  // frozen: only the gradient of its input, for the trainable MetaOps upstream
      w.pass = Pass::kBackwardInput;
      s += cost.layer_cost(w).seconds;
    }
    return s * static_cast<double>(op.micro_batches);
  };
  // Tensor parallelism splits whole heads (and key/value heads, or replicates them); other layers run whole.
  auto splits_heads = [&](int tp) {
    return tp == 1 || (heads > 0 && heads % tp == 0 && (kv_heads % tp == 0 || tp % kv_heads == 0));
  };
  int floor_tp = 1;  // the largest valid degree dividing options.min_tp
  for (int tp = 2; tp <= std::min(options.min_tp, per_node); ++tp) {
    if (options.min_tp % tp == 0 && splits_heads(tp)) floor_tp = tp;
  }
  // Only (dp, tp) pairs with dp dividing the sequences and tp dividing the heads are valid: enumerate those.
  std::map<int, CurvePoint> fastest;
  for (int dp = 1; dp <= max_devices && dp <= op.sequences; ++dp) {
    if (op.sequences % dp != 0) continue;
    for (int tp = dp > 1 ? floor_tp : 1; tp <= per_node && dp * tp <= max_devices; ++tp) {
      if (!splits_heads(tp)) continue;
      // Wider than a node, a slice starts on a node's first device: only a degree dividing the node keeps every
      // tensor-parallel group inside one, where its collectives are priced (across nodes they would run at a
      // GPU's share of the network, tens of times slower).
      if (dp * tp > per_node && per_node % tp != 0) continue;
      const double sync = sync_on(dp, tp);
      const CurvePoint p{dp * tp, compute_on(dp, tp) + sync, dp, tp, sync};
      auto [it, added] = fastest.emplace(p.devices, p);
      if (!added && p.seconds < it->second.seconds) it->second = p;
    }
  }
  std::vector<CurvePoint> points;
  for (const auto& [n, p] : fastest) points.push_back(p);
  return ScalabilityCurve::from_fastest_per_count(points);
}

}  // namespace fulcrum

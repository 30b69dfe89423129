#ifndef FULCRUM_PLAN_SCALABILITY_CURVE_H_
#define FULCRUM_PLAN_SCALABILITY_CURVE_H_

#include <cstdint>
#include <vector>

#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/cost_model.h"
#include "fulcrum/model/cluster_spec.h"
#include "fulcrum/plan/metaop_graph.h"

namespace fulcrum {

// A MetaOp's scalability curve T_m(n) (reference/spindle.md §5): the seconds one of its operators takes,
// forward and backward over the iteration's micro-batches, on each valid device count n. Only valid counts
// are points: n = data parallelism × tensor parallelism, the data parallelism dividing the micro-batch's
// sequences and the tensor parallelism the layer's heads, inside one node. A count no faster than a smaller
// one is not a point either: every curve falls strictly, which the allocation relies on.
struct CurvePoint {
  int devices = 1;
  double seconds = 0;
  int dp = 1;  // how the count is used
  int tp = 1;
  double gradient_sync_seconds = 0;  // of `seconds`: the operator's share of its gradients' all-reduce
};

class ScalabilityCurve {
 public:
  ScalabilityCurve() = default;
  // Points in increasing device count with strictly falling seconds, the first on 1 device.
  // InputError otherwise.
  explicit ScalabilityCurve(std::vector<CurvePoint> points);
  // From the fastest measurement of each valid count, increasing, the first on 1 device: the counts no faster
  // than a smaller one are left out of the points and kept aside (measured_at(), widest()).
  static ScalabilityCurve from_fastest_per_count(const std::vector<CurvePoint>& fastest);

  const std::vector<CurvePoint>& points() const { return points_; }
  // The valid count with the most devices, even where it is slower than fewer: how a system that runs every
  // component on the whole cluster (Megatron-LM, DeepSpeed) uses it. The last point unless made by
  // from_fastest_per_count.
  const CurvePoint& widest() const { return measured_.empty() ? points_.back() : measured_.back(); }
  // Every valid count's point, those no faster than fewer devices included (a system that allocates whole
  // tasks can still land on one), or nullptr when `devices` is not valid.
  const CurvePoint* measured_at(int devices) const;
  // The point of exactly `devices`, or nullptr when it is not valid.
  const CurvePoint* at(int devices) const;
  // The most devices a point has up to `limit` (the fastest), or nullptr when none fits.
  const CurvePoint* largest_within(int limit) const;
  // The next valid count after `devices`, or nullptr.
  const CurvePoint* next_after(int devices) const;

  // The points on the upper concave envelope of speed 1 / T(n) over n, from the origin: in the continuous
  // relaxation a count between two of them runs as time-sharing between them, so points under the envelope are
  // never worth their devices there. Indices into points(), increasing.
  const std::vector<int>& envelope() const { return envelope_; }

  // The devices that take `seconds` per operator in the relaxation (eq. 11 with the speed interpolated, which
  // is exact for linear scaling and makes C* a true lower bound): between neighbouring envelope points, speed
  // linear in the devices; below the first, the busy share of its devices, n₁ · T(n₁) / seconds; +infinity when
  // even the fastest count is slower than `seconds`.
  double devices_for(double seconds) const;

 private:
  std::vector<CurvePoint> points_;
  std::vector<int> envelope_;
  std::vector<CurvePoint> measured_;  // from from_fastest_per_count
};

struct CurveOptions {
  Dtype dtype = Dtype::kBf16;
  DeviceEfficiency efficiency;  // of the links, for the gradient all-reduce
  // MetaOps whose operators use the same parameters (a shared component's layer in several tasks): the
  // all-reduce of those parameters is done once for all of them, so each carries this share of it.
  int sharers = 1;
  // The least tensor parallelism a transformer block's copies are split by: data parallelism runs only over
  // shards of at least this many devices (or of the largest valid degree dividing it, when it does not divide
  // the heads or exceeds a node); fewer devices than that run it by tensor parallelism alone. 1: any split.
  // Raised until a plan's parameters and gradients fit in memory, as one raises Megatron-LM's
  // --tensor-model-parallel-size for a model too large for its devices.
  int min_tp = 1;
};

// One of `op`'s operators, forward, on one device of a split of its sequences over `dp` copies, each split `tp`
// ways by tensor parallelism (sequence parallel with it). The layer is `op`'s, so the work lives no longer than it.
LayerWork metaop_work(const MetaOp& op, int dp, int tp, bool trainable, Dtype dtype);

// T_m(n) from the cost model for n up to `max_devices`: every (dp, tp) split, the fastest kept for each n.
// A trained component's operators run forward and backward; a frozen one's forward, and the gradient of its input
// where a trained MetaOp is upstream of it (MetaOp::input_gradient). A trained operator on
// dp > 1 copies also carries its share of its gradients' all-reduce over them (1/tp of the layer's parameters
// on each device, inside one node when the n devices fit in one, else over the network): the α-β model's
// term that does not shrink as devices are added (reference/spindle.md §5). It is what makes a light
// component with many parameters scale poorly, and it is paid in the gradient synchronisation after the
// backward waves, which the planner has to weigh against compute.
ScalabilityCurve metaop_curve(const MetaOp& op, const ComponentSpec& component, const CostModel& cost,
                              const ClusterSpec& cluster, int max_devices, const CurveOptions& options);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_SCALABILITY_CURVE_H_

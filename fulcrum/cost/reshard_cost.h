#ifndef FULCRUM_COST_RESHARD_COST_H_
#define FULCRUM_COST_RESHARD_COST_H_

#include <span>
#include <vector>

#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/model/cluster_spec.h"

namespace fulcrum {

// How a slice holds a batch's rows: `devices` (sorted, dp × tp of them) in dp groups of tp consecutive devices,
// group i holding rows [i·S/dp, (i + 1)·S/dp) and its device a of tp the tokens [a·T/tp, (a + 1)·T/tp) of each
// (sequence parallelism: this model's layout; WaveRuntime runs tp 1 slices only).
struct RowLayout {
  std::span<const int> devices;
  int dp = 1;
  int tp = 1;
};

// Moving a batch's activation (`bytes` over all its rows) from one layout to another, as the wave runtime does:
// each device sends each device of the other layout the part (rows and tokens) both hold, and what a device
// already holds stays.
// A device sends (and receives) its parts at once over its NVLink and its network link, each part on the link
// between the two devices (one node or not): it takes one latency + the slower link's bytes over its rate
// (WaveRuntime's sends are asynchronous and overlap; it receives a message per part and micro-batch in turn, which
// on a link of long latency pays more). InputError when a layout's device count is not dp × tp.
struct ReshardSeconds {
  std::vector<double> send;  // each device of `from`, in its order: 0 when it sends nothing
  double receive = 0;        // the busiest receiving device's
  // The whole exchange: its busiest device's.
  double seconds() const;
};
ReshardSeconds reshard_seconds(const RowLayout& from, const RowLayout& to, double bytes, const ClusterSpec& cluster,
                               const DeviceEfficiency& efficiency);

}  // namespace fulcrum

#endif  // FULCRUM_COST_RESHARD_COST_H_

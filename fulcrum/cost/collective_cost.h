#ifndef FULCRUM_COST_COLLECTIVE_COST_H_
#define FULCRUM_COST_COLLECTIVE_COST_H_

#include <cstdint>
#include <vector>

#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/model/cluster_spec.h"

namespace fulcrum {

// Alpha-beta models of NCCL's collectives over n devices of a group, each holding `bytes` (the whole tensor;
// a reduce-scatter leaves bytes / n on each, an all-gather starts from bytes / n), on links of
// `bytes_per_second` each way with a per-step latency `alpha_seconds`:
//   ring all-reduce       2(n − 1)/n · S/B + 2(n − 1)·α
//   ring reduce-scatter    (n − 1)/n · S/B +  (n − 1)·α   (all-gather the same)
//   tree all-reduce       2·S/B + 2·⌈log2 n⌉·α            (NCCL's double binary tree: pipelined reduce and
//                                                         broadcast; wins for small messages on many devices)
double ring_all_reduce_seconds(double bytes, int64_t n, double bytes_per_second, double alpha_seconds);
double ring_reduce_scatter_seconds(double bytes, int64_t n, double bytes_per_second, double alpha_seconds);
double tree_all_reduce_seconds(double bytes, int64_t n, double bytes_per_second, double alpha_seconds);

// Where a group's members sit on a cluster whose devices are numbered node by node: `n` members `stride`
// devices apart (Megatron's rank order puts tensor parallelism innermost, then data, then pipeline).
struct DeviceGroupShape {
  int64_t members = 1;
  int64_t stride = 1;
  // Members in each node the group spans (the fewest where they differ); 0 takes it from members and stride,
  // the first member on a node's first device.
  int64_t members_per_node = 0;
};

// The shape of the all-reduce among the copies of each of `tp` shards held by `sorted_ids` (each shard's copies
// tp devices apart), on a cluster of `per_node` devices a node.
DeviceGroupShape device_group_shape(const std::vector<int>& sorted_ids, int tp, int per_node);

// One device's rate one way to another in its node (NVLink, half its quoted two-way rate) or beyond (its network
// link), times the link efficiency.
double link_bytes_per_second(const ClusterSpec& cluster, const DeviceEfficiency& efficiency, bool within_node);

// The bandwidth a collective of the group gets per device and direction, times the link efficiency: NVLink
// (half its quoted two-way rate) when the whole group sits in one node; across nodes, the network links of its
// members in a node together (one NIC per device: NCCL runs a channel through each), at most NVLink's rate.
double group_bytes_per_second(const ClusterSpec& cluster, const DeviceEfficiency& efficiency,
                              const DeviceGroupShape& group);

// NCCL's choice for an all-reduce: the faster of ring and tree. Reduce-scatter and all-gather use the ring.
enum class CollectiveOp { kAllReduce, kReduceScatter, kAllGather };
double collective_seconds(CollectiveOp op, double bytes, const ClusterSpec& cluster,
                          const DeviceEfficiency& efficiency, const DeviceGroupShape& group);

// A point-to-point transfer of `bytes` between two devices `distance` apart.
double p2p_seconds(double bytes, const ClusterSpec& cluster, const DeviceEfficiency& efficiency, int64_t distance);

}  // namespace fulcrum

#endif  // FULCRUM_COST_COLLECTIVE_COST_H_

#include "fulcrum/cost/collective_cost.h"

#include <algorithm>
#include <cmath>

namespace fulcrum {

double ring_all_reduce_seconds(double bytes, int64_t n, double bytes_per_second, double alpha_seconds) {
  if (n <= 1) return 0;
  const double steps = static_cast<double>(n - 1);
  return 2 * steps / static_cast<double>(n) * bytes / bytes_per_second + 2 * steps * alpha_seconds;
}

double ring_reduce_scatter_seconds(double bytes, int64_t n, double bytes_per_second, double alpha_seconds) {
  if (n <= 1) return 0;
  const double steps = static_cast<double>(n - 1);
  return steps / static_cast<double>(n) * bytes / bytes_per_second + steps * alpha_seconds;
}

double tree_all_reduce_seconds(double bytes, int64_t n, double bytes_per_second, double alpha_seconds) {
  if (n <= 1) return 0;
  const double depth = std::ceil(std::log2(static_cast<double>(n)));
  return 2 * bytes / bytes_per_second + 2 * depth * alpha_seconds;
}

namespace {

// Does a set of devices `stride` apart, `members` of them, fit in one node?
bool within_node(const ClusterSpec& cluster, int64_t members, int64_t stride) {
  const int64_t per_node = std::max(1, cluster.device.devices_per_node);
  return (members - 1) * stride < per_node && per_node % stride == 0;
}

}  // namespace

double link_bytes_per_second(const ClusterSpec& cluster, const DeviceEfficiency& efficiency, bool intra) {
  // NVLink's quoted rate counts both directions; rings and point-to-point transfers send one way.
  const double link = intra ? cluster.device.intra_node_bytes_per_second / 2 : cluster.device.inter_node_bytes_per_second;
  return link * efficiency.link;
}

DeviceGroupShape device_group_shape(const std::vector<int>& sorted_ids, int tp, int per_node) {
  per_node = std::max(1, per_node);
  tp = std::max(1, tp);
  DeviceGroupShape shape{static_cast<int64_t>(sorted_ids.size()) / tp, tp, 0};
  if (sorted_ids.empty() || sorted_ids.front() / per_node == sorted_ids.back() / per_node) {
    shape.stride = 1;  // one node: NVLink whatever the order
    return shape;
  }
  int64_t fewest = static_cast<int64_t>(sorted_ids.size());
  for (size_t i = 0; i < sorted_ids.size();) {
    const int node = sorted_ids[i] / per_node;
    size_t j = i;
    while (j < sorted_ids.size() && sorted_ids[j] / per_node == node) ++j;
    fewest = std::min(fewest, static_cast<int64_t>(j - i));
    i = j;
  }
  shape.stride = per_node;  // spans nodes
  shape.members_per_node = std::max<int64_t>(1, fewest / tp);
  return shape;
}

double group_bytes_per_second(const ClusterSpec& cluster, const DeviceEfficiency& efficiency,
                              const DeviceGroupShape& group) {
  if (within_node(cluster, group.members, group.stride)) return link_bytes_per_second(cluster, efficiency, true);
  const int64_t per_node = std::max(1, cluster.device.devices_per_node);
  int64_t links = group.members_per_node;
  if (links <= 0) {
    // Members `stride` apart from a node's first device: whole nodes of per_node / stride, then the rest in the
    // last node, which sets the rate. A stride that does not divide the node: one a node, at the least.
    links = 1;
    if (group.stride < per_node && per_node % group.stride == 0) {
      const int64_t in_a_node = per_node / group.stride;
      links = group.members % in_a_node == 0 ? in_a_node : group.members % in_a_node;
    }
  }
  return std::min(static_cast<double>(links) * link_bytes_per_second(cluster, efficiency, false),
                  link_bytes_per_second(cluster, efficiency, true));
}

double collective_seconds(CollectiveOp op, double bytes, const ClusterSpec& cluster,
                          const DeviceEfficiency& efficiency, const DeviceGroupShape& group) {
  const double rate = group_bytes_per_second(cluster, efficiency, group);
  const double alpha = efficiency.collective_latency_seconds;
  switch (op) {
    case CollectiveOp::kAllReduce:
      return std::min(ring_all_reduce_seconds(bytes, group.members, rate, alpha),
                      tree_all_reduce_seconds(bytes, group.members, rate, alpha));
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllGather:
      return ring_reduce_scatter_seconds(bytes, group.members, rate, alpha);
  }
  return 0;
}

double p2p_seconds(double bytes, const ClusterSpec& cluster, const DeviceEfficiency& efficiency, int64_t distance) {
  if (bytes <= 0) return 0;
  const int64_t per_node = std::max(1, cluster.device.devices_per_node);
  const bool intra = distance < per_node;  // most pairs that close share a node
  return efficiency.collective_latency_seconds + bytes / link_bytes_per_second(cluster, efficiency, intra);
}

}  // namespace fulcrum

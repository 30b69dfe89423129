#include "fulcrum/cost/collective_cost.h"

#include <gtest/gtest.h>

#include "fulcrum/cost/test_links.h"

namespace fulcrum {
namespace {

// NCCL runs a channel through the NIC of each of a group's members in a node, so a group with k members in each
// node crosses the network at k NICs' rate (nccl-tests: ~24 GB/s bus bandwidth a 200 Gb/s NIC, up to NVLink's).
TEST(CollectiveCost, AGroupAcrossNodesUsesTheNicsOfItsMembersInANode) {
  const ClusterSpec cluster = cluster_preset("a100:64");
  const DeviceEfficiency e = plain_links();
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, e, {8, 1}), kNvlinkOneWay);  // one node
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, e, {8, 8}), kNic);           // one member a node
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, e, {16, 2}), 4 * kNic);      // four a node
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, e, {64, 1}), 8 * kNic);      // whole nodes: 200 < 300 GB/s
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, e, {12, 1}), 4 * kNic);      // 8 + 4: the last node's 4
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, e, {3, 4}), kNic);           // 2 + 1
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, e, {4, 3}), kNic);           // 3 apart: not node-aligned
  // Never faster than NVLink, which carries the ring within each node.
  ClusterSpec fast_network = cluster;
  fast_network.device.inter_node_bytes_per_second = 100e9;
  EXPECT_DOUBLE_EQ(group_bytes_per_second(fast_network, e, {64, 1}), kNvlinkOneWay);
  // An all-reduce of 1 GB over 32 devices in 4 nodes: 2 · 31/32 · 1 GB at 200 GB/s.
  EXPECT_NEAR(collective_seconds(CollectiveOp::kAllReduce, 1e9, cluster, e, {32, 1}), 2 * 31.0 / 32 * 1e9 / 200e9,
              1e-12);
}

// Spindle's testbed (the a800 preset): 400 Gb/s of InfiniBand a node, shared by its 8 GPUs: a group of whole nodes
// gets the node's 50 GB/s, a group of one GPU a node an eighth of it.
TEST(CollectiveCost, TheA800PresetSharesANodesLinkAmongItsGpus) {
  const ClusterSpec cluster = cluster_preset("a800:32");
  const DeviceEfficiency e = plain_links();
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, e, {32, 1}), 400e9 / 8);
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, e, {4, 8}), 400e9 / 8 / 8);
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, e, {8, 1}), 400e9 / 2);  // NVLink 400 GB/s both ways
}

// The shape of a sync group given by its devices: the node with the fewest members sets the rate.
TEST(CollectiveCost, AGroupOfListedDevicesIsAsFastAsItsSparsestNode) {
  const ClusterSpec cluster = cluster_preset("a100:64");
  const DeviceEfficiency e = plain_links();
  const DeviceGroupShape in_node = device_group_shape({2, 3, 4, 5}, 1, 8);
  EXPECT_EQ(in_node.members, 4);
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, e, in_node), kNvlinkOneWay);
  // Six devices of node 0 and two of node 1.
  const DeviceGroupShape uneven = device_group_shape({2, 3, 4, 5, 6, 7, 8, 9}, 1, 8);
  EXPECT_EQ(uneven.members, 8);
  EXPECT_EQ(uneven.members_per_node, 2);
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, e, uneven), 2 * kNic);
  // Two tensor-parallel shards: each shard's copies are half of the devices in a node.
  const DeviceGroupShape sharded = device_group_shape({0, 1, 2, 3, 8, 9, 10, 11}, 2, 8);
  EXPECT_EQ(sharded.members, 4);
  EXPECT_EQ(sharded.members_per_node, 2);
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, e, sharded), 2 * kNic);
}

}  // namespace
}  // namespace fulcrum

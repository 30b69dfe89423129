#include "fulcrum/cost/reshard_cost.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/core/rng.h"
#include "fulcrum/cost/collective_cost.h"
#include "fulcrum/cost/test_links.h"

namespace fulcrum {
namespace {

TEST(ReshardCost, AnUnchangedLayoutMovesNothing) {
  const std::vector<int> ids = {0, 1, 2, 3};
  const ReshardSeconds r = reshard_seconds({ids, 4, 1}, {ids, 4, 1}, 4e9, cluster_preset("a100:16"), plain_links());
  EXPECT_EQ(r.send, std::vector<double>(4, 0.0));
  EXPECT_EQ(r.receive, 0);
  EXPECT_EQ(r.seconds(), 0);
}

// Four quarters on devices 0–3 gathered into halves on devices 0 and 1: device 0 keeps quarter 0 and takes quarter 1
// from device 1; device 1 takes quarters 2 and 3 from devices 2 and 3. Device 1 receives the most, two quarters.
TEST(ReshardCost, RowsADeviceHoldsStayAndTheBusiestReceiverSetsTheTime) {
  const std::vector<int> quarters = {0, 1, 2, 3}, halves = {0, 1};
  const double quarter = 1e9;
  const ReshardSeconds r =
      reshard_seconds({quarters, 4, 1}, {halves, 2, 1}, 4 * quarter, cluster_preset("a100:16"), plain_links());
  ASSERT_EQ(r.send.size(), 4u);
  EXPECT_EQ(r.send[0], 0);
  EXPECT_DOUBLE_EQ(r.send[1], quarter / kNvlinkOneWay);
  EXPECT_DOUBLE_EQ(r.send[2], quarter / kNvlinkOneWay);
  EXPECT_DOUBLE_EQ(r.send[3], quarter / kNvlinkOneWay);
  EXPECT_DOUBLE_EQ(r.receive, 2 * quarter / kNvlinkOneWay);
  EXPECT_DOUBLE_EQ(r.seconds(), 2 * quarter / kNvlinkOneWay);
}

// A node's eighths to the same eighths on the next node: each device sends its own over its NIC.
TEST(ReshardCost, PartsForAnotherNodeCrossTheNetwork) {
  const std::vector<int> first = {0, 1, 2, 3, 4, 5, 6, 7}, second = {8, 9, 10, 11, 12, 13, 14, 15};
  const ReshardSeconds r =
      reshard_seconds({first, 8, 1}, {second, 8, 1}, 8e9, cluster_preset("a100:16"), plain_links());
  for (double s : r.send) EXPECT_DOUBLE_EQ(s, 1e9 / kNic);
  EXPECT_DOUBLE_EQ(r.receive, 1e9 / kNic);
  // Each part on the link between its two devices: devices 6–9 (two nodes) to 8–11, one part each.
  const std::vector<int> straddling = {6, 7, 8, 9}, next = {8, 9, 10, 11};
  const ReshardSeconds s =
      reshard_seconds({straddling, 4, 1}, {next, 4, 1}, 4e9, cluster_preset("a100:16"), plain_links());
  EXPECT_DOUBLE_EQ(s.send[0], 1e9 / kNic);           // 6 → 8
  EXPECT_DOUBLE_EQ(s.send[1], 1e9 / kNic);           // 7 → 9
  EXPECT_DOUBLE_EQ(s.send[2], 1e9 / kNvlinkOneWay);  // 8 → 10
  EXPECT_DOUBLE_EQ(s.send[3], 1e9 / kNvlinkOneWay);  // 9 → 11
  EXPECT_DOUBLE_EQ(s.receive, 1e9 / kNic);
}

// A device sends over its NVLink and its NIC side by side: device 7's rows split between device 6 (its node) and
// device 8 (the next), half each; it takes the slower link's time, not the two added.
TEST(ReshardCost, NvlinkAndTheNetworkCarryADevicesPartsSideBySide) {
  const std::vector<int> one = {7}, two = {6, 8};
  const ReshardSeconds r = reshard_seconds({one, 1, 1}, {two, 2, 1}, 2e9, cluster_preset("a100:16"), plain_links());
  ASSERT_EQ(r.send.size(), 1u);
  EXPECT_DOUBLE_EQ(r.send[0], 1e9 / kNic);
  EXPECT_DOUBLE_EQ(r.receive, 1e9 / kNic);
}

// Data-parallel counts that do not divide each other: thirds on devices 0–2 into halves on devices 4 and 5. Device 4
// takes the first third (device 0) and the first half of the second (device 1); device 5 the rest of the second
// (device 1) and the last third (device 2): a half of the batch each, device 1 sending a third.
TEST(ReshardCost, RowsSplitWhereGroupsOfTheTwoLayoutsMeet) {
  const std::vector<int> thirds = {0, 1, 2}, halves = {4, 5};
  const double bytes = 6e9;
  const ReshardSeconds r =
      reshard_seconds({thirds, 3, 1}, {halves, 2, 1}, bytes, cluster_preset("a100:16"), plain_links());
  ASSERT_EQ(r.send.size(), 3u);
  for (double sent : r.send) EXPECT_DOUBLE_EQ(sent, bytes / 3 / kNvlinkOneWay);
  EXPECT_DOUBLE_EQ(r.receive, bytes / 2 / kNvlinkOneWay);
}

TEST(ReshardCost, ALayoutMustHoldItsDevices) {
  const std::vector<int> three = {0, 1, 2}, four = {0, 1, 2, 3};
  EXPECT_THROW(reshard_seconds({three, 2, 1}, {four, 4, 1}, 1e9, cluster_preset("a100:16"), plain_links()), InputError);
}

// Sequence-parallel shares: a TP-2 group on devices 0 and 1 holds every row, device 0 the first half of each row's
// tokens. Into DP 2 × TP 2 on devices 0–3, device 0 needs the first half of the tokens of rows' first half: it holds
// them. Each sender sends a quarter of the batch (the rows' second half, its half of the tokens) to one device,
// device 0 to device 2 and device 1 to device 3, and nothing to its partner.
TEST(ReshardCost, SequenceParallelSharesAlignedAcrossLayoutsStay) {
  const std::vector<int> pair = {0, 1}, four = {0, 1, 2, 3};
  const double bytes = 8e9;
  const ReshardSeconds r = reshard_seconds({pair, 1, 2}, {four, 2, 2}, bytes, cluster_preset("a100:16"), plain_links());
  ASSERT_EQ(r.send.size(), 2u);
  EXPECT_DOUBLE_EQ(r.send[0], bytes / 4 / kNvlinkOneWay);  // rows' second half, first half of the tokens → device 2
  EXPECT_DOUBLE_EQ(r.send[1], bytes / 4 / kNvlinkOneWay);  // … second half of the tokens → device 3
  EXPECT_DOUBLE_EQ(r.receive, bytes / 4 / kNvlinkOneWay);
  // TP 2 into TP 4 on the same devices' first two and two more: device 1 now needs the second quarter of the
  // tokens, which device 0 holds (tokens [0, 1/2)); devices 2 and 3 the last two quarters, from device 1.
  const ReshardSeconds s = reshard_seconds({pair, 1, 2}, {four, 1, 4}, bytes, cluster_preset("a100:16"), plain_links());
  EXPECT_DOUBLE_EQ(s.send[0], bytes / 4 / kNvlinkOneWay);
  EXPECT_DOUBLE_EQ(s.send[1], bytes / 2 / kNvlinkOneWay);
  EXPECT_DOUBLE_EQ(s.receive, bytes / 4 / kNvlinkOneWay);
}

TEST(ReshardCost, EachDevicePaysTheLatencyOnce) {
  DeviceEfficiency e = plain_links();
  e.collective_latency_seconds = 1e-5;
  const std::vector<int> quarters = {0, 1, 2, 3}, halves = {0, 1};
  const ReshardSeconds r = reshard_seconds({quarters, 4, 1}, {halves, 2, 1}, 4e9, cluster_preset("a100:16"), e);
  EXPECT_EQ(r.send[0], 0);  // sends nothing: no latency either
  EXPECT_DOUBLE_EQ(r.send[1], 1e-5 + 1e9 / kNvlinkOneWay);
  EXPECT_DOUBLE_EQ(r.receive, 1e-5 + 2e9 / kNvlinkOneWay);
}

// Random layouts on one node whose NVLink runs at the network's rate, so that each device's seconds are its bytes
// over that rate: each device sends, and the busiest receiver takes, what a brute-force count over a grid of rows
// and tokens fine enough for both layouts says they lack.
TEST(ReshardCost, EveryDeviceMovesWhatItHoldsAndTheOtherLayoutPutsElsewhere) {
  ClusterSpec cluster = cluster_preset("a100:16");
  cluster.device.devices_per_node = 64;
  cluster.device.inter_node_bytes_per_second = cluster.device.intra_node_bytes_per_second / 2;
  const double rate = link_bytes_per_second(cluster, plain_links(), true);
  int checked = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    Rng rng(seed);
    auto layout = [&](std::vector<int>& ids, int& dp, int& tp) {
      dp = 1 + static_cast<int>(rng.below(6));
      tp = 1 << rng.below(3);
      ids.clear();
      for (int d = 0; d < 16 && static_cast<int>(ids.size()) < dp * tp; ++d) {
        if (rng.below(2) == 0 || 16 - d == dp * tp - static_cast<int>(ids.size())) ids.push_back(d);
      }
    };
    std::vector<int> from_ids, to_ids;
    int dp_from, tp_from, dp_to, tp_to;
    layout(from_ids, dp_from, tp_from);
    layout(to_ids, dp_to, tp_to);
    if (static_cast<int>(from_ids.size()) != dp_from * tp_from || static_cast<int>(to_ids.size()) != dp_to * tp_to) {
      continue;  // more devices than the node has
    }
    ++checked;
    const double bytes = 1e9;
    const ReshardSeconds r =
        reshard_seconds({from_ids, dp_from, tp_from}, {to_ids, dp_to, tp_to}, bytes, cluster, plain_links());
    // Grid cells: rows in dp_from · dp_to parts, tokens in tp_from · tp_to parts.
    const int rows = dp_from * dp_to, tokens = tp_from * tp_to;
    std::map<int, double> sent, received;
    for (int row = 0; row < rows; ++row) {
      for (int token = 0; token < tokens; ++token) {
        const int source = from_ids[static_cast<size_t>(row / dp_to * tp_from + token / tp_to)];
        const int target = to_ids[static_cast<size_t>(row / dp_from * tp_to + token / tp_from)];
        if (source == target) continue;
        sent[source] += bytes / rows / tokens;
        received[target] += bytes / rows / tokens;
      }
    }
    for (size_t k = 0; k < from_ids.size(); ++k) {
      EXPECT_NEAR(r.send[k] * rate, sent[from_ids[k]], 1e-9 * bytes) << "seed " << seed << " device " << from_ids[k];
    }
    double busiest = 0;
    for (const auto& [device, b] : received) busiest = std::max(busiest, b);
    EXPECT_NEAR(r.receive * rate, busiest, 1e-9 * bytes) << "seed " << seed;
  }
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace fulcrum

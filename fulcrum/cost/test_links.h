#ifndef FULCRUM_COST_TEST_LINKS_H_
#define FULCRUM_COST_TEST_LINKS_H_

#include "fulcrum/cost/analytic_cost.h"

namespace fulcrum {

// The a100 preset's links, which the network tests compute their figures from by hand: nodes of 8 A100s, NVLink
// 600 GB/s both ways, one 200 Gb/s NIC a device.
constexpr double kNvlinkOneWay = 300e9;
constexpr double kNic = 25e9;

// Links at their full rate, with no latency: a transfer takes its bytes over the rate.
inline DeviceEfficiency plain_links() {
  DeviceEfficiency e;
  e.link = 1;
  e.collective_latency_seconds = 0;
  return e;
}

}  // namespace fulcrum

#endif  // FULCRUM_COST_TEST_LINKS_H_

#include "fulcrum/model/cluster_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

TEST(ClusterPreset, PinnedDeviceNumbers) {
  const ClusterSpec h100 = cluster_preset("h100:3072");
  EXPECT_EQ(h100.devices, 3072);
  EXPECT_EQ(h100.nodes(), 384);
  EXPECT_DOUBLE_EQ(h100.device.bf16_flops_per_second, 989e12);
  EXPECT_DOUBLE_EQ(h100.device.memory_bytes, 80 * kGiB);
  EXPECT_DOUBLE_EQ(h100.device.memory_bytes_per_second, 3.35e12);
  EXPECT_DOUBLE_EQ(h100.device.intra_node_bytes_per_second, 900e9);
  EXPECT_DOUBLE_EQ(h100.device.inter_node_bytes_per_second, 50e9);  // 400 Gb/s
  const ClusterSpec h200 = cluster_preset("h200:8");
  EXPECT_DOUBLE_EQ(h200.device.memory_bytes, 141e9);
  EXPECT_DOUBLE_EQ(h200.device.memory_bytes_per_second, 4.8e12);
  EXPECT_DOUBLE_EQ(h200.device.bf16_flops_per_second, 989e12);
  const ClusterSpec a100 = cluster_preset("a100");
  EXPECT_EQ(a100.devices, 8);
  EXPECT_DOUBLE_EQ(a100.device.bf16_flops_per_second, 312e12);
  EXPECT_DOUBLE_EQ(a100.device.memory_bytes_per_second, 2.0e12);
  EXPECT_DOUBLE_EQ(a100.device.intra_node_bytes_per_second, 600e9);
  const ClusterSpec a800 = cluster_preset("a800:16");
  EXPECT_DOUBLE_EQ(a800.device.intra_node_bytes_per_second, 400e9);
  EXPECT_DOUBLE_EQ(a800.device.bf16_flops_per_second, 312e12);
  EXPECT_TRUE(cluster_preset("cpu").device.communication_shares_compute);
  EXPECT_FALSE(h100.device.communication_shares_compute);
  // fp8 tensor cores: twice the bf16 rate on Hopper, none on Ampere or the CPU.
  EXPECT_DOUBLE_EQ(h100.device.fp8_flops_per_second, 1978e12);
  EXPECT_DOUBLE_EQ(h200.device.fp8_flops_per_second, 1978e12);
  EXPECT_EQ(a100.device.fp8_flops_per_second, 0);
  EXPECT_EQ(a800.device.fp8_flops_per_second, 0);
  EXPECT_EQ(cluster_preset("cpu").device.fp8_flops_per_second, 0);
}

TEST(ClusterPreset, ReserveIsFivePercentPlusOneGiB) {
  const ClusterSpec h100 = cluster_preset("h100:8");
  EXPECT_DOUBLE_EQ(h100.usable_memory_bytes(), 80 * kGiB * 0.95 - kGiB);  // 75 GiB
  EXPECT_EQ(cluster_preset("h100:9").nodes(), 2);
}

TEST(ClusterPreset, BadSpecsAreInputErrors) {
  for (const char* spec : {"tpu:8", "h100:", "h100:0", "h100:-8", "h100:8x", "h100:2.5", ""}) {
    EXPECT_THROW(cluster_preset(spec), InputError) << spec;
  }
}

TEST(ClusterJson, PresetWithOverridesOrAWholeDevice) {
  const ClusterSpec c = cluster_from_json(
      R"({"fulcrum": 1, "preset": "h100:64", "reserve_fraction": 0.1, "device": {"memory_bytes": 1e11}})", "c.json");
  EXPECT_EQ(c.devices, 64);
  EXPECT_DOUBLE_EQ(c.device.memory_bytes, 1e11);
  EXPECT_DOUBLE_EQ(c.usable_memory_bytes(), 1e11 * 0.9 - kGiB);
  const ClusterSpec custom = cluster_from_json(R"({"devices": 4, "device": {"kind": "mi300x",
      "bf16_flops_per_second": 1.3e15, "memory_bytes": 192e9, "memory_bytes_per_second": 5.3e12,
      "intra_node_bytes_per_second": 896e9, "inter_node_bytes_per_second": 50e9, "devices_per_node": 8}})", "m.json");
  EXPECT_EQ(custom.device.kind, "mi300x");
  EXPECT_EQ(custom.nodes(), 1);
  EXPECT_EQ(custom.device.fp8_flops_per_second, 0);  // not stated: none
  EXPECT_DOUBLE_EQ(cluster_from_json(R"({"preset": "a100", "device": {"fp8_flops_per_second": 6e14}})", "c.json")
                       .device.fp8_flops_per_second,
                   6e14);
}

// A CPU machine calibrated by measurement: the cpu preset (2 devices in one node, communication on the compute
// cores) with the measured rates; the rates not given keep the preset's.
TEST(ClusterJson, CalibratedCpuPreset) {
  const ClusterSpec c = cluster_from_json(R"({"fulcrum": 1, "preset": "cpu:2", "device": {
      "bf16_flops_per_second": 6e10, "memory_bytes_per_second": 1.2e10, "intra_node_bytes_per_second": 3e9}})",
                                          "cpu.json");
  const ClusterSpec preset = cluster_preset("cpu:2");
  EXPECT_EQ(c.devices, 2);
  EXPECT_EQ(c.nodes(), 1);
  EXPECT_EQ(c.device.kind, "cpu");
  EXPECT_TRUE(c.device.communication_shares_compute);
  EXPECT_DOUBLE_EQ(c.device.bf16_flops_per_second, 6e10);
  EXPECT_DOUBLE_EQ(c.device.memory_bytes_per_second, 1.2e10);
  EXPECT_DOUBLE_EQ(c.device.intra_node_bytes_per_second, 3e9);
  EXPECT_DOUBLE_EQ(c.device.memory_bytes, preset.device.memory_bytes);
  EXPECT_DOUBLE_EQ(c.device.inter_node_bytes_per_second, preset.device.inter_node_bytes_per_second);
  EXPECT_EQ(cluster_preset("cpu").devices, 2);  // one node
  // Communication costs compute all of its time unless a measurement says otherwise.
  EXPECT_DOUBLE_EQ(c.device.communication_compute_slowdown, 1.0);
  EXPECT_DOUBLE_EQ(cluster_from_json(R"({"preset": "cpu:2", "device": {"communication_compute_slowdown": 0.3}})",
                                     "cpu.json")
                       .device.communication_compute_slowdown,
                   0.3);
  // The collective latency is the kind's own (0 here) unless a fit of measured collectives gives one.
  EXPECT_DOUBLE_EQ(c.device.collective_latency_seconds, 0.0);
  EXPECT_DOUBLE_EQ(cluster_from_json(R"({"preset": "cpu:2", "device": {"collective_latency_seconds": 2e-4}})",
                                     "cpu.json")
                       .device.collective_latency_seconds,
                   2e-4);
  // Starting a collective costs compute nothing beyond the slowdown unless a measurement in place says so.
  EXPECT_DOUBLE_EQ(c.device.collective_compute_seconds, 0.0);
  EXPECT_DOUBLE_EQ(cluster_from_json(R"({"preset": "cpu:2", "device": {"collective_compute_seconds": 8e-4}})",
                                     "cpu.json")
                       .device.collective_compute_seconds,
                   8e-4);
  // The host's time per operator is the kind's own (below 0) unless measured; 0 is a measurement too.
  EXPECT_LT(c.device.kernel_launch_seconds, 0.0);
  EXPECT_DOUBLE_EQ(cluster_from_json(R"({"preset": "h100:8", "device": {"kernel_launch_seconds": 6e-6}})", "g.json")
                       .device.kernel_launch_seconds,
                   6e-6);
  EXPECT_DOUBLE_EQ(cluster_from_json(R"({"preset": "h100:8", "device": {"kernel_launch_seconds": 0}})", "g.json")
                       .device.kernel_launch_seconds,
                   0.0);
}

TEST(ClusterJson, BadInputNamesFileAndKey) {
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {R"({"preset": "h100:8",)", "c.json: malformed JSON"},
      {R"({"preset": "h100:8", "nodes": 2})", "c.json: unknown key 'nodes'"},
      {R"({"preset": "h100:8", "device": {"memory_bytes": -1}})",
       "c.json: device: memory_bytes must be a number from 1e+06 to 1e+15"},
      // Rates no device has: they make every figure infinite or zero.
      {R"({"preset": "a100:8", "device": {"bf16_flops_per_second": 1e-308}})",
       "c.json: device: bf16_flops_per_second must be a number from 1e+06 to 1e+18"},
      {R"({"preset": "a100:8", "device": {"memory_bytes_per_second": 1e-300}})",
       "c.json: device: memory_bytes_per_second must be a number from 1000 to 1e+16"},
      {R"({"preset": "a100:8", "device": {"intra_node_bytes_per_second": 1e-300}})",
       "c.json: device: intra_node_bytes_per_second must be a number from 1000 to 1e+16"},
      {R"({"preset": "a100:8", "device": {"collective_latency_seconds": 1e308}})",
       "c.json: device: collective_latency_seconds must be a number from 1e-09 to 10"},
      {R"({"devices": 4, "device": {"kind": "x", "bf16_flops_per_second": 1e15}})", "c.json: device: memory_bytes is missing"},
      {R"({"device": {"kind": "x"}})", "c.json: device:"},
      // A typo of a kind would cost the cluster as an unknown device, without a word.
      {R"({"preset": "h100:16", "device": {"kind": "H100"}})",
       "c.json: device: kind 'H100' is not a kind; kinds are lower case: 'h100'"},
      {R"({"preset": "h100:16", "device": {"kind": "h1000"}})",
       "c.json: device: kind 'h1000' is not one of a100, a800, cpu, h100, h200: a preset's device keeps a known kind"},
      {R"({"preset": "h100:8", "fulcrum": 2})", "c.json: unsupported format version 2"},
      {R"({"preset": "cpu:2", "device": {"collective_latency_seconds": 0}})",
       "c.json: device: collective_latency_seconds must be a number from 1e-09 to 10"},
      {R"({"preset": "h100:8", "device": {"kernel_launch_seconds": -1}})",
       "c.json: device: kernel_launch_seconds must be a number from 0 to 0.1"},
      {R"({"preset": "h100:8", "device": {"kernel_launch_seconds": 1}})",
       "c.json: device: kernel_launch_seconds must be a number from 0 to 0.1"},
      {R"({"preset": "cpu:2", "device": {"communication_compute_slowdown": -0.5}})",
       "c.json: device: communication_compute_slowdown must be a number from 0 to 100"},
      {R"({"preset": "cpu:2", "device": {"communication_compute_slowdown": "half"}})",
       "c.json: device: communication_compute_slowdown must be a number from 0 to 100"},
      {R"({"preset": "cpu:2", "device": {"collective_compute_seconds": -1e-3}})",
       "c.json: device: collective_compute_seconds must be a number from 0 to 10"},
      {R"({"preset": "h100:8", "reserve_fraction": 1.5})", "c.json: reserve_fraction must be in [0, 1)"},
      {R"({"preset": "h100:8", "reserve_bytes": 1e12})", "c.json: the memory reserve leaves nothing"},
      {R"([])", "c.json: a cluster is a JSON object"},
  };
  for (const auto& c : cases) {
    try {
      cluster_from_json(c.text, "c.json");
      ADD_FAILURE() << "accepted " << c.text;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), ::testing::StartsWith(c.message)) << c.text;
    }
  }
}

}  // namespace
}  // namespace fulcrum

#ifndef FULCRUM_MODEL_CLUSTER_SPEC_H_
#define FULCRUM_MODEL_CLUSTER_SPEC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fulcrum {

// One accelerator and the links around it. Rates are peaks as the vendor states them; what kernels actually
// reach is the cost model's business (its efficiency factors).
struct DeviceSpec {
  std::string kind;                        // "h100", "a100", "a800", "h200", "cpu"
  double bf16_flops_per_second = 0;        // dense, no sparsity
  double memory_bytes = 0;                 // device memory
  double memory_bytes_per_second = 0;      // HBM bandwidth
  double intra_node_bytes_per_second = 0;  // NVLink per device, both directions together, as quoted
  double inter_node_bytes_per_second = 0;  // network per device (one NIC per GPU), one direction
  int devices_per_node = 8;
  // The CPU kind: collectives run on the same cores as compute and slow it down.
  bool communication_shares_compute = false;
  double fp8_flops_per_second = 0;  // dense fp8 tensor cores; 0: the device has none (A100, A800, cpu)
  // With communication_shares_compute: the seconds of compute a second of pipeline transfer or data-parallel
  // collective costs the device. 1 (every preset) runs communication on the compute stream with nothing
  // overlapping it; 0 would overlap it completely, as a GPU's copy engines do; in between, communication threads
  // take part of the cores; above 1, contention costs more than the transfer itself. The transfer still takes
  // its link time: data arrive, and a collective completes, when the link model says. Measured as (compute time
  // with a collective running beside it − compute time alone) / the collective's time alone. Tensor-parallel
  // collectives inside layers always block compute: the next kernel needs their result.
  double communication_compute_slowdown = 1.0;
  // With communication_shares_compute: the compute each data-parallel collective (a pipeline's gradient
  // collectives, a multitask sync group's all-reduce) takes from every member on top of the slowdown × its time:
  // what starting one costs while the ranks compute (communication threads woken to wait for a peer that is
  // still computing). Transfers and layer collectives are not charged it. Measured in place: compute loops with small collectives started between
  // their chunks against the same loops without (fulcrum.profile.measure_collective_compute_seconds). 0: none.
  double collective_compute_seconds = 0;
  // Per-step latency of a collective or transfer (alpha of the alpha-beta model); 0: the kind's own
  // (analytic_cost.h). Measured by fitting collective times over message sizes (fulcrum.profile).
  double collective_latency_seconds = 0;
  // The host's time to issue one operator of a layer pass (the framework's dispatch and the launch); below 0: the
  // kind's own (analytic_cost.h), 0: never a bound (a pass captured in a CUDA graph). fulcrum.profile measures it.
  double kernel_launch_seconds = -1;
};

// A training cluster: `devices` identical devices in nodes of `device.devices_per_node`, and the memory each
// device keeps back from training (CUDA context, communication buffers, fragmentation).
struct ClusterSpec {
  DeviceSpec device;
  int64_t devices = 0;
  double reserve_fraction = 0.05;
  double reserve_bytes = 1024.0 * 1024 * 1024;  // 1 GiB

  int64_t nodes() const;
  // Memory a plan may use on one device: memory × (1 − reserve_fraction) − reserve_bytes.
  double usable_memory_bytes() const;
};

// The most devices a cluster may have: 64 times the largest runs simulated (16,384), within the int counts of
// data-parallel replicas and ranks everything downstream keeps.
inline constexpr int64_t kMostDevices = 1 << 20;

// "h100:3072" → 3,072 H100s; the count defaults to one node ("a100" = 8 A100s; "cpu" = 2 devices). Kinds:
//   h100  H100 SXM: 989 TFLOP/s dense bf16 (1,978 fp8), 80 GiB, 3.35 TB/s, NVLink 900 GB/s, 8 per node,
//         400 Gb/s InfiniBand per GPU
//   h200  H100 with 141 GB at 4.8 TB/s
//   a100  A100-80G SXM: 312 TFLOP/s, 80 GiB, 2.0 TB/s, NVLink 600 GB/s, 200 Gb/s InfiniBand per GPU
//   a800  A100 with NVLink 400 GB/s and 400 Gb/s InfiniBand per node (Spindle's testbed: 8 GPUs share it)
//   cpu   this kind of machine: a few cores, for real runs with gloo
// Throws InputError for an unknown kind or a count that is not an integer from 1 to kMostDevices.
ClusterSpec cluster_preset(std::string_view spec);
const std::vector<std::string>& cluster_kinds();

// Reads a cluster from JSON: {"fulcrum": 1, "device": {"kind": ..., "bf16_flops_per_second": ...,
// "fp8_flops_per_second": ... (optional), ...},
// "devices": N, "reserve_fraction": f, "reserve_bytes": b}; or {"preset": "h100:64", ...overrides}, where a
// "device" object overrides only the keys it gives. A machine calibrated by measurement is a preset with its
// measured rates: {"fulcrum": 1, "preset": "cpu:2", "device": {"bf16_flops_per_second": 6e10,
// "memory_bytes_per_second": 1.2e10, "intra_node_bytes_per_second": 3e9}}. Device keys: kind,
// bf16_flops_per_second, fp8_flops_per_second, memory_bytes, memory_bytes_per_second,
// intra_node_bytes_per_second, inter_node_bytes_per_second, devices_per_node, communication_shares_compute,
// communication_compute_slowdown, collective_compute_seconds and kernel_launch_seconds (numbers >= 0).
// Unknown keys, missing rates and non-positive values are errors naming `file` and the key.
ClusterSpec cluster_from_json(std::string_view text, const std::string& file);

}  // namespace fulcrum

#endif  // FULCRUM_MODEL_CLUSTER_SPEC_H_

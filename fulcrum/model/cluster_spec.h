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

// "h100:3072" → 3,072 H100s; the count defaults to one node ("a100" = 8 A100s; "cpu" = 1 device). Kinds:
//   h100  H100 SXM: 989 TFLOP/s dense bf16 (1,978 fp8), 80 GiB, 3.35 TB/s, NVLink 900 GB/s, 8 per node, 400 Gb/s InfiniBand
//   h200  H100 with 141 GB at 4.8 TB/s
//   a100  A100-80G SXM: 312 TFLOP/s, 80 GiB, 2.0 TB/s, NVLink 600 GB/s, 200 Gb/s InfiniBand per GPU
//   a800  A100 with NVLink 400 GB/s
//   cpu   this kind of machine: a few cores, for real runs with gloo
// Throws InputError for an unknown kind or a count that is not a positive integer.
ClusterSpec cluster_preset(std::string_view spec);
const std::vector<std::string>& cluster_kinds();

// Reads a cluster from JSON: {"fulcrum": 1, "device": {"kind": ..., "bf16_flops_per_second": ...,
// "fp8_flops_per_second": ... (optional), ...},
// "devices": N, "reserve_fraction": f, "reserve_bytes": b}; or {"preset": "h100:64", ...overrides}.
// Unknown keys, missing rates and non-positive values are errors naming `file` and the key.
ClusterSpec cluster_from_json(std::string_view text, const std::string& file);

}  // namespace fulcrum

#endif  // FULCRUM_MODEL_CLUSTER_SPEC_H_

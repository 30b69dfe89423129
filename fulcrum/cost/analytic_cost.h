#ifndef FULCRUM_COST_ANALYTIC_COST_H_
#define FULCRUM_COST_ANALYTIC_COST_H_

#include "fulcrum/cost/cost_model.h"
#include "fulcrum/model/cluster_spec.h"

namespace fulcrum {

// The fractions of a device's peak rates that training kernels reach: one set per device kind, stated once
// and never tuned to an experiment.
struct DeviceEfficiency {
  double matmul = 0.70;     // dense GEMMs at training shapes
  double attention = 0.50;  // fused attention (FlashAttention-2 class kernels)
  double memory = 0.80;     // bandwidth-bound elementwise kernels
  double link = 0.75;       // collective bus bandwidth over the link's one-direction rate
  double collective_latency_seconds = 10e-6;
  // The host's time to issue one operator (the framework's dispatch and the kernel launch): a pass's kernels
  // cannot run faster than the host issues them. 0: never the bound.
  double launch_seconds = 0;
};

// A100/A800: cuBLAS reaches ~75% of 312 TFLOP/s on large bf16 GEMMs and FlashAttention-2 ~60%. H100/H200: 55%
// of 989 TFLOP/s (~540 TFLOP/s) for GEMMs in sustained training, below the 65–75% of short cuBLAS benchmarks
// (700 W power capping, tensor-parallel shards of mid size), and ~50% for attention (FlashAttention-2 is not
// Hopper-tuned); this one set reproduces Megatron-LM's published ViT-22B + GPT-175B times on 1,536–3,072 H100s
// within 14% (BENCHMARKS.md, "Simulator calibration"). NCCL ~75% of NVLink and the network; HBM 80–85%.
// cpu: half of the FMA peak for GEMMs, a third for attention, 60% of memory bandwidth, slow loopback collectives.
// A device's own collective_latency_seconds (a cluster file's measured fit) replaces its kind's latency.
// launch_seconds, GPUs: 15 µs, eager PyTorch's host time per operator of a transformer block's forward and backward
// measured on a server core (bench/launch_seconds.py: 14–24 µs over runs, BENCHMARKS.md; the CUDA launch itself
// comes on top): what makes a small layer on a few sequences per device scale poorly (reference/spindle.md §5,
// α). cpu: 0, the host is the device there and its dispatch is in the measured layer times. A device's own
// kernel_launch_seconds (fulcrum.profile.measure_launch_seconds on the device) replaces its kind's.
DeviceEfficiency efficiency_for(const DeviceSpec& device);

// Time of layer work from a roofline: every compute kernel takes max(FLOPs / (peak × efficiency), bytes /
// (memory bandwidth × efficiency)); a tensor-parallel collective takes latency + the ring algorithm's bytes
// over the link (NVLink within a node, the network beyond). The host issues the pass's operators one after
// another while the device runs the ones before: a pass takes at least its launches × launch_seconds, and where
// the kernels are shorter than that a last kernel, host_wait (host_wait_dgrad, host_wait_wgrad), holds the
// difference. The bound is per pass: the host does not run ahead from one layer into the next. Launches per transformer block
// as eager PyTorch dispatches a pre-norm block (bench/launch_seconds.py): forward 10 (qkv, attention, out_proj,
// mlp_in, mlp_out, two norms, two residual adds, the activation; a gated MLP one matmul and one product more),
// input gradient 13 (attention's backward and its three layout copies 4, the norms, activation and residual
// sums 5), weight gradient 8 (a matmul and a bias sum per linear with a bias). Kernels of a transformer block,
// per pass:
//   [all-gather (sequence parallel)] qkv, [cp_kv_exchange], attention, out_proj, [all-reduce or
//   reduce-scatter], [all-gather] mlp_in, mlp_out, [all-reduce or reduce-scatter], elementwise (norms,
//   residuals, activation)
// mirrored as *_dgrad for the input gradient (attention backward costs twice its forward; with context
// parallelism it circulates the key/value blocks again and sends their gradients back, cp_dkv_exchange),
// *_wgrad for the weight gradient, and the forward again (or its attention only) for recomputation.
// Context parallelism over cp devices gives each T/cp tokens for every layer and 1/cp of the attention
// FLOPs; the key/value exchange is a ring of cp − 1 point-to-point steps, each sending this device's K/V
// block (2 · T/cp · its key/value width, 16-bit) one way over the link of a group of tp × cp devices, each
// step paying the latency. The work's dtype sets the rates and element sizes (dtype.h): the linear layers
// run at the dtype's matmul peak, attention at 16-bit (fp32: TF32) rate; fp8 on a device without fp8 is an
// InputError.
class AnalyticCost : public CostModel {
 public:
  explicit AnalyticCost(ClusterSpec cluster);
  AnalyticCost(ClusterSpec cluster, DeviceEfficiency efficiency);
  LayerCost layer_cost(const LayerWork& work) const override;

  const ClusterSpec& cluster() const { return cluster_; }
  const DeviceEfficiency& efficiency() const { return efficiency_; }

 private:
  double compute_seconds(double flops, double peak_flops_per_second, double memory_bytes, double efficiency) const;
  // One direction of the link between the devices of a group of `group` (NVLink within a node, unless
  // `across_nodes`).
  double link_bytes_per_second(int group, bool across_nodes) const;
  double collective_seconds(double bytes_sent, int group, bool across_nodes) const;

  ClusterSpec cluster_;
  DeviceEfficiency efficiency_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COST_ANALYTIC_COST_H_

#include "fulcrum/cost/analytic_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "fulcrum/core/error.h"

namespace fulcrum {

namespace {

DeviceEfficiency kind_efficiency(const std::string& kind) {
  if (kind == "a100" || kind == "a800") return {0.75, 0.60, 0.85, 0.75, 10e-6, 15e-6};
  if (kind == "h100" || kind == "h200") return {0.55, 0.50, 0.80, 0.75, 10e-6, 15e-6};
  if (kind == "cpu") return {0.50, 0.33, 0.60, 0.50, 50e-6, 0};
  return {};
}

}  // namespace

DeviceEfficiency efficiency_for(const DeviceSpec& device) {
  DeviceEfficiency e = kind_efficiency(device.kind);
  if (device.collective_latency_seconds > 0) e.collective_latency_seconds = device.collective_latency_seconds;
  if (device.kernel_launch_seconds >= 0) e.launch_seconds = device.kernel_launch_seconds;
  return e;
}

AnalyticCost::AnalyticCost(ClusterSpec cluster) : AnalyticCost(cluster, efficiency_for(cluster.device)) {}

AnalyticCost::AnalyticCost(ClusterSpec cluster, DeviceEfficiency efficiency)
    : cluster_(std::move(cluster)), efficiency_(efficiency) {}

double AnalyticCost::compute_seconds(double flops, double peak_flops_per_second, double memory_bytes,
                                     double efficiency) const {
  return std::max(flops / (peak_flops_per_second * efficiency),
                  memory_bytes / (cluster_.device.memory_bytes_per_second * efficiency_.memory));
}

double AnalyticCost::link_bytes_per_second(int group, bool across_nodes) const {
  const DeviceSpec& d = cluster_.device;
  // NVLink's quoted rate counts both directions; a ring sends one way.
  return group <= d.devices_per_node && !across_nodes ? d.intra_node_bytes_per_second / 2
                                                      : d.inter_node_bytes_per_second;
}

double AnalyticCost::collective_seconds(double bytes_sent, int group, bool across_nodes) const {
  if (group <= 1) return 0;
  return efficiency_.collective_latency_seconds +
         bytes_sent / (link_bytes_per_second(group, across_nodes) * efficiency_.link);
}

namespace {

// Ring collectives over `group` devices of a T×h activation of `bytes` in all: an all-reduce sends
// 2(g−1)/g of it from each device, a reduce-scatter or an all-gather (g−1)/g.
double all_reduce_bytes(double bytes, int group) { return 2.0 * (group - 1) / group * bytes; }
double gather_bytes(double bytes, int group) { return static_cast<double>(group - 1) / group * bytes; }

}  // namespace

LayerCost AnalyticCost::layer_cost(const LayerWork& work) const {
  const LayerSpec& l = *work.layer;
  const int tp = std::max(1, work.sharding.tp);
  const bool sp = work.sharding.sequence_parallel && tp > 1;
  const int cp = std::max(1, work.sharding.cp);
  const bool across = work.sharding.across_nodes;
  const double t = static_cast<double>(work.batch.tokens) / cp;  // this device's tokens
  const double element_bytes = activation_element_bytes(work.dtype);  // activations and communication
  const double in_bytes = matmul_input_bytes(work.dtype);             // matmul weights and inputs
  const double matmul_peak = matmul_peak_flops_per_second(cluster_.device, work.dtype);
  const double attention_peak = attention_peak_flops_per_second(cluster_.device, work.dtype);
  const double h = static_cast<double>(l.hidden);
  const Pass pass = work.pass;
  if (pass == Pass::kBackward) return joined_backward(*this, work);
  const bool full_pass = pass == Pass::kForward || pass == Pass::kBackwardInput ||
                         (pass == Pass::kRecompute && work.recompute == Recompute::kFull);
  const bool weight_pass = pass == Pass::kBackwardWeight;
  if (pass == Pass::kRecompute && work.recompute == Recompute::kNone) return {};
  if (weight_pass && !work.trainable) return {};
  const std::string suffix = pass == Pass::kBackwardInput ? "_dgrad" : (weight_pass ? "_wgrad" : "");

  LayerCost out;
  out.kernels.reserve(12);  // a transformer block's pass with its collectives and the host's wait
  auto add_compute = [&](const std::string& name, double flops, double peak, double memory_bytes,
                         double efficiency, int launches = 1) {
    Kernel k{name + suffix, Kernel::Kind::kCompute, flops, memory_bytes, 0,
             compute_seconds(flops, peak, memory_bytes, efficiency), launches};
    out.flops += flops;
    out.seconds += k.seconds;
    out.kernels.push_back(std::move(k));
  };
  auto add_collective = [&](const std::string& name, double bytes_sent) {
    if (tp <= 1) return;
    Kernel k{name, Kernel::Kind::kCommunication, 0, 0, bytes_sent, collective_seconds(bytes_sent, tp, across), 1};
    out.seconds += k.seconds;
    out.kernels.push_back(std::move(k));
  };
  // The tensor-parallel exchange of a T×h activation entering or leaving a sharded region.
  const double activation = element_bytes * t * h;
  auto enter_region = [&] {
    if (sp && !weight_pass) add_collective("tp_all_gather", gather_bytes(activation, tp));
  };
  auto leave_region = [&] {
    if (weight_pass) return;
    if (sp) {
      add_collective("tp_reduce_scatter", gather_bytes(activation, tp));
    } else {
      add_collective("tp_all_reduce", all_reduce_bytes(activation, tp));
    }
  };
  // A matmul of `in` features to `out_local` on this device over T tokens: weights, input and output traffic.
  // `parts`: the separate matmuls it stands for (a gated MLP's gate and up projections); its weight gradient
  // also sums each part's bias over the tokens, another launch.
  auto local_matmul = [&](const std::string& name, double in, double out_local, bool bias = false, int parts = 1) {
    const double flops = 2 * t * in * out_local;
    const double bytes = in_bytes * (in * out_local + t * in) + element_bytes * t * out_local;
    add_compute(name, flops, matmul_peak, bytes, efficiency_.matmul, parts * (weight_pass && bias ? 2 : 1));
  };
  // The same, sharded `tp` ways along its outputs (or, equivalently for the cost, its inputs).
  auto matmul = [&](const std::string& name, double in, double out_features, bool bias = false, int parts = 1) {
    local_matmul(name, in, out_features / tp, bias, parts);
  };
  // The context-parallel ring: cp − 1 steps, each sending one block of `block_bytes` to the next device.
  auto add_ring = [&](const std::string& name, double block_bytes) {
    if (cp <= 1) return;
    const double steps = cp - 1;
    const double step_seconds = efficiency_.collective_latency_seconds +
                                block_bytes / (link_bytes_per_second(tp * cp, across) * efficiency_.link);
    Kernel k{name, Kernel::Kind::kCommunication, 0, 0, steps * block_bytes, steps * step_seconds, cp - 1};
    out.seconds += k.seconds;
    out.kernels.push_back(std::move(k));
  };

  switch (l.kind) {
    case LayerKind::kTransformerBlock: {
      // Megatron-style tensor parallelism splits whole heads; a component whose heads it does not divide
      // (InternViT-6B's 25) has to be replicated instead (tp 1).
      if (l.heads % tp != 0 || (l.kv_heads % tp != 0 && tp % l.kv_heads != 0)) {
        throw InputError(fmt::format("tensor parallelism {} does not divide the layer's {} heads ({} key/value "
                                     "heads): use a degree that does, or replicate the component (tp 1)",
                                     tp, l.heads, l.kv_heads));
      }
      const double q = static_cast<double>(l.heads * l.head_dim);
      const double kv = static_cast<double>(l.kv_heads * l.head_dim);
      const double f = static_cast<double>(l.ffn);
      const double mlp_in = (l.mlp == MlpKind::kGelu ? 1 : 2) * f;
      // This device's queries (T/cp of them, its tp share of the heads) against all keys.
      const double attention_flops = layer_flops(l, Pass::kForward, work.batch).attention / tp / cp;
      const double attention_bytes = element_bytes * t * (2 * q + 2 * kv) / tp;
      // With fewer key/value heads than devices, each device keeps whole (replicated) key/value heads.
      const double kv_shards = static_cast<double>(std::min<int64_t>(tp, l.kv_heads));
      // The local K and V block the context-parallel ring passes on (their gradients in backward).
      const double kv_block_bytes = element_bytes * t * 2 * kv / kv_shards;
      auto attention = [&] {
        add_ring("cp_kv_exchange", kv_block_bytes);
        const double backward = pass == Pass::kBackwardInput ? 2 : 1;
        add_compute("attention", attention_flops * backward, attention_peak, attention_bytes * backward,
                    efficiency_.attention, pass == Pass::kBackwardInput ? 4 : 1);
        if (pass == Pass::kBackwardInput) add_ring("cp_dkv_exchange", kv_block_bytes);
      };
      const bool selective_only = pass == Pass::kRecompute && work.recompute == Recompute::kSelective;
      if (selective_only) {
        attention();
        break;
      }
      const bool gated = l.mlp != MlpKind::kGelu;
      enter_region();
      local_matmul("qkv", h, q / tp + 2 * kv / kv_shards, l.qkv_bias);
      if (full_pass) attention();
      matmul("out_proj", q, h, l.linear_bias);
      leave_region();
      enter_region();
      matmul("mlp_in", h, mlp_in, l.linear_bias, gated ? 2 : 1);
      matmul("mlp_out", f, h, l.linear_bias);
      leave_region();
      if (full_pass) {
        const double replicated = sp ? tp : 1;
        // Two norms (read and write), two residual adds (two reads, one write), the activation function (and
        // the gate's product).
        add_compute("elementwise", 0, attention_peak,
                    element_bytes * (4 * t * h / replicated + 6 * t * h / replicated + (mlp_in + f) * t / tp),
                    efficiency_.memory, gated ? 6 : 5);
      }
      break;
    }
    case LayerKind::kPatchEmbedding:
      matmul("patch_embed", static_cast<double>(l.in_features), h);
      break;
    case LayerKind::kProjector: {
      double in = static_cast<double>(l.in_features);
      for (int64_t i = 0; i < l.projector_linears; ++i) {
        const double next = static_cast<double>(i + 1 == l.projector_linears ? l.hidden : l.ffn);
        matmul("projector_" + std::to_string(i), in, next, l.linear_bias);
        in = next;
      }
      break;
    }
    case LayerKind::kLmHead:
      // Vocabulary-parallel head: each device holds V/tp rows; the loss reduces over the group.
      matmul("lm_head", h, static_cast<double>(l.vocab));
      break;
    case LayerKind::kTokenEmbedding:
      if (!weight_pass) {
        add_compute("embedding", 0, attention_peak, element_bytes * 2 * t * h, efficiency_.memory);
        if (pass == Pass::kForward) leave_region();  // vocabulary-parallel lookup: partial rows summed
      }
      break;
    case LayerKind::kFinalNorm:
      if (full_pass) {
        add_compute("final_norm", 0, attention_peak, element_bytes * 2 * t * h / (sp ? tp : 1), efficiency_.memory);
      }
      break;
  }
  // The host issues the operators one after another while the device runs the earlier ones: when it is the slower,
  // the device waits for it. The kernel is there whenever launches are priced (0 seconds when the host keeps up),
  // so that a pass has the same kernels at every size.
  if (efficiency_.launch_seconds > 0 && !out.kernels.empty()) {
    int launches = 0;
    for (const Kernel& k : out.kernels) launches += k.launches;
    const double wait = std::max(0.0, launches * efficiency_.launch_seconds - out.seconds);
    out.kernels.push_back({"host_wait" + suffix, Kernel::Kind::kCompute, 0, 0, 0, wait, 0});
    out.seconds += wait;
  }
  return out;
}

}  // namespace fulcrum

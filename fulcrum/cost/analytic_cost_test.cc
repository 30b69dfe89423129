#include "fulcrum/cost/analytic_cost.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "fulcrum/core/error.h"
#include "fulcrum/model/model_presets.h"
#include "fulcrum/model/test_layers.h"

namespace fulcrum {
namespace {

// A device with round rates and perfect efficiency, so every kernel's time can be worked out by hand:
// 100 TFLOP/s (200 in fp8), 1 TB/s of memory bandwidth, 200 GB/s NVLink (100 GB/s each way), 50 GB/s between
// nodes, 1 µs collective latency.
AnalyticCost round_device() {
  ClusterSpec cluster = cluster_preset("h100:8");
  cluster.device.bf16_flops_per_second = 100e12;
  cluster.device.memory_bytes_per_second = 1e12;
  cluster.device.intra_node_bytes_per_second = 200e9;
  cluster.device.inter_node_bytes_per_second = 50e9;
  cluster.device.fp8_flops_per_second = 200e12;
  return AnalyticCost(cluster, {1.0, 1.0, 1.0, 1.0, 1e-6});
}

const TokenBatch kOneSequence{1, 2048, 2048 * 2048};
constexpr double T = 2048, h = 12288;

std::map<std::string, Kernel> by_name(const LayerCost& cost) {
  std::map<std::string, Kernel> out;
  for (const Kernel& k : cost.kernels) out[k.name + (out.count(k.name) ? "#2" : "")] = k;
  return out;
}

TEST(AnalyticCost, ForwardKernelsOfAGpt3LayerByHand) {
  const LayerSpec block = gpt3_block();
  const LayerCost fwd = round_device().layer_cost({&block, Pass::kForward, kOneSequence, {1, false}});
  const auto k = by_name(fwd);
  ASSERT_EQ(k.size(), 6u);  // qkv, attention, out_proj, mlp_in, mlp_out, elementwise: no collectives at tp 1
  // qkv: 2·T·h·3h FLOPs, compute-bound: 2·2048·12288·36864 / 1e14 s.
  EXPECT_DOUBLE_EQ(k.at("qkv").flops, 2 * T * h * 3 * h);
  EXPECT_DOUBLE_EQ(k.at("qkv").seconds, 2 * T * h * 3 * h / 100e12);
  EXPECT_DOUBLE_EQ(k.at("attention").flops, 4 * T * T * h);
  // Elementwise work moves 2 bytes × (10Th + 2·4h·T) and is bandwidth-bound.
  EXPECT_DOUBLE_EQ(k.at("elementwise").memory_bytes, 2 * (10 * T * h + 8 * h * T));
  EXPECT_DOUBLE_EQ(k.at("elementwise").seconds, 2 * (10 * T * h + 8 * h * T) / 1e12);
  // The kernels add up to the layer's FLOPs and time.
  EXPECT_DOUBLE_EQ(fwd.flops, layer_flops(block, Pass::kForward, kOneSequence).total());
  double seconds = 0;
  for (const Kernel& kernel : fwd.kernels) seconds += kernel.seconds;
  EXPECT_DOUBLE_EQ(fwd.seconds, seconds);
}

TEST(AnalyticCost, TensorParallelCollectivesByHand) {
  const LayerSpec block = gpt3_block();
  const AnalyticCost cost = round_device();
  // tp 8 without sequence parallelism: two all-reduces of the T×h activation (2 bytes each), each device
  // sending 2·7/8 of it over 100 GB/s, plus 1 µs.
  const LayerCost tp8 = cost.layer_cost({&block, Pass::kForward, kOneSequence, {8, false}});
  int all_reduces = 0;
  for (const Kernel& k : tp8.kernels) {
    if (k.kind != Kernel::Kind::kCommunication) continue;
    ++all_reduces;
    EXPECT_EQ(k.name, "tp_all_reduce");
    EXPECT_DOUBLE_EQ(k.communication_bytes, 2.0 * 7 / 8 * 2 * T * h);
    EXPECT_DOUBLE_EQ(k.seconds, 1e-6 + 2.0 * 7 / 8 * 2 * T * h / 100e9);
  }
  EXPECT_EQ(all_reduces, 2);
  EXPECT_DOUBLE_EQ(tp8.flops, layer_flops(block, Pass::kForward, kOneSequence).total() / 8);
  // With sequence parallelism: an all-gather and a reduce-scatter around each region, 7/8 of T×h each.
  const LayerCost sp = cost.layer_cost({&block, Pass::kForward, kOneSequence, {8, true}});
  std::map<std::string, int> collectives;
  for (const Kernel& k : sp.kernels) {
    if (k.kind != Kernel::Kind::kCommunication) continue;
    ++collectives[k.name];
    EXPECT_DOUBLE_EQ(k.communication_bytes, 7.0 / 8 * 2 * T * h);
  }
  EXPECT_EQ(collectives, (std::map<std::string, int>{{"tp_all_gather", 2}, {"tp_reduce_scatter", 2}}));
}

TEST(AnalyticCost, BackwardPassesAndRecomputation) {
  const LayerSpec block = gpt3_block();
  const AnalyticCost cost = round_device();
  const LayerCost dgrad = cost.layer_cost({&block, Pass::kBackwardInput, kOneSequence, {1, false}});
  EXPECT_DOUBLE_EQ(dgrad.flops, layer_flops(block, Pass::kBackwardInput, kOneSequence).total());
  EXPECT_EQ(dgrad.kernels.front().name, "qkv_dgrad");
  const LayerCost wgrad = cost.layer_cost({&block, Pass::kBackwardWeight, kOneSequence, {8, false}});
  EXPECT_DOUBLE_EQ(wgrad.flops, layer_flops(block, Pass::kBackwardWeight, kOneSequence).total() / 8);
  for (const Kernel& k : wgrad.kernels) EXPECT_EQ(k.kind, Kernel::Kind::kCompute) << k.name;
  // A frozen layer has no weight gradient; no recomputation costs nothing; selective reruns attention only.
  EXPECT_TRUE(cost.layer_cost({&block, Pass::kBackwardWeight, kOneSequence, {1, false}, false}).kernels.empty());
  EXPECT_TRUE(cost.layer_cost({&block, Pass::kRecompute, kOneSequence, {1, false}, true, Recompute::kNone})
                  .kernels.empty());
  const LayerCost selective =
      cost.layer_cost({&block, Pass::kRecompute, kOneSequence, {1, false}, true, Recompute::kSelective});
  ASSERT_EQ(selective.kernels.size(), 1u);
  EXPECT_EQ(selective.kernels[0].name, "attention");
  EXPECT_DOUBLE_EQ(cost.layer_cost({&block, Pass::kRecompute, kOneSequence, {1, false}, true, Recompute::kFull}).flops,
                   layer_flops(block, Pass::kForward, kOneSequence).total());
  // The whole backward is the halves one after another, in FLOPs, kernels and time; frozen, the input half.
  for (bool trainable : {true, false}) {
    const LayerWork whole{&block, Pass::kBackward, kOneSequence, {1, false}, trainable};
    const LayerCost b = cost.layer_cost(whole);
    const LayerCost in = cost.layer_cost({&block, Pass::kBackwardInput, kOneSequence, {1, false}, trainable});
    const LayerCost w = cost.layer_cost({&block, Pass::kBackwardWeight, kOneSequence, {1, false}, trainable});
    EXPECT_DOUBLE_EQ(b.seconds, in.seconds + w.seconds);
    EXPECT_EQ(b.kernels.size(), in.kernels.size() + w.kernels.size());
    EXPECT_DOUBLE_EQ(b.flops, layer_flops(block, Pass::kBackward, kOneSequence, trainable).total());
    EXPECT_DOUBLE_EQ(b.flops, layer_flops(block, Pass::kBackwardInput, kOneSequence).total() +
                                  layer_flops(block, Pass::kBackwardWeight, kOneSequence, trainable).total());
  }
  EXPECT_FALSE(cost.prices_whole_backward());
}

// The operators each pass issues, as eager PyTorch dispatches a pre-norm GELU block with biases (counted by
// fulcrum.profile.measure_launch_seconds, test_profile.py): forward 10, input gradient 13, weight gradient 8.
int launches_of(const LayerCost& cost) {
  int n = 0;
  for (const Kernel& k : cost.kernels) n += k.launches;
  return n;
}

TEST(AnalyticCost, APassTakesAtLeastTheHostsTimeToIssueItsOperators) {
  ClusterSpec cluster = cluster_preset("h100:8");
  cluster.device.bf16_flops_per_second = 100e12;
  cluster.device.memory_bytes_per_second = 1e12;
  const AnalyticCost roofline(cluster, {1.0, 1.0, 1.0, 1.0, 1e-6});
  const AnalyticCost hosted(cluster, {1.0, 1.0, 1.0, 1.0, 1e-6, 10e-6});
  LayerSpec big_vit = gpt3_block();  // a ViT's block: GELU, biases everywhere
  big_vit.qkv_bias = true;
  big_vit.linear_bias = true;
  LayerSpec vit = big_vit;  // and a narrow one
  vit.hidden = 64;
  vit.heads = 4;
  vit.kv_heads = 4;
  vit.head_dim = 16;
  vit.ffn = 256;
  const TokenBatch four_tokens{1, 4, 16};
  for (const auto& [pass, launches] : {std::pair{Pass::kForward, 10}, {Pass::kBackwardInput, 13},
                                       {Pass::kBackwardWeight, 8}}) {
    // Four tokens through a 64-wide block: every kernel far shorter than 10 µs, so the host sets the time.
    const LayerCost tiny = hosted.layer_cost({&vit, pass, four_tokens, {1, false}});
    const LayerCost tiny_roofline = roofline.layer_cost({&vit, pass, four_tokens, {1, false}});
    EXPECT_EQ(launches_of(tiny), launches) << static_cast<int>(pass);
    ASSERT_LT(tiny_roofline.seconds, launches * 10e-6);
    EXPECT_DOUBLE_EQ(tiny.seconds, launches * 10e-6);
    EXPECT_EQ(tiny.kernels.back().name.rfind("host_wait", 0), 0u) << tiny.kernels.back().name;
    EXPECT_DOUBLE_EQ(tiny.kernels.back().seconds, launches * 10e-6 - tiny_roofline.seconds);
    EXPECT_DOUBLE_EQ(tiny.flops, tiny_roofline.flops);
    // 2,048 tokens: the kernels outlast the host, which then costs nothing; the kernels are the same ones.
    const LayerCost big = hosted.layer_cost({&big_vit, pass, kOneSequence, {1, false}});
    EXPECT_DOUBLE_EQ(big.seconds, roofline.layer_cost({&big_vit, pass, kOneSequence, {1, false}}).seconds);
    EXPECT_DOUBLE_EQ(big.kernels.back().seconds, 0);
    ASSERT_EQ(big.kernels.size(), tiny.kernels.size());
    for (size_t i = 0; i < big.kernels.size(); ++i) EXPECT_EQ(big.kernels[i].name, tiny.kernels[i].name);
  }
  // Without biases the weight gradient sums none; a gated MLP issues its gate and up projections and the product
  // apart; each tensor-parallel collective is an operator too.
  LayerSpec plain = vit;
  plain.qkv_bias = plain.linear_bias = false;
  EXPECT_EQ(launches_of(hosted.layer_cost({&plain, Pass::kBackwardWeight, four_tokens, {1, false}})), 4);
  LayerSpec gated = plain;
  gated.mlp = MlpKind::kSwiGlu;
  EXPECT_EQ(launches_of(hosted.layer_cost({&gated, Pass::kForward, four_tokens, {1, false}})), 12);
  EXPECT_EQ(launches_of(hosted.layer_cost({&vit, Pass::kForward, four_tokens, {2, true}})), 10 + 4);
  // A whole backward is its halves, each with its own wait.
  const LayerCost whole = hosted.layer_cost({&vit, Pass::kBackward, four_tokens, {1, false}});
  EXPECT_DOUBLE_EQ(whole.seconds, (13 + 8) * 10e-6);
  const LayerCost input_half = hosted.layer_cost({&vit, Pass::kBackwardInput, four_tokens, {1, false}});
  ASSERT_LT(input_half.kernels.size(), whole.kernels.size());
  EXPECT_EQ(whole.kernels[input_half.kernels.size() - 1].name, "host_wait_dgrad");
  EXPECT_EQ(whole.kernels.back().name, "host_wait_wgrad");
  // The roofline alone adds no kernel.
  const LayerCost plain_roofline = roofline.layer_cost({&vit, Pass::kForward, four_tokens, {1, false}});
  EXPECT_EQ(plain_roofline.kernels.back().name, "elementwise");
}

// GPUs take eager PyTorch's measured host time per operator; the cpu kind none (its layer times are measured with
// the dispatch in them); a cluster file's kernel_launch_seconds replaces either, 0 included.
TEST(AnalyticCost, TheLaunchTimeIsTheKindsUnlessTheDeviceSaysOtherwise) {
  EXPECT_DOUBLE_EQ(efficiency_for(cluster_preset("a800:8").device).launch_seconds, 15e-6);
  EXPECT_DOUBLE_EQ(efficiency_for(cluster_preset("h100:8").device).launch_seconds, 15e-6);
  EXPECT_DOUBLE_EQ(efficiency_for(cluster_preset("cpu:2").device).launch_seconds, 0);
  DeviceSpec measured = cluster_preset("h100:8").device;
  measured.kernel_launch_seconds = 4e-6;
  EXPECT_DOUBLE_EQ(efficiency_for(measured).launch_seconds, 4e-6);
  measured.kernel_launch_seconds = 0;  // a pass captured in a CUDA graph
  EXPECT_DOUBLE_EQ(efficiency_for(measured).launch_seconds, 0);
}

TEST(AnalyticCost, TensorParallelismMustDivideTheHeads) {
  const AnalyticCost cost = round_device();
  const ModelSpec vit = model_preset("internvit-6b");  // 25 heads
  const LayerSpec& block = vit.components[0].layers[1];
  EXPECT_THROW(cost.layer_cost({&block, Pass::kForward, {1, 1025, 1025 * 1025}, {2, false}}), InputError);
  EXPECT_NO_THROW(cost.layer_cost({&block, Pass::kForward, {1, 1025, 1025 * 1025}, {5, false}}));
  EXPECT_NO_THROW(cost.layer_cost({&block, Pass::kForward, {1, 1025, 1025 * 1025}, {1, false}}));
  // Grouped-query attention: 8 KV heads are replicated when tp exceeds them (tp 16 over 64 query heads).
  const ModelSpec llama = model_preset("llama-70b");
  const LayerSpec& gqa = llama.components[0].layers[1];
  const LayerCost tp16 = cost.layer_cost({&gqa, Pass::kForward, {1, 4096, 4096 * 4096}, {16, false}});
  // Each device: 64/16 query heads and one whole of the 8 KV heads (K and V of 128 each), over 8192 inputs.
  EXPECT_DOUBLE_EQ(tp16.kernels.front().flops, 2.0 * 4096 * 8192 * (8192.0 / 16 + 2 * 1024.0 / 8));
  EXPECT_THROW(cost.layer_cost({&gqa, Pass::kForward, {1, 4096, 4096 * 4096}, {3, false}}), InputError);
}

TEST(AnalyticCost, EfficiencyIsOneDocumentedSetPerDeviceKind) {
  EXPECT_DOUBLE_EQ(efficiency_for(cluster_preset("a100").device).matmul, 0.75);
  EXPECT_DOUBLE_EQ(efficiency_for(cluster_preset("a800").device).matmul, 0.75);
  EXPECT_DOUBLE_EQ(efficiency_for(cluster_preset("h100").device).matmul, 0.55);  // the calibrated set
  EXPECT_DOUBLE_EQ(efficiency_for(cluster_preset("h200").device).attention, 0.50);
  // A measured latency (a cluster file's collective_latency_seconds) replaces the kind's; nothing else moves.
  DeviceSpec cpu = cluster_preset("cpu").device;
  EXPECT_DOUBLE_EQ(efficiency_for(cpu).collective_latency_seconds, 50e-6);
  cpu.collective_latency_seconds = 3e-4;
  EXPECT_DOUBLE_EQ(efficiency_for(cpu).collective_latency_seconds, 3e-4);
  EXPECT_DOUBLE_EQ(efficiency_for(cpu).link, 0.50);
  // A GPT-3 layer's forward on one A100 at tp 1 takes its FLOPs over 75% of 312 TFLOP/s, give or take the
  // attention and elementwise kernels: between 25 and 40 ms.
  const LayerSpec block = gpt3_block();
  const double seconds = AnalyticCost(cluster_preset("a100")).layer_cost({&block, Pass::kForward, kOneSequence, {1, false}}).seconds;
  EXPECT_GT(seconds, 24 * T * h * h / (0.75 * 312e12));
  EXPECT_LT(seconds, 0.040);
}

std::map<std::string, int> communication_kernels(const LayerCost& cost) {
  std::map<std::string, int> out;
  for (const Kernel& k : cost.kernels) out[k.name] += k.kind == Kernel::Kind::kCommunication;
  std::erase_if(out, [](const auto& entry) { return entry.second == 0; });
  return out;
}

TEST(AnalyticCost, ContextParallelismByHand) {
  const LayerSpec block = gpt3_block();
  const AnalyticCost cost = round_device();
  const LayerCost cp1 = cost.layer_cost({&block, Pass::kForward, kOneSequence, {1, false, 1}});
  const LayerCost cp2 = cost.layer_cost({&block, Pass::kForward, kOneSequence, {1, false, 2}});
  const auto k1 = by_name(cp1), k2 = by_name(cp2);
  // Each device: T/2 tokens through every matmul, and its queries' half of the attention.
  EXPECT_DOUBLE_EQ(k2.at("attention").flops, 4 * T * T * h / 2);
  EXPECT_DOUBLE_EQ(k2.at("attention").flops, k1.at("attention").flops / 2);
  EXPECT_DOUBLE_EQ(k2.at("qkv").flops, 2 * (T / 2) * h * 3 * h);
  EXPECT_DOUBLE_EQ(cp2.flops, cp1.flops / 2);
  // The ring: cp − 1 = 1 step sending the local K and V, 2 bytes × T/2 tokens × 2h, over 100 GB/s + 1 µs.
  ASSERT_EQ(communication_kernels(cp2), (std::map<std::string, int>{{"cp_kv_exchange", 1}}));
  EXPECT_DOUBLE_EQ(k2.at("cp_kv_exchange").communication_bytes, 2 * (T / 2) * 2 * h);
  EXPECT_DOUBLE_EQ(k2.at("cp_kv_exchange").seconds, 1e-6 + 2 * (T / 2) * 2 * h / 100e9);
  EXPECT_TRUE(communication_kernels(cp1).empty());

  // Backward: the K/V blocks go round again and their gradients come back.
  const LayerCost dgrad = cost.layer_cost({&block, Pass::kBackwardInput, kOneSequence, {1, false, 2}});
  const auto kd = by_name(dgrad);
  EXPECT_EQ(communication_kernels(dgrad), (std::map<std::string, int>{{"cp_dkv_exchange", 1}, {"cp_kv_exchange", 1}}));
  EXPECT_DOUBLE_EQ(kd.at("cp_dkv_exchange").communication_bytes, 2 * (T / 2) * 2 * h);
  EXPECT_DOUBLE_EQ(kd.at("attention_dgrad").flops, 2 * 4 * T * T * h / 2);
  // The weight gradient needs no exchange; selective recomputation reruns the attention and its ring.
  EXPECT_TRUE(
      communication_kernels(cost.layer_cost({&block, Pass::kBackwardWeight, kOneSequence, {1, false, 2}})).empty());
  const LayerCost selective =
      cost.layer_cost({&block, Pass::kRecompute, kOneSequence, {1, false, 2}, true, Recompute::kSelective});
  ASSERT_EQ(selective.kernels.size(), 2u);
  EXPECT_EQ(selective.kernels[0].name, "cp_kv_exchange");

  // cp 4 with tp 2 (8 devices, one node): 3 steps of 2 bytes × T/4 × 2 × h/2 (this device's K/V heads).
  const auto k8 = by_name(cost.layer_cost({&block, Pass::kForward, kOneSequence, {2, false, 4}}));
  const double block8 = 2 * (T / 4) * 2 * (h / 2);
  EXPECT_DOUBLE_EQ(k8.at("cp_kv_exchange").communication_bytes, 3 * block8);
  EXPECT_DOUBLE_EQ(k8.at("cp_kv_exchange").seconds, 3 * (1e-6 + block8 / 100e9));
  EXPECT_DOUBLE_EQ(k8.at("attention").flops, 4 * T * T * h / 8);
  // cp 4 with tp 4 spans two nodes: the ring runs over the 50 GB/s network.
  const auto k16 = by_name(cost.layer_cost({&block, Pass::kForward, kOneSequence, {4, false, 4}}));
  const double block16 = 2 * (T / 4) * 2 * (h / 4);
  EXPECT_DOUBLE_EQ(k16.at("cp_kv_exchange").seconds, 3 * (1e-6 + block16 / 50e9));
}

TEST(AnalyticCost, DtypeSetsMatmulRatesAndBytes) {
  const LayerSpec block = gpt3_block();
  const LayerWork bf16{&block, Pass::kForward, kOneSequence, {1, false}};
  LayerWork fp8 = bf16, fp16 = bf16, fp32 = bf16;
  fp8.dtype = Dtype::kFp8;
  fp16.dtype = Dtype::kFp16;
  fp32.dtype = Dtype::kFp32;
  // On the round device: the qkv GEMM (2·T·h·3h FLOPs) is compute-bound, 18.6 ms in bf16 and half in fp8
  // (200 TFLOP/s), while its traffic (1 byte for the weights and input, 2 for the output: 0.63 GB) takes 0.6 ms.
  const auto round_bf16 = by_name(round_device().layer_cost(bf16));
  const auto round_fp8 = by_name(round_device().layer_cost(fp8));
  EXPECT_DOUBLE_EQ(round_fp8.at("qkv").memory_bytes, 1 * (h * 3 * h + T * h) + 2 * T * 3 * h);
  EXPECT_DOUBLE_EQ(round_fp8.at("qkv").seconds, 2 * T * h * 3 * h / 200e12);
  EXPECT_DOUBLE_EQ(round_bf16.at("qkv").seconds, 2 * T * h * 3 * h / 100e12);
  // Attention stays 16-bit.
  EXPECT_DOUBLE_EQ(round_fp8.at("attention").seconds, round_bf16.at("attention").seconds);

  // On a real H100, the same GEMM's time halves in fp8; fp16 runs at the bf16 rate.
  const AnalyticCost h100(cluster_preset("h100"));
  const auto h_bf16 = by_name(h100.layer_cost(bf16));
  const auto h_fp8 = by_name(h100.layer_cost(fp8));
  EXPECT_NEAR(h_fp8.at("mlp_in").seconds / h_bf16.at("mlp_in").seconds, 0.5, 1e-12);
  EXPECT_NEAR(h_fp8.at("qkv").seconds / h_bf16.at("qkv").seconds, 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(h100.layer_cost(fp16).seconds, h100.layer_cost(bf16).seconds);
  EXPECT_NO_THROW(AnalyticCost(cluster_preset("h200")).layer_cost(fp8));
  // No fp8 tensor cores on Ampere or the CPU.
  for (const char* device : {"a100", "a800", "cpu"}) {
    EXPECT_THROW(AnalyticCost(cluster_preset(device)).layer_cost(fp8), InputError) << device;
  }

  // fp32: TF32 at half the bf16 rate (A100: 156 TFLOP/s), 4-byte activations and collectives.
  const AnalyticCost a100(cluster_preset("a100"));
  EXPECT_DOUBLE_EQ(by_name(a100.layer_cost(fp32)).at("qkv").seconds, 2 * T * h * 3 * h / (156e12 * 0.75));
  LayerWork fp32_tp8 = fp32;
  fp32_tp8.sharding = {8, false};
  for (const Kernel& k : round_device().layer_cost(fp32_tp8).kernels) {
    if (k.kind == Kernel::Kind::kCommunication) {
      EXPECT_DOUBLE_EQ(k.communication_bytes, 2.0 * 7 / 8 * 4 * T * h);
    }
  }
}

}  // namespace
}  // namespace fulcrum

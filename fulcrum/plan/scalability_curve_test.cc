#include "fulcrum/plan/scalability_curve.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fulcrum/model/model_presets.h"
#include "fulcrum/model/task_graph.h"

namespace fulcrum {
namespace {

// Every valid count's point of `curve` on up to `devices`, the ones no faster than fewer devices included.
std::vector<CurvePoint> every_point(const ScalabilityCurve& curve, int devices) {
  std::vector<CurvePoint> out;
  for (int n = 1; n <= devices; ++n) {
    if (const CurvePoint* p = curve.measured_at(n)) out.push_back(*p);
  }
  return out;
}

// A MetaOp of `layers` copies of `component`'s layer `layer`, on 32 sequences of 2,048 tokens.
MetaOp metaop_of(const ComponentSpec& component, int layer, int layers) {
  MetaOp op;
  op.first_layer = layer;
  op.layers = layers;
  op.layer = component.layers.at(layer);
  op.sequences = 32;
  op.tokens = 2048;
  return op;
}

class CurveFloor : public ::testing::Test {
 protected:
  const ClusterSpec cluster_ = cluster_preset("a800:16");  // two nodes of 8
  const AnalyticCost cost_{cluster_};

  ScalabilityCurve curve(const MetaOp& op, const ComponentSpec& component, int min_tp) const {
    CurveOptions options;
    options.efficiency = cost_.efficiency();
    options.min_tp = min_tp;
    return metaop_curve(op, component, cost_, cluster_, static_cast<int>(cluster_.devices), options);
  }
};

// Yi-34B's blocks (56 heads, 8 key/value heads): without a floor the fastest way onto many devices is plain data
// parallelism, which keeps every block whole on every device (34B parameters' state, more than an A800 holds).
// With a floor of k, data parallelism copies only shards of at least k devices; fewer devices than k run the
// block by tensor parallelism alone, so every count below the floor keeps a point and the curve still starts on
// one device.
TEST_F(CurveFloor, DataParallelismCopiesOnlyShardsOfAtLeastTheFloor) {
  const ModelSpec model = model_preset("yi-34b");
  const ComponentSpec& llm = model.components.at(0);
  const MetaOp op = metaop_of(llm, 1, 60);
  ASSERT_EQ(op.layer.kind, LayerKind::kTransformerBlock);
  const std::vector<CurvePoint> free = every_point(curve(op, llm, 1), 16);
  bool copies_small_shards = false;
  for (const CurvePoint& p : free) copies_small_shards |= p.dp > 1 && p.tp < 8;
  ASSERT_TRUE(copies_small_shards) << "the floor would restrict nothing";
  for (int floor : {2, 4, 8}) {
    const ScalabilityCurve c = curve(op, llm, floor);
    ASSERT_FALSE(c.points().empty());
    EXPECT_EQ(c.points().front().devices, 1) << floor;
    for (const CurvePoint& p : every_point(c, 16)) {
      EXPECT_EQ(p.dp * p.tp, p.devices);
      if (p.dp > 1) {
        EXPECT_GE(p.tp, floor) << p.devices << " devices, floor " << floor;
      }
      if (p.devices < floor) {
        EXPECT_EQ(p.dp, 1) << p.devices << " devices, floor " << floor;
      }
    }
    // 16 devices remain a point: two copies of a shard of 8 at the highest floor.
    const CurvePoint* all = c.measured_at(16);
    ASSERT_NE(all, nullptr) << floor;
    EXPECT_GE(all->tp, floor);
  }
}

// Whisper-large-v2's blocks in QWen-VAL have 20 heads: tensor parallelism 8 does not divide them, so a floor of 8
// becomes 4, the largest degree that divides both the heads and the floor (not 5, whose shards would not line up
// with the other blocks' groups of 8).
TEST_F(CurveFloor, AFloorTheHeadsDoNotAllowFallsToTheLargestDivisorThatDoes) {
  const TaskGraph graph = task_graph_preset("qwen-val");
  const ComponentSpec* audio = graph.model.find("audio");
  ASSERT_NE(audio, nullptr);
  ASSERT_EQ(audio->attention_heads(), 20);
  const MetaOp op = metaop_of(*audio, 1, 32);
  bool shards_of_four = false;
  for (const CurvePoint& p : every_point(curve(op, *audio, 8), 16)) {
    if (p.dp > 1) {
      EXPECT_GE(p.tp, 4) << p.devices;
    }
    shards_of_four |= p.dp > 1 && p.tp == 4;
  }
  EXPECT_TRUE(shards_of_four);
}

// Layers tensor parallelism does not split (the output projection here) run whole: a floor changes nothing.
TEST_F(CurveFloor, LayersWithoutHeadsIgnoreTheFloor) {
  const ModelSpec model = model_preset("yi-34b");
  const ComponentSpec& llm = model.components.at(0);
  const MetaOp op = metaop_of(llm, static_cast<int>(llm.layers.size()) - 1, 1);
  ASSERT_EQ(op.layer.kind, LayerKind::kLmHead);
  const std::vector<CurvePoint> free = every_point(curve(op, llm, 1), 16);
  const std::vector<CurvePoint> floored = every_point(curve(op, llm, 8), 16);
  ASSERT_EQ(free.size(), floored.size());
  for (size_t i = 0; i < free.size(); ++i) {
    EXPECT_EQ(free[i].devices, floored[i].devices);
    EXPECT_EQ(free[i].tp, floored[i].tp);
    EXPECT_DOUBLE_EQ(free[i].seconds, floored[i].seconds);
  }
}

// Thirty heads split 3, 5 or 6 ways: a slice wider than a node (it starts on a node's first device) keeps its
// tensor-parallel groups inside nodes only with a degree dividing the node, so 2 × 5 = 10 devices, whose second
// group would span devices 5–9 across two nodes, has no point, and every count past a node has such a degree.
TEST_F(CurveFloor, SlicesWiderThanANodeSplitByDegreesDividingIt) {
  ComponentSpec tower;
  tower.name = "tower";
  LayerSpec block;
  block.hidden = 3840;
  block.ffn = 15360;
  block.heads = block.kv_heads = 30;
  block.head_dim = 128;
  tower.layers = {block};
  const MetaOp op = metaop_of(tower, 0, 8);
  const std::vector<CurvePoint> points = every_point(curve(op, tower, 1), 16);
  bool odd_degree = false;
  for (const CurvePoint& p : points) {
    odd_degree |= p.tp % 2 == 1 && p.tp > 1;
    if (p.devices > 8) EXPECT_EQ(8 % p.tp, 0) << p.devices << " devices at TP " << p.tp;
  }
  EXPECT_TRUE(odd_degree) << "inside a node, degrees not dividing it stay";
  EXPECT_EQ(curve(op, tower, 1).measured_at(10), nullptr);
}

}  // namespace
}  // namespace fulcrum

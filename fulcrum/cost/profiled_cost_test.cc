#include "fulcrum/cost/profiled_cost.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "fulcrum/core/error.h"
#include "fulcrum/model/test_layers.h"

namespace fulcrum {
namespace {

// A fallback whose every pass takes tokens × 1 µs, in one kernel: ratios are easy to read off.
class MicrosecondPerToken : public CostModel {
 public:
  LayerCost layer_cost(const LayerWork& w) const override {
    const double s = 1e-6 * static_cast<double>(w.batch.tokens);
    return {s, 0, {Kernel{"all", Kernel::Kind::kCompute, 0, 0, 0, s}}};
  }
};

const char* kProfile = R"({"fulcrum_profile": 1, "device": "h100", "entries": [
  {"layer": "transformer", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "mlp": "swiglu",
   "pass": "forward", "tokens": [1000, 3000], "seconds": [0.002, 0.009]}]})";

TEST(ProfiledCost, ScalesTheFallbackByTheMeasuredRatioInterpolatedInTokens) {
  const MicrosecondPerToken fallback;
  const ProfiledCost cost(fallback, parse_profile_table(kProfile, "p.json"));
  const LayerSpec block = tiny_gqa_swiglu_block();
  // Measured at 1,000 tokens: 2 ms against 1 ms modelled (×2); at 3,000: 9 ms against 3 ms (×3).
  EXPECT_DOUBLE_EQ(cost.layer_cost({&block, Pass::kForward, {1, 1000, 1000000}, {1, false}}).seconds, 0.002);
  EXPECT_DOUBLE_EQ(cost.layer_cost({&block, Pass::kForward, {1, 3000, 9000000}, {1, false}}).seconds, 0.009);
  // Half way: ×2.5 of the modelled 2 ms. Beyond the ends the ratio holds.
  EXPECT_DOUBLE_EQ(cost.layer_cost({&block, Pass::kForward, {2, 2000, 2000000}, {1, false}}).seconds, 0.005);
  EXPECT_DOUBLE_EQ(cost.layer_cost({&block, Pass::kForward, {1, 6000, 36000000}, {1, false}}).seconds, 0.018);
  EXPECT_DOUBLE_EQ(cost.layer_cost({&block, Pass::kForward, {1, 500, 250000}, {1, false}}).seconds, 0.001);
  // Another pass, degree or shape is not profiled: the fallback's.
  EXPECT_DOUBLE_EQ(cost.layer_cost({&block, Pass::kBackwardInput, {1, 1000, 1000000}, {1, false}}).seconds, 0.001);
  EXPECT_DOUBLE_EQ(cost.layer_cost({&block, Pass::kForward, {1, 1000, 1000000}, {2, false}}).seconds, 0.001);
  LayerSpec wider = block;
  wider.ffn = 32;
  EXPECT_DOUBLE_EQ(cost.layer_cost({&wider, Pass::kForward, {1, 1000, 1000000}, {1, false}}).seconds, 0.001);
  // Without a "dtype" key the entry is a bf16 run without context parallelism: fp16, fp8, fp32 and cp 2 work
  // keep the fallback's time.
  const TokenBatch batch{1, 1000, 1000000};
  EXPECT_DOUBLE_EQ(
      cost.layer_cost({&block, Pass::kForward, batch, {1, false}, true, Recompute::kNone, Dtype::kBf16}).seconds,
      0.002);
  for (Dtype other : {Dtype::kFp16, Dtype::kFp8, Dtype::kFp32}) {
    EXPECT_DOUBLE_EQ(cost.layer_cost({&block, Pass::kForward, batch, {1, false}, true, Recompute::kNone, other}).seconds,
                     0.001)
        << dtype_name(other);
  }
  EXPECT_DOUBLE_EQ(cost.layer_cost({&block, Pass::kForward, batch, {1, false, 2}}).seconds, 0.001);
}

// A fallback with a quadratic (attention-like) part: 1 µs per token plus 1 ns per token².
class LinearPlusQuadratic : public CostModel {
 public:
  LayerCost layer_cost(const LayerWork& w) const override {
    const double s = 1e-6 * static_cast<double>(w.batch.tokens) + 1e-9 * static_cast<double>(w.batch.tokens_squared);
    return {s, 0, {Kernel{"all", Kernel::Kind::kCompute, 0, 0, 0, s}}};
  }
};

// An encoder measured on whole tiles (640 tokens as 10 tiles of 64) compares its time with the modelled time of
// those 10 sequences, not of one sequence of 640, whose attention would be ten times larger.
TEST(ProfiledCost, SequenceTokensSetsHowTheMeasuredTokensWereSplit) {
  const LinearPlusQuadratic fallback;
  const LayerSpec block = tiny_gqa_swiglu_block();
  const std::string entry = R"({"layer": "transformer", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1,
    "head_dim": 4, "mlp": "swiglu", "pass": "forward", "tokens": [640], "seconds": [0.01])";
  const ProfiledCost tiles(fallback, parse_profile_table(
      R"({"fulcrum_profile": 1, "entries": [)" + entry + R"(, "sequence_tokens": 64}]})", "p.json"));
  const ProfiledCost whole(fallback, parse_profile_table(R"({"fulcrum_profile": 1, "entries": [)" + entry + "}]}",
                                                         "p.json"));
  const LayerWork ten_tiles{&block, Pass::kForward, {10, 640, 640 * 64}, {1, false}};
  // The measured work itself gets the measured time.
  EXPECT_DOUBLE_EQ(tiles.layer_cost(ten_tiles).seconds, 0.01);
  // Read as one sequence of 640 (modelled 0.64 + 0.4096 ms), the ratio is smaller and the same tiles cost less:
  // 0.01 × (0.64 + 0.04096) / (0.64 + 0.4096).
  EXPECT_NEAR(whole.layer_cost(ten_tiles).seconds, 0.01 * 0.68096 / 1.0496, 1e-12);
  // Twenty tiles of 64 at the held ratio: twice the time.
  EXPECT_DOUBLE_EQ(tiles.layer_cost({&block, Pass::kForward, {20, 1280, 1280 * 64}, {1, false}}).seconds, 0.02);
  EXPECT_THAT([&] { parse_profile_table(R"({"fulcrum_profile": 1, "entries": [)" + entry +
                                        R"(, "sequence_tokens": -1}]})", "p.json"); },
              ::testing::ThrowsMessage<InputError>(
                  ::testing::HasSubstr("p.json: entry 0: sequence_tokens must be a non-negative integer")));
}

// Two measurements of one layer pass that ran different sequences (an encoder's tiles, an LLM's long sequences
// through a block of the same width) are both read: each prices the work whose sequences are nearest its own.
TEST(ProfiledCost, EntriesOfOnePassThatRanOtherSequencesPriceTheWorkNearestThem) {
  const LinearPlusQuadratic fallback;
  const LayerSpec block = tiny_gqa_swiglu_block();
  const std::string shape = R"({"layer": "transformer", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1,
    "head_dim": 4, "mlp": "swiglu", "pass": "forward", "tokens": [640])";
  for (const bool tiles_first : {true, false}) {
    const std::string tiles = shape + R"(, "seconds": [0.01], "sequence_tokens": 64})";
    const std::string whole = shape + R"(, "seconds": [0.03]})";
    const ProfiledCost both(fallback, parse_profile_table(R"({"fulcrum_profile": 1, "entries": [)" +
                                                              (tiles_first ? tiles + ", " + whole : whole + ", " + tiles) +
                                                              "]}", "p.json"));
    // Ten tiles of 64: the tiles' measurement, 0.01 s.
    EXPECT_DOUBLE_EQ(both.layer_cost({&block, Pass::kForward, {10, 640, 640 * 64}, {1, false}}).seconds, 0.01)
        << tiles_first;
    // One sequence of 640: the whole sequence's, 0.03 s.
    EXPECT_DOUBLE_EQ(both.layer_cost({&block, Pass::kForward, {1, 640, 640 * 640}, {1, false}}).seconds, 0.03)
        << tiles_first;
    // Two sequences of 320 lie nearer 640 than 64 (a factor 2 against 5).
    const LayerWork halves{&block, Pass::kForward, {2, 640, 2 * 320 * 320}, {1, false}};
    EXPECT_EQ(both.layer_cost(halves).seconds,
              ProfiledCost(fallback, parse_profile_table(R"({"fulcrum_profile": 1, "entries": [)" + whole + "]}",
                                                         "p.json"))
                  .layer_cost(halves)
                  .seconds)
        << tiles_first;
  }
}

// A whole backward measured apart from its halves prices a backward that is not split; the halves still price
// the split one, and without a measured whole the halves' measurements add up.
TEST(ProfiledCost, AMeasuredWholeBackwardPricesTheUnsplitPassAlone) {
  const MicrosecondPerToken fallback;
  const std::string halves = R"({"fulcrum_profile": 1, "entries": [
    {"layer": "transformer", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "mlp": "swiglu",
     "pass": "backward_input", "tokens": [1000], "seconds": [0.002]},
    {"layer": "transformer", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "mlp": "swiglu",
     "pass": "backward_weight", "tokens": [1000], "seconds": [0.003]})";
  const LayerSpec block = tiny_gqa_swiglu_block();
  const LayerWork whole{&block, Pass::kBackward, {1, 2000, 4000000}, {1, false}};

  const ProfiledCost split_only(fallback, parse_profile_table(halves + "]}", "p.json"));
  EXPECT_FALSE(split_only.prices_whole_backward());
  const LayerCost joined = split_only.layer_cost(whole);
  EXPECT_DOUBLE_EQ(joined.seconds, 0.004 + 0.006);  // each half ×2 and ×3 over the modelled 2 ms
  EXPECT_EQ(joined.kernels.size(), 2u);
  EXPECT_DOUBLE_EQ(backward_seconds(split_only, whole), 0.01);

  const ProfiledCost measured(fallback, parse_profile_table(halves + R"(,
    {"layer": "transformer", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "mlp": "swiglu",
     "pass": "backward", "tokens": [1000], "seconds": [0.004]}]})", "p.json"));
  EXPECT_TRUE(measured.prices_whole_backward());
  EXPECT_DOUBLE_EQ(measured.layer_cost(whole).seconds, 0.008);  // ×4 over the modelled 2 ms
  EXPECT_DOUBLE_EQ(backward_seconds(measured, whole), 0.008);
  LayerWork half = whole;
  half.pass = Pass::kBackwardWeight;
  EXPECT_DOUBLE_EQ(measured.layer_cost(half).seconds, 0.006);
}

// A CPU profiler measures in fp32: its entries price fp32 work only, and entries of several dtypes for the same
// layer each price their own.
TEST(ProfiledCost, AnEntryAppliesToWorkInItsOwnDtypeOnly) {
  const MicrosecondPerToken fallback;
  const ProfiledCost cost(fallback, parse_profile_table(R"({"fulcrum_profile": 1, "device": "cpu", "entries": [
    {"layer": "transformer", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "mlp": "swiglu",
     "dtype": "fp32", "pass": "forward", "tokens": [1000], "seconds": [0.004]},
    {"layer": "transformer", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "mlp": "swiglu",
     "dtype": "fp16", "pass": "forward", "tokens": [1000], "seconds": [0.003]}]})",
                                                        "cpu.json"));
  const LayerSpec block = tiny_gqa_swiglu_block();
  auto seconds = [&](Dtype dtype) {
    return cost.layer_cost({&block, Pass::kForward, {1, 1000, 1000000}, {1, false}, true, Recompute::kNone, dtype})
        .seconds;
  };
  EXPECT_DOUBLE_EQ(seconds(Dtype::kFp32), 0.004);  // measured ×4 over the modelled 1 ms
  EXPECT_DOUBLE_EQ(seconds(Dtype::kFp16), 0.003);
  EXPECT_DOUBLE_EQ(seconds(Dtype::kBf16), 0.001);  // not measured: the fallback's
  EXPECT_DOUBLE_EQ(seconds(Dtype::kFp8), 0.001);
}

// A fallback whose recomputation is the forward's 1 µs a token when full and a fifth of it when selective.
class SelectiveIsAFifth : public CostModel {
 public:
  LayerCost layer_cost(const LayerWork& w) const override {
    double s = 1e-6 * static_cast<double>(w.batch.tokens);
    if (w.pass == Pass::kRecompute && w.recompute == Recompute::kSelective) s /= 5;
    return {s, 0, {Kernel{"all", Kernel::Kind::kCompute, 0, 0, 0, s}}};
  }
};

// The profiler's recompute pass reruns the whole forward. Selective recomputation keeps the model's share of it:
// the measured ratio (3 ms against 1 ms modelled here) scales the modelled selective rerun, not the whole one.
TEST(ProfiledCost, SelectiveRecomputationScalesItsOwnModelledTimeByTheWholeRerunsRatio) {
  const SelectiveIsAFifth fallback;
  const ProfiledCost cost(fallback, parse_profile_table(R"({"fulcrum_profile": 1, "device": "h100", "entries": [
    {"layer": "transformer", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "mlp": "swiglu",
     "pass": "recompute", "tokens": [1000], "seconds": [0.003]}]})", "p.json"));
  const LayerSpec block = tiny_gqa_swiglu_block();
  const TokenBatch batch{1, 1000, 1000000};
  const auto recompute = [&](Recompute mode) {
    return cost.layer_cost({&block, Pass::kRecompute, batch, {1, false}, true, mode, Dtype::kBf16}).seconds;
  };
  EXPECT_DOUBLE_EQ(recompute(Recompute::kFull), 0.003);
  EXPECT_DOUBLE_EQ(recompute(Recompute::kSelective), 0.003 / 5);
}

TEST(ProfileTable, BadInputNamesFileAndEntry) {
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {"{", "p.json: malformed JSON"},
      {R"({"entries": []})", "p.json: not a Fulcrum profile"},
      {R"({"fulcrum_profile": 2, "entries": []})", "p.json: unsupported profile version 2"},
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "conv", "pass": "forward"}]})", "p.json: entry 0: unknown layer 'conv'"},
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "transformer", "pass": "sideways"}]})",
       "p.json: entry 0: unknown pass 'sideways'"},
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "transformer", "pass": "forward", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "tokens": [2, 1],
          "seconds": [1, 2]}]})", "p.json: entry 0: tokens must increase"},
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "transformer", "pass": "forward", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "tokens": [1],
          "seconds": [1, 2]}]})", "p.json: entry 0: tokens and seconds must have the same length"},
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "transformer", "pass": "forward", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "tokens": [1],
          "seconds": [-1]}]})", "p.json: entry 0: seconds must hold positive numbers"},
      // Times no pass can take: summed, they make an iteration infinite.
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "transformer", "pass": "forward", "hidden": 8, "ffn": 16,
          "heads": 2, "kv_heads": 1, "head_dim": 4, "tokens": [1, 2], "seconds": [1e308, 1e308]}]})",
       "p.json: entry 0: seconds must hold positive numbers up to 1e+06"},
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "transformer", "pass": "forward", "hidden": -8,
          "tokens": [1], "seconds": [1]}]})", "p.json: entry 0: hidden must be a non-negative integer"},
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "transformer", "pass": "forward", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "tokens": [1],
          "seconds": [1]}, {"layer": "transformer", "pass": "forward", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "dtype": "int8", "tokens": [1],
          "seconds": [1]}]})", "p.json: entry 1: unknown dtype 'int8'; known: bf16, fp16, fp8, fp32"},
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "transformer", "pass": "forward", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "dtype": 16,
          "tokens": [1], "seconds": [1]}]})", "p.json: entry 0: dtype must be a string"},
      // A second measurement of the same pass would never be read: the first prices it.
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "transformer", "pass": "forward", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "tokens": [1],
          "seconds": [1]}, {"layer": "transformer", "pass": "backward", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "tokens": [1],
          "seconds": [2]}, {"layer": "transformer", "pass": "forward", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "tokens": [1],
          "seconds": [5]}]})", "p.json: entry 2: measures the same pass of the same layer as entry 0"},
      // Every key is one the format knows: a misspelt one would be dropped and the entry match other layers.
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "transformer", "pass": "forward", "xidden": 8,
          "tokens": [1], "seconds": [1]}]})", "p.json: entry 0: unknown key \"xidden\""},
      // A shape key of another kind is never compared: two entries differing there would both load.
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "lm_head", "pass": "forward", "hidden": 8, "vocab": 64,
          "heads": 2, "tokens": [1], "seconds": [1]}]})", "p.json: entry 0: key \"heads\" does not apply to a lm_head layer"},
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "final_norm", "pass": "forward", "hidden": 8, "ffn": 16,
          "tokens": [1], "seconds": [1]}]})", "p.json: entry 0: key \"ffn\" does not apply to a final_norm layer"},
      // No tensor-parallel degree is 0; before, 0 read as 1.
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "lm_head", "pass": "forward", "hidden": 8, "vocab": 64,
          "tp": 0, "tokens": [1], "seconds": [1]}]})", "p.json: entry 0: tp must be a positive integer"},
      // The keys that shape a layer kind are required: without them it prices a layer of no width.
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "transformer", "pass": "forward", "ffn": 16, "heads": 2,
          "kv_heads": 1, "head_dim": 4, "tokens": [1], "seconds": [1]}]})", "p.json: entry 0: hidden must be a positive integer"},
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "lm_head", "pass": "forward", "hidden": 8, "tokens": [1],
          "seconds": [1]}]})", "p.json: entry 0: vocab must be a positive integer"},
      {R"({"fulcrum_profile": 1, "entries": [{"layer": "transformer", "pass": "forward", "hidden": 8, "ffn": 16,
          "heads": 3, "kv_heads": 2, "head_dim": 4, "tokens": [1], "seconds": [1]}]})",
       "p.json: entry 0: kv_heads (2) must divide heads (3)"},
  };
  for (const auto& c : cases) {
    try {
      parse_profile_table(c.text, "p.json");
      ADD_FAILURE() << "accepted " << c.text;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), ::testing::StartsWith(c.message)) << c.text;
    }
  }
}

}  // namespace
}  // namespace fulcrum

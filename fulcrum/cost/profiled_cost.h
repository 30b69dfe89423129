#ifndef FULCRUM_COST_PROFILED_COST_H_
#define FULCRUM_COST_PROFILED_COST_H_

#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/cost/cost_model.h"

namespace fulcrum {

// Measured times of layer passes: for a layer shape, a tensor-parallel degree, a number format and a pass, the
// seconds of one sequence of each of several token counts. A profiler writes it; imports of torch.profiler
// traces and nccl-tests output will feed it. Versioned JSON:
//   {"fulcrum_profile": 1, "device": "h100", "entries": [
//     {"layer": "transformer", "hidden": 4096, "ffn": 11008, "heads": 32, "kv_heads": 32, "head_dim": 128,
//      "mlp": "swiglu", "window_tokens": 0, "tp": 1, "sequence_parallel": false, "dtype": "bf16",
//      "pass": "forward", "tokens": [1024, 2048, 4096], "seconds": [0.0011, 0.0021, 0.0043]}]}
// Passes: forward, backward_input, backward_weight, recompute, and backward: the input and weight gradients in
// one pass, for a runtime whose split halves cost more together than the whole (absent, the halves' sum).
// Non-transformer layers give only the keys that
// shape them ("layer": "lm_head", "hidden", "vocab"). "dtype" is the number format the run computed in: bf16
// (the default, what files without the key were measured in), fp16, fp8 or fp32. An entry applies only to
// work in exactly its dtype: bf16 and fp16 share a tensor-core rate on GPUs, but not on CPUs (most have bf16
// but no fp16 arithmetic), so a measurement of one says nothing reliable about the other. Entries are runs
// without context parallelism; they do not apply to context-parallel work. "sequence_tokens" (optional): the
// measurement at t tokens ran t / sequence_tokens sequences of sequence_tokens each (an encoder's tiles); absent
// or 0, one sequence of t.
struct ProfileEntry {
  LayerKind kind = LayerKind::kTransformerBlock;
  int64_t hidden = 0, ffn = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, in_features = 0;
  MlpKind mlp = MlpKind::kGelu;
  int64_t window_tokens = 0;
  int tp = 1;
  bool sequence_parallel = false;
  Dtype dtype = Dtype::kBf16;
  Pass pass = Pass::kForward;
  int64_t sequence_tokens = 0;  // tokens per measured sequence; 0: one sequence of each token count
  std::vector<double> tokens;   // increasing
  std::vector<double> seconds;  // measured, one per token count

  bool matches(const LayerSpec& layer, const LayerWork& work) const;
};

struct ProfileTable {
  std::string device;
  std::vector<ProfileEntry> entries;

  bool has_whole_backward = false;  // some entry measured a layer's whole backward ("backward")

  // The entry that prices the work, or -1: of those matching its layer pass (whatever its token count), the one
  // whose measured sequences are nearest the work's mean sequence length, the first of equals.
  int entry_for(const LayerWork& work) const;
};

// Throws InputError naming `file` and the entry for malformed input.
ProfileTable parse_profile_table(std::string_view text, const std::string& file);

// A CostModel that trusts measurements where it has them. For a profiled layer pass, the fallback's time for
// the same work is scaled by measured / fallback at the measured token counts (interpolated linearly in
// tokens, held constant beyond the ends), so packing, recomputation and the kernel split keep the fallback's
// shape while the total follows the measurements. Unprofiled work is the fallback's.
class ProfiledCost : public CostModel {
 public:
  ProfiledCost(const CostModel& fallback, ProfileTable table);
  LayerCost layer_cost(const LayerWork& work) const override;
  bool prices_whole_backward() const override { return table_.has_whole_backward || fallback_.prices_whole_backward(); }

 private:
  const CostModel& fallback_;
  ProfileTable table_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COST_PROFILED_COST_H_

#ifndef FULCRUM_COST_LAYER_FLOPS_H_
#define FULCRUM_COST_LAYER_FLOPS_H_

#include <cstdint>
#include <string_view>

#include "fulcrum/model/model_spec.h"

namespace fulcrum {

// The passes a layer runs in training. Backward splits into the input gradient (what the previous layer waits
// for) and the weight gradient (which can be deferred, as zero-bubble schedules do); kBackward is both in one
// pass, as a schedule without the split runs them. Its FLOPs are the halves' sum, but a runtime may take longer
// for the halves apart than together (PyTorch's split backward walks the graph twice), which a profile shows.
enum class Pass { kForward, kBackwardInput, kBackwardWeight, kRecompute, kBackward };

// How much of a layer's forward is run again in the backward pass to save activation memory.
enum class Recompute { kNone, kSelective, kFull };
std::string_view recompute_name(Recompute mode);  // "none", "selective", "full"
// The mode of that name; InputError naming `what` (an option, a field) otherwise.
Recompute parse_recompute(std::string_view name, std::string_view what);

// The tokens one layer processes for a packed micro-batch: `sequences` variable-length sequences whose
// lengths t sum to `tokens` and whose squares sum to `tokens_squared` (attention cost).
struct TokenBatch {
  int64_t sequences = 0;
  int64_t tokens = 0;
  int64_t tokens_squared = 0;
};

// FLOPs of one layer for one pass over a micro-batch, the whole layer (tensor parallelism divides it later).
// A multiply-add is 2 FLOPs. Attention (scores and the weighted sum) counts 4·Σt²·(heads·head_dim) forward,
// without halving for causal masks, as Megatron-LM's MFU formula does; a windowed block counts
// 4·Σt·min(t, w)·(heads·head_dim), taken as 4·tokens·w when sequences are longer than the window. Backward
// for the input costs the forward's matmuls and twice its attention; backward for the weights costs the
// forward's matmuls (none for a frozen layer: the caller passes `trainable`). Recompute: full reruns the
// forward, selective reruns only the attention core. Embedding lookups and norms count no FLOPs.
struct LayerFlops {
  double matmul = 0;     // dense matmuls of the pass
  double attention = 0;  // scores and weighted sums of the pass
  double total() const { return matmul + attention; }
};
LayerFlops layer_flops(const LayerSpec& layer, Pass pass, const TokenBatch& batch, bool trainable = true,
                       Recompute recompute = Recompute::kFull);

// The two conventions reported side by side: model FLOPs count forward + both backward passes, never a
// recomputation (Megatron-LM's MFU); hardware FLOPs add what `recompute` reruns.
double model_flops(const LayerSpec& layer, const TokenBatch& batch, bool trainable = true);
double hardware_flops(const LayerSpec& layer, const TokenBatch& batch, Recompute recompute, bool trainable = true);

}  // namespace fulcrum

#endif  // FULCRUM_COST_LAYER_FLOPS_H_

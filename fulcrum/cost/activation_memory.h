#ifndef FULCRUM_COST_ACTIVATION_MEMORY_H_
#define FULCRUM_COST_ACTIVATION_MEMORY_H_

#include "fulcrum/cost/layer_flops.h"
#include "fulcrum/model/model_spec.h"

namespace fulcrum {

// How a layer is sharded: tensor parallelism over `tp` devices, with or without sequence parallelism (which
// also splits the norms and dropouts along the sequence).
struct TensorSharding {
  int tp = 1;
  bool sequence_parallel = false;
};

// Bytes a transformer block keeps from its forward for its backward, on one device, in 16-bit activations,
// following Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"), §4,
// generalised to grouped-query attention, any MLP width and packed sequences (s·b → Σt, a·s²·b → a·Σt²):
//   attention  2Th (QKV input) + 2T·q (Q) + 4T·kv (K, V) + 2T·q (output projection input) + Th (dropout mask)
//              + 5·a·Σt² (scores 2, softmax dropout mask 1, its output 2; windowed: Σt·w)
//   MLP        2Th (input) + 4Tf (GELU input and output) or 6Tf (SwiGLU gate, up, product) + Th (dropout mask)
//   norms      4Th
// which for multi-head attention and a 4h GELU MLP is Korthikanti's sbh·(34 + 5as/h). Inside the tensor-
// parallel region everything divides by tp; the norm inputs, the QKV and MLP inputs and the dropout masks
// (10Th) divide by tp only with sequence parallelism. Selective recomputation drops the 5·a·Σt² term; full
// recomputation keeps only the block's input (2Th, divided by tp with sequence parallelism). `dropout` false
// leaves out the masks (2Th and a·Σt²), as models trained without dropout (LLaMA, InternVL) do.
double activation_bytes(const LayerSpec& layer, const TokenBatch& batch, const TensorSharding& sharding,
                        Recompute recompute, bool dropout = false);

}  // namespace fulcrum

#endif  // FULCRUM_COST_ACTIVATION_MEMORY_H_

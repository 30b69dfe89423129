#ifndef FULCRUM_COST_ACTIVATION_MEMORY_H_
#define FULCRUM_COST_ACTIVATION_MEMORY_H_

#include "fulcrum/cost/dtype.h"
#include "fulcrum/cost/layer_flops.h"
#include "fulcrum/model/model_spec.h"

namespace fulcrum {

// How a layer is sharded: tensor parallelism over `tp` devices, with or without sequence parallelism (which
// also splits the norms and dropouts along the sequence), and context parallelism over `cp` devices
// (Megatron-LM's context_parallel_size: each device holds T/cp of the micro-batch's tokens for every layer and
// the queries' share of attention; key/value blocks travel around a ring of the cp devices).
struct TensorSharding {
  int tp = 1;
  bool sequence_parallel = false;
  int cp = 1;
  // A tensor- (or context-) parallel group of at most a node's devices placed across a node boundary: its
  // collectives run at the network's rate, not NVLink's (a multitask slice placed where no block of a node was
  // free).
  bool across_nodes = false;
};

// Bytes a transformer block keeps from its forward for its backward, on one device, following Korthikanti et
// al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"), §4, generalised to grouped-query
// attention, any MLP width and packed sequences (s·b → Σt, a·s²·b → a·Σt²). In 16-bit activations:
//   attention  2Th (QKV input) + 2T·q (Q) + 4T·kv (K, V) + 2T·q (output projection input) + Th (dropout mask)
//              + 5·a·Σt² (scores 2, softmax dropout mask 1, its output 2; windowed: Σt·w)
//   MLP        2Th (input) + 4Tf (GELU input and output) or 6Tf (SwiGLU gate, up, product) + Th (dropout mask)
//   norms      4Th
// which for multi-head attention and a 4h GELU MLP is Korthikanti's sbh·(34 + 5as/h). Inside the tensor-
// parallel region everything divides by tp; the norm inputs, the QKV and MLP inputs and the dropout masks
// (10Th) divide by tp only with sequence parallelism. Context parallelism divides every term by cp: T and
// the attention pairs Σt² are split over the cp devices, and only the local key/value block is kept (the
// backward pass circulates the others again). Selective recomputation drops the a·Σt² term; full
// recomputation keeps only the block's input (2Th, divided by tp with sequence parallelism). `dropout` false
// leaves out the masks (2Th and a·Σt²), as models trained without dropout (LLaMA, InternVL) do.
// `dtype` sets the element size (dtype.h): fp32 doubles every 2-byte term; fp8 stores the four matmul inputs
// (QKV input, output projection input, MLP input, the second MLP linear's input) in 1 byte and keeps the rest
// 16-bit. Masks are 1 byte in every dtype.
double activation_bytes(const LayerSpec& layer, const TokenBatch& batch, const TensorSharding& sharding,
                        Recompute recompute, bool dropout = false, Dtype dtype = Dtype::kBf16);

}  // namespace fulcrum

#endif  // FULCRUM_COST_ACTIVATION_MEMORY_H_

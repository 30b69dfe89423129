#ifndef FULCRUM_MODEL_TEST_LAYERS_H_
#define FULCRUM_MODEL_TEST_LAYERS_H_

#include "fulcrum/model/model_spec.h"

namespace fulcrum {

// Layers whose numbers tests work out by hand.

// GPT-3 175B's block: hidden 12288, 96 heads of 128, GELU MLP 4h, no biases.
LayerSpec gpt3_block();

// A tiny block: hidden 8, 2 query heads and 1 key/value head of 4, SwiGLU MLP 16, RMSNorm, no biases.
LayerSpec tiny_gqa_swiglu_block();

}  // namespace fulcrum

#endif  // FULCRUM_MODEL_TEST_LAYERS_H_

#ifndef FULCRUM_PLAN_DEPENDENCY_POINTS_H_
#define FULCRUM_PLAN_DEPENDENCY_POINTS_H_

#include <vector>

#include "fulcrum/sim/simulator.h"

namespace fulcrum {

// Where an LLM pipeline meets its encoders (Optimus, reference/optimus.md §6), from the simulated timeline of the
// LLM alone: for LLM micro-batch i, F_i is when the first LLM stage starts its forward (the encoder's activations
// must be there) and B_i when it finishes the backward that yields the gradients of its input (the whole backward,
// or the input-gradient half of a split one): the encoder's backward of micro-batch i may start then.
struct DependencyPoints {
  std::vector<double> forward_seconds;   // F_i
  std::vector<double> backward_seconds;  // B_i
};

// From `llm`, simulated with SimOptions::timeline, for its `micro_batches` micro-batches. InputError when the
// timeline does not hold every micro-batch's first-stage forward and backward.
DependencyPoints dependency_points(const SimResult& llm, int micro_batches);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_DEPENDENCY_POINTS_H_

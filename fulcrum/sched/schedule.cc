#include "fulcrum/sched/schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "fulcrum/core/error.h"

namespace fulcrum {

std::string_view op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kForward: return "forward";
    case OpKind::kBackward: return "backward";
    case OpKind::kBackwardInput: return "backward_input";
    case OpKind::kBackwardWeight: return "backward_weight";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kCollective: return "collective";
    case OpKind::kEncoderKernels: return "encoder_kernels";
    case OpKind::kWaveBoundary: return "wave_boundary";
    case OpKind::kAllocate: return "allocate";
    case OpKind::kFree: return "free";
  }
  return "?";
}

std::string_view payload_name(Payload payload) {
  return payload == Payload::kActivation ? "activation" : "gradient";
}

std::string_view collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllGather: return "all_gather";
  }
  return "?";
}

std::string_view device_group_name(DeviceGroup group) {
  return group == DeviceGroup::kData ? "data" : group == DeviceGroup::kEncoderData ? "encoder_data" : "sync";
}

std::string_view collective_tensor_name(CollectiveTensor tensor) {
  return tensor == CollectiveTensor::kGradients ? "gradients" : "parameters";
}

bool is_compute(OpKind kind) {
  return kind == OpKind::kForward || kind == OpKind::kBackward || kind == OpKind::kBackwardInput ||
         kind == OpKind::kBackwardWeight;
}

std::string_view pipeline_kind_name(PipelineKind kind) {
  switch (kind) {
    case PipelineKind::kGpipe: return "gpipe";
    case PipelineKind::kOneFOneB: return "1f1b";
    case PipelineKind::kInterleaved: return "interleaved";
    case PipelineKind::kZeroBubbleH1: return "zb-h1";
    case PipelineKind::kCustom: return "custom";
  }
  return "?";
}

PipelineKind parse_pipeline_kind(std::string_view name) {
  for (PipelineKind k : {PipelineKind::kGpipe, PipelineKind::kOneFOneB, PipelineKind::kInterleaved,
                         PipelineKind::kZeroBubbleH1, PipelineKind::kCustom}) {
    if (pipeline_kind_name(k) == name) return k;
  }
  throw InputError(fmt::format("unknown pipeline schedule '{}': use gpipe, 1f1b, interleaved or zb-h1", name));
}

int64_t Schedule::instruction_count() const {
  int64_t n = 0;
  for (const Program& p : programs) n += static_cast<int64_t>(p.instructions.size());
  return n;
}

int Schedule::stage_of_layer(int64_t layer) const {
  for (size_t s = 0; s < stages.size(); ++s) {
    if (layer >= stages[s].first_layer && layer < stages[s].end_layer) return static_cast<int>(s);
  }
  return -1;
}

int32_t first_llm_layer(const Schedule& schedule) {
  return schedule.stages.empty() ? 0 : schedule.stages.front().first_layer;
}

std::vector<int> max_micro_batches_in_flight(const Schedule& schedule) {
  std::vector<int> now(schedule.stages.size(), 0), most(schedule.stages.size(), 0);
  for (const Program& p : schedule.programs) {
    for (const Instruction& in : p.instructions) {
      if (in.encoder_pipeline >= 0 || in.stage < 0 || static_cast<size_t>(in.stage) >= now.size()) continue;
      if (in.op == OpKind::kForward) {
        most[in.stage] = std::max(most[in.stage], ++now[in.stage]);
      } else if (in.op == OpKind::kBackward || in.op == OpKind::kBackwardInput) {
        --now[in.stage];
      }
    }
  }
  return most;
}

}  // namespace fulcrum

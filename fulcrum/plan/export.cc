#include "fulcrum/plan/export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

// "ttt" → "t*3"; other strings as they are.
std::string compress_symbols(const std::string& stage) {
  std::string out;
  for (size_t i = 0; i < stage.size();) {
    size_t j = i;
    while (j < stage.size() && stage[j] == stage[i]) ++j;
    out += j - i > 2 ? fmt::format("{}*{}", stage[i], j - i) : stage.substr(i, j - i);
    i = j;
  }
  return out;
}

}  // namespace

std::string megatron_pipeline_layout(const ModelSpec& model, const Schedule& schedule) {
  // The symbol of each flattened layer; 0 for layers the layout has no symbol for.
  std::vector<char> symbol;
  for (const ComponentSpec& c : model.components) {
    for (const LayerSpec& l : c.layers) {
      char s = 0;
      if (c.role == ComponentRole::kLlm) {
        if (l.kind == LayerKind::kTokenEmbedding) s = 'E';
        if (l.kind == LayerKind::kTransformerBlock) s = 't';
        if (l.kind == LayerKind::kLmHead) s = 'L';
      }
      symbol.push_back(s);
    }
  }
  std::vector<std::string> stages;
  for (size_t k = 0; k < schedule.stages.size(); ++k) {
    std::string stage;
    for (int32_t i = schedule.stages[k].first_layer; i < schedule.stages[k].end_layer; ++i) {
      if (symbol[i]) stage += symbol[i];
    }
    if (stage.empty()) {
      throw InputError(fmt::format("stage {} holds only encoder layers, which Megatron-LM's pipeline layout has no "
                                   "symbol for (an empty stage there deadlocks)", k));
    }
    stages.push_back(compress_symbols(stage));
  }
  // Runs of equal stages as "(stage|)*n"; the last stage of a run closes with '|' inside the group.
  std::string out;
  for (size_t i = 0; i < stages.size();) {
    size_t j = i;
    while (j < stages.size() && stages[j] == stages[i]) ++j;
    const bool last = j == stages.size();
    if (j - i >= 2 && !last) {
      out += fmt::format("({}|)*{}", stages[i], j - i);
    } else if (j - i >= 2) {
      out += fmt::format("({}|)*{},{}", stages[i], j - i - 1, stages[i]);
    } else {
      out += stages[i] + (last ? "" : "|");
    }
    i = j;
  }
  return out;
}

namespace {

// A recursive-descent expansion: part+ where part is SYM ['*' INT] | '(' part+ ')' '*' INT | '|' | ','.
class LayoutParser {
 public:
  explicit LayoutParser(const std::string& text) : text_(text) {}

  std::string expand() {
    std::string out = parts(false);
    if (pos_ != text_.size()) fail("unexpected ')'");
    return out;
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw InputError(fmt::format("pipeline layout '{}': {} at character {}", text_, what, pos_));
  }

  int64_t repeat() {
    if (pos_ >= text_.size() || text_[pos_] != '*') return 1;
    ++pos_;
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (start == pos_ || pos_ - start > 6) fail("expected a count after '*'");
    return std::stoll(text_.substr(start, pos_ - start));
  }

  std::string parts(bool in_group) {
    std::string out;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ')') {
        if (!in_group) fail("unexpected ')'");
        return out;
      }
      ++pos_;
      if (c == '|' || c == ',') {
        if (c == '|') out += '|';
        continue;
      }
      std::string unit;
      if (c == '(') {
        unit = parts(true);
        if (pos_ >= text_.size() || text_[pos_] != ')') fail("missing ')'");
        ++pos_;
        if (pos_ >= text_.size() || text_[pos_] != '*') fail("a group needs '*count'");
      } else if (c == 'E' || c == 't' || c == 'm' || c == 'L') {
        unit = std::string(1, c);
      } else {
        fail("unknown symbol");
      }
      const int64_t n = repeat();
      if (static_cast<double>(out.size()) + static_cast<double>(unit.size()) * static_cast<double>(n) > 1e6) {
        fail("expands past a million symbols");
      }
      for (int64_t k = 0; k < n; ++k) out += unit;
    }
    if (in_group) fail("missing ')'");
    return out;
  }

  const std::string& text_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<std::string> expand_pipeline_layout(const std::string& layout) {
  const std::string flat = LayoutParser(layout).expand();
  std::vector<std::string> stages{""};
  for (char c : flat) {
    if (c == '|') {
      stages.emplace_back();
    } else {
      stages.back() += c;
    }
  }
  return stages;
}

std::string megatron_arguments(const ModelSpec& model, const TrainingPlan& plan, int64_t gbs) {
  const ParallelConfig& c = plan.config;
  std::string args = fmt::format("--tensor-model-parallel-size {} --pipeline-model-parallel-size {}", c.tp, c.pp);
  args += fmt::format(" --micro-batch-size {} --global-batch-size {}", c.mbs, gbs);
  if (c.sequence_parallel) args += " --sequence-parallel";
  // State sharding: the distributed optimizer shards the optimizer state (ZeRO-1); sharding the gradients, and
  // the parameters too, takes Megatron-FSDP, whose documented flags these are.
  switch (c.sharding) {
    case StateSharding::kZero0: break;
    case StateSharding::kZero1:
    case StateSharding::kMegatronDistributedOptimizer: args += " --use-distributed-optimizer"; break;
    case StateSharding::kZero2:
    case StateSharding::kZero3:
      args += fmt::format(
          " --use-megatron-fsdp --data-parallel-sharding-strategy {} --no-gradient-accumulation-fusion"
          " --use-distributed-optimizer",
          c.sharding == StateSharding::kZero2 ? "optim_grads" : "optim_grads_params");
      break;
  }
  // Megatron checks the layout's 't' against --num-layers, and ties the LM head to the embedding unless told.
  int64_t llm_blocks = 0;
  bool untied_head = false;
  for (const ComponentSpec& comp : model.components) {
    if (comp.role != ComponentRole::kLlm) continue;
    for (const LayerSpec& l : comp.layers) {
      llm_blocks += l.kind == LayerKind::kTransformerBlock;
      untied_head = untied_head || (l.kind == LayerKind::kLmHead && !l.tied_to_embedding);
    }
  }
  args += fmt::format(" --num-layers {}", llm_blocks);
  if (untied_head) args += " --untie-embeddings-and-output-weights";
  args += fmt::format(" --pipeline-model-parallel-layout \"{}\"", megatron_pipeline_layout(model, plan.schedule));
  std::string notes;
  if (c.pp > 1 && c.schedule != PipelineKind::kOneFOneB && c.schedule != PipelineKind::kInterleaved) {
    notes += fmt::format("# the plan's pipeline schedule is {}; Megatron-LM runs 1F1B (interleaved with more than one "
                         "chunk a rank), whose step the plan did not time\n",
                         pipeline_kind_name(c.schedule));
  }
  // Recomputation of the LLM's transformer blocks (the layout's 't'): the same for every block, or per stage.
  // Megatron recomputes the first N blocks of every chunk fully, one N per process: a selectively recomputed block
  // is recomputed fully (never more memory than planned), and each pipeline rank takes the most of its chunks.
  // The encoders' blocks are counted apart: Megatron configures its vision model on its own.
  const Schedule& s = plan.schedule;
  std::vector<bool> llm_block, encoder_block;
  for (const ComponentSpec& comp : model.components) {
    for (const LayerSpec& l : comp.layers) {
      const bool is_block = l.kind == LayerKind::kTransformerBlock;
      llm_block.push_back(is_block && comp.role == ComponentRole::kLlm);
      encoder_block.push_back(is_block && comp.role != ComponentRole::kLlm);
    }
  }
  std::vector<int64_t> per_rank(c.pp, 0);
  bool any_full = false, any_selective = false, any_none = false;
  int64_t encoder_blocks = 0, encoder_full = 0, encoder_selective = 0;
  for (size_t k = 0; k < s.stages.size(); ++k) {
    int64_t recomputed = 0;
    for (int32_t i = s.stages[k].first_layer; i < s.stages[k].end_layer; ++i) {
      if (encoder_block[i]) {
        ++encoder_blocks;
        encoder_full += s.recompute[i] == Recompute::kFull;
        encoder_selective += s.recompute[i] == Recompute::kSelective;
      }
      if (!llm_block[i]) continue;
      any_full = any_full || s.recompute[i] == Recompute::kFull;
      any_selective = any_selective || s.recompute[i] == Recompute::kSelective;
      any_none = any_none || s.recompute[i] == Recompute::kNone;
      if (s.recompute[i] != Recompute::kNone) ++recomputed;
    }
    const int rank = static_cast<int>(k) % c.pp;
    per_rank[rank] = std::max(per_rank[rank], recomputed);
  }
  if (any_full && !any_selective && !any_none) {
    args += " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  } else if (any_selective && !any_full) {
    // Megatron's selective recomputation covers every block: the blocks the plan keeps whole are recomputed
    // selectively too (the attention core: more time than planned, never more memory).
    args += " --recompute-granularity selective";
    if (any_none) {
      int64_t kept = 0;
      for (size_t i = 0; i < llm_block.size(); ++i) kept += llm_block[i] && s.recompute[i] == Recompute::kNone;
      notes += fmt::format("# {} LLM block{} the plan does not recompute {} recomputed selectively too (Megatron "
                           "takes one recomputation for every block)\n", kept, kept == 1 ? "" : "s",
                           kept == 1 ? "is" : "are");
    }
  } else if (any_full || any_selective) {
    if (any_selective) {
      int64_t selective = 0;
      for (size_t i = 0; i < llm_block.size(); ++i) selective += llm_block[i] && s.recompute[i] == Recompute::kSelective;
      notes += fmt::format("# {} LLM block{} the plan recomputes selectively {} counted as fully recomputed "
                           "(Megatron takes one recomputation granularity: more time than planned, never more "
                           "memory)\n", selective, selective == 1 ? "" : "s", selective == 1 ? "is" : "are");
    }
    const int64_t most = *std::max_element(per_rank.begin(), per_rank.end());
    args += fmt::format(" --recompute-granularity full --recompute-method block --recompute-num-layers {}", most);
    notes += fmt::format("# LLM blocks to recompute per pipeline rank: {}; set args.recompute_num_layers =\n"
                         "# fulcrum.megatron.recompute_num_layers(plan, pipeline_rank) per rank (plan: fulcrum plan "
                         "--out) to save the rest\n", fmt::join(per_rank, ","));
  }
  if (encoder_full + encoder_selective > 0) {
    notes += fmt::format("# encoder blocks recomputed: {} fully and {} selectively of {} (the vision model's own "
                         "recomputation settings)\n", encoder_full, encoder_selective, encoder_blocks);
  }
  int64_t encoder_layers = 0;
  for (const ComponentSpec& comp : model.components) {
    if (comp.role != ComponentRole::kLlm) encoder_layers += static_cast<int64_t>(comp.layers.size());
  }
  if (encoder_layers > 0) {
    notes += fmt::format("# encoders and projectors ({} layers) run in the first stage, before its LLM layers\n",
                         encoder_layers);
    if (c.encoder_tp != c.tp) {
      notes += fmt::format("# encoder tensor parallelism: {} (its heads do not divide by {})\n", c.encoder_tp, c.tp);
    }
  }
  return notes + args + "\n";
}

std::string deepspeed_partition(const TrainingPlan& plan) {
  const ParallelConfig& c = plan.config;
  if (c.vpp != 1) {
    throw InputError(fmt::format("DeepSpeed's PipelineModule has no interleaving, but the plan has {} model chunks "
                                 "per rank: export it for Megatron-LM, or plan with one chunk", c.vpp));
  }
  int zero_stage = 1;
  switch (c.sharding) {
    case StateSharding::kZero0: zero_stage = 0; break;
    case StateSharding::kZero1:
    case StateSharding::kMegatronDistributedOptimizer: zero_stage = 1; break;
    case StateSharding::kZero2: zero_stage = 2; break;
    case StateSharding::kZero3: zero_stage = 3; break;
  }
  if (c.pp > 1 && zero_stage >= 2) {
    throw InputError(fmt::format("DeepSpeed's pipeline engine runs ZeRO stage 0 or 1, but the plan shards its "
                                 "gradients over {} pipeline stages (ZeRO-{}): export it for Megatron-LM",
                                 c.pp, zero_stage));
  }
  // What the engine's configuration carries, and in comments what DeepSpeed cannot: the plan's own schedule,
  // tensor parallelism (Megatron-DeepSpeed's layers), per-block recomputation, varying micro-batches.
  std::string notes = fmt::format(
      "# Fulcrum's plan: DP {} × TP {} × PP {}, {} micro-batches of {} samples a step per replica. ds_config:\n"
      "#   \"train_micro_batch_size_per_gpu\": {}, \"gradient_accumulation_steps\": {}, "
      "\"zero_optimization\": {{\"stage\": {}}}\n",
      c.dp, c.tp, c.pp, plan.micro_batches, c.mbs, c.mbs, plan.micro_batches, zero_stage);
  if (plan.batcher != "random") {
    notes += fmt::format("# the plan's {} batches vary the samples of a micro-batch around {} (fulcrum.sampler "
                         "makes them); its times are for those batches\n", plan.batcher, c.mbs);
  }
  if (c.pp > 1 && c.schedule != PipelineKind::kOneFOneB) {
    notes += fmt::format("# the plan's pipeline schedule is {}; DeepSpeed runs its own 1F1B (TrainSchedule), whose "
                         "step the plan did not time\n", pipeline_kind_name(c.schedule));
  }
  if (c.tp > 1) {
    notes += fmt::format("# tensor parallelism {}{}: DeepSpeed takes it from a PipeModelDataParallelTopology(num_pp={}, "
                         "num_mp={}, num_dp={}) and model-parallel layers (Megatron-DeepSpeed's)\n",
                         c.tp, c.sequence_parallel ? " with sequence parallelism" : "", c.pp, c.tp, c.dp);
  }
  int64_t full = 0, selective = 0;
  for (const Recompute r : plan.schedule.recompute) {
    full += r == Recompute::kFull;
    selective += r == Recompute::kSelective;
  }
  if (full + selective > 0) {
    notes += fmt::format("# recomputation: {} layers fully and {} selectively of {}; PipelineModule's "
                         "activation_checkpoint_interval recomputes every layer between checkpoints fully{}\n",
                         full, selective, plan.schedule.recompute.size(),
                         full == static_cast<int64_t>(plan.schedule.recompute.size())
                             ? " (interval 1: as planned)"
                             : ", so the plan's choice per layer needs the layers' own checkpointing");
  }
  if (c.pp == 1) {
    return notes + "# one pipeline stage: no PipelineModule, the model as it is under the engine\n";
  }
  std::vector<int32_t> parts{0};
  for (const StageLayers& st : plan.schedule.stages) parts.push_back(st.end_layer);
  return notes + fmt::format(
      "# Fulcrum's stage boundaries over the PipelineModule's layer list (the flattened model: encoders,\n"
      "# projectors, then the LLM's embedding, blocks, final norm and head); stage s holds [parts[s], parts[s+1]).\n"
      "from deepspeed.pipe import PipelineModule\n\n"
      "FULCRUM_PARTS = [{}]\n\n\n"
      "class FulcrumPipelineModule(PipelineModule):\n"
      "    def _partition_layers(self, method=\"fulcrum\"):\n"
      "        stages = self._topo.get_dim(\"pipe\")\n"
      "        stage_id = self._topo.get_coord(self.global_rank).pipe\n"
      "        if len(FULCRUM_PARTS) != stages + 1 or FULCRUM_PARTS[-1] != len(self._layer_specs):\n"
      "            raise ValueError(\"the plan's partition does not match this pipeline\")\n"
      "        self.parts = list(FULCRUM_PARTS)\n"
      "        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])\n",
      fmt::join(parts, ", "));
}

}  // namespace fulcrum

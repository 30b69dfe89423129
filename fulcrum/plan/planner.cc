#include "fulcrum/plan/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <exception>
#include <mutex>
#include <numeric>
#include <optional>
#include <system_error>
#include <thread>
#include <tuple>

#include "fulcrum/core/error.h"
#include "fulcrum/core/progress.h"
#include "fulcrum/cost/activation_memory.h"
#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/collective_cost.h"
#include "fulcrum/cost/model_sample_cost.h"
#include "fulcrum/data/balance_metrics.h"
#include "fulcrum/data/batcher.h"
#include "fulcrum/data/isf.h"
#include "fulcrum/data/isf_search.h"
#include "fulcrum/plan/optimus_schedule.h"
#include "fulcrum/plan/partition.h"
#include "fulcrum/plan/recompute.h"
#include "fulcrum/sched/pipeline_schedules.h"
#include "fulcrum/sched/validate.h"

namespace fulcrum {

std::string_view strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::kZero3: return "zero3";
    case Strategy::kMegatron: return "megatron";
    case Strategy::kBalanced: return "balanced";
    case Strategy::kOmnibal: return "omnibal";
    case Strategy::kOptimus: return "optimus";
    case Strategy::kFulcrum: return "fulcrum";
  }
  return "?";
}

Strategy parse_strategy(std::string_view name) {
  for (Strategy s : {Strategy::kZero3, Strategy::kMegatron, Strategy::kBalanced, Strategy::kOmnibal,
                     Strategy::kOptimus, Strategy::kFulcrum}) {
    if (strategy_name(s) == name) return s;
  }
  throw InputError(
      fmt::format("unknown strategy '{}': use zero3, megatron, balanced, omnibal, optimus or fulcrum", name));
}

EncoderSite parse_encoder_site(std::string_view name) {
  if (name == "best") return EncoderSite::kBest;
  if (name == "stages") return EncoderSite::kStages;
  if (name == "bubbles") return EncoderSite::kBubbles;
  throw InputError(fmt::format("unknown encoder placement '{}': use best, stages or bubbles", name));
}

Recipe recipe_of(Strategy strategy) {
  Recipe r;
  r.name = std::string(strategy_name(strategy));
  switch (strategy) {
    case Strategy::kZero3:
      r.zero3_data_parallel = true;
      break;
    case Strategy::kMegatron:
      break;
    case Strategy::kBalanced:
      r.partition = PartitionMethod::kMinMax;
      break;
    case Strategy::kOmnibal:
      r.batcher = "isf";
      r.partition = PartitionMethod::kOmnibal;
      r.adaptive_recompute = true;
      break;
    case Strategy::kOptimus:
      r.encoder_in_bubbles = true;
      break;
    case Strategy::kFulcrum:
      r.batcher = "fulcrum";
      r.partition = PartitionMethod::kExact;
      r.adaptive_recompute = true;
      r.zero_bubble = true;
      r.try_encoder_bubbles = true;
      break;
  }
  return r;
}

std::vector<Recipe> ablation_recipes() {
  std::vector<Recipe> steps;
  Recipe r = recipe_of(Strategy::kMegatron);
  steps.push_back(r);
  r.name = "+ batches";
  r.batcher = "fulcrum";
  steps.push_back(r);
  r.name = "+ partition";
  r.partition = PartitionMethod::kExact;
  steps.push_back(r);
  r.name = "+ recomputation";
  r.adaptive_recompute = true;
  steps.push_back(r);
  r.name = "+ zero-bubble";
  r.zero_bubble = true;
  steps.push_back(r);
  r.name = "+ encoders in bubbles (fulcrum)";
  r.try_encoder_bubbles = true;
  steps.push_back(r);
  return steps;
}

namespace {

// The micro-batches of an epoch's plan that candidates are simulated on.
struct LoadSet {
  int64_t steps_per_epoch = 0;
  double samples_per_step = 0;
  std::optional<IsfParams> caps;       // ISF's caps, when its cap search chose them
  std::vector<MicroBatchLoads> steps;  // the sampled steps
  MicroBatchLoad mean;                 // the mean micro-batch: what time is balanced for
  MicroBatchLoad largest;              // the largest of each measure: what memory must hold
};

// One flattened layer and what it costs for the mean micro-batch (seconds) and the largest (bytes).
struct LayerInfo {
  int component = 0;
  const LayerSpec* spec = nullptr;
  bool runs = true;  // not among the unused final layers
  double forward = 0, backward = 0;        // backward: input and weight gradients in one pass
  double recompute[3] = {0, 0, 0};        // seconds by Recompute
  double kept_bytes[3] = {0, 0, 0};       // activation bytes for the largest micro-batch, by Recompute
  double logit_bytes = 0;                 // LM head: fp32 logits of the largest micro-batch
  double boundary_bytes = 0;              // the activation after this layer, mean micro-batch
  double training(Recompute r) const { return forward + backward + recompute[static_cast<int>(r)]; }
};

class Planner {
 public:
  Planner(Recipe recipe, const PlanRequest& r) : recipe_(std::move(recipe)), r_(r), analytic_(r.cluster) {
    if (r.profile) profiled_.emplace(analytic_, *r.profile);
  }

  TrainingPlan run() {
    TrainingPlan plan;
    try {
      plan = search();
    } catch (const NoPlanFits& e) {
      // Optimus keeps megatron's LLM plan; where megatron's plan, with the encoders in its first stage, fits
      // nowhere, the LLM is planned alone as megatron would plan it, with room left for the encoders' state on
      // every device.
      if (!recipe_.encoder_in_bubbles || !r_.model.has_encoder()) throw;
      return optimus_on_the_llm_alone(e.what());
    }
    if (recipe_.encoder_in_bubbles) move_encoders_into_bubbles(plan);
    if (recipe_.try_encoder_bubbles && r_.encoders != EncoderSite::kStages) try_encoder_bubbles(plan);
    return plan;
  }

  // The recipe's best plan, with the encoders where its stages hold them.
  TrainingPlan search() {
    // Before any thread prices a layer: fp8 on devices without it.
    matmul_peak_flops_per_second(r_.cluster.device, r_.dtype);
    prepare_data();
    std::vector<ParallelConfig> configs = candidates();
    if (configs.empty() && recipe_.zero3_data_parallel) {
      throw NoPlanFits(fmt::format("zero3 runs data parallelism over all {} devices: global batch {} is not divisible "
                                   "by them", r_.cluster.devices, r_.gbs));
    }
    if (configs.empty()) {
      throw NoPlanFits(fmt::format("no parallel configuration of {} devices suits model '{}' (tensor parallelism "
                                   "dividing its heads, at least one block per stage, global batch {} divisible "
                                   "by micro-batch × DP)", r_.cluster.devices, r_.model.name, r_.gbs));
    }
    prepare_loads(configs);
    std::erase_if(configs, [&](const ParallelConfig& c) { return unbatchable_.count({c.dp, micro_batches_of(c)}) > 0; });
    if (configs.empty()) {
      throw NoPlanFits(fmt::format("{}no configuration's batches could be made: {}",
                                   r_.data_name.empty() ? "" : r_.data_name + ": ", unbatchable_.begin()->second));
    }
    // Screening: every candidate on two of the sampled steps; then the most promising on all of them.
    // A candidate that cannot be among the finalists is given up on as soon as its bound shows it (SearchBar).
    std::vector<Outcome> outcomes(configs.size());
    Progress progress(fmt::format("planning ({})", recipe_.name),
                      static_cast<int64_t>(configs.size()) + kFinalists, r_.progress);
    SearchBar screening_bar(kFinalists);
    const std::vector<size_t> order = likeliest_first(configs);
    parallel_for(configs.size(), [&](size_t k) {
      const size_t i = order[k];
      Outcome o = evaluate(configs[i], true, r_.give_up_early ? &screening_bar : nullptr);
      // Screening ranks by epoch time alone and the finalists are evaluated again whole: the schedule and the
      // simulation's detail (per simulated device) would only hold memory, hundreds of candidates of it.
      o.plan.schedule = Schedule{};
      o.plan.detail = SimResult{};
      outcomes[i] = std::move(o);
      progress.advance();
    });
    int feasible = 0;
    double smallest_shortfall = std::numeric_limits<double>::infinity();
    std::string shortfall_where;
    std::vector<size_t> ranked;
    for (size_t i = 0; i < outcomes.size(); ++i) {
      const Outcome& o = outcomes[i];
      if (o.fits) {
        ++feasible;
        if (!o.given_up) ranked.push_back(i);
      } else if (o.shortfall_bytes < smallest_shortfall) {
        smallest_shortfall = o.shortfall_bytes;
        shortfall_where = o.where;
      }
    }
    if (ranked.empty() && std::isinf(smallest_shortfall)) {  // none got as far as its memory
      throw NoPlanFits(fmt::format("no configuration of {} can cut model '{}' into its stages ({} tried)", recipe_.name,
                                   r_.model.name, configs.size()));
    }
    if (ranked.empty()) {
      throw NoPlanFits(fmt::format("no configuration of {} fits in memory ({} tried): the closest, {}, needs "
                                   "{:.1f} GiB more per device than the {:.1f} GiB usable",
                                   recipe_.name, configs.size(), shortfall_where,
                                   smallest_shortfall / (1024.0 * 1024 * 1024),
                                   r_.cluster.usable_memory_bytes() / (1024.0 * 1024 * 1024)));
    }
    // Ties go to the earlier candidate, whatever the threads did.
    std::stable_sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) {
      return outcomes[a].plan.epoch_seconds < outcomes[b].plan.epoch_seconds;
    });
    ranked.resize(std::min<size_t>(ranked.size(), kFinalists));
    // The finalists in their screening order, the likeliest first: the best so far is the bar.
    std::vector<Outcome> finals(ranked.size());
    SearchBar final_bar(1);
    parallel_for(ranked.size(), [&](size_t k) {
      finals[k] = evaluate(configs[ranked[k]], false, r_.give_up_early ? &final_bar : nullptr);
      progress.advance();
    });
    int best = -1;
    for (size_t k = 0; k < finals.size(); ++k) {
      const Outcome& o = finals[k];
      if (o.fits && !o.given_up && (best < 0 || o.plan.epoch_seconds < finals[best].plan.epoch_seconds)) {
        best = static_cast<int>(k);
      }
    }
    if (best < 0) throw NoPlanFits(fmt::format("no configuration of {} fits in memory on every step", recipe_.name));
    std::vector<Outcome>& outcomes_final = finals;
    TrainingPlan plan = std::move(outcomes_final[best].plan);
    plan.candidates = static_cast<int>(configs.size());
    for (const auto& [key, reason] : unbatchable_) plan.left_out.push_back(reason);
    plan.feasible = feasible;
    for (size_t i : ranked) plan.finalists.push_back(configs[i]);
    for (const std::vector<Outcome>* list : {&outcomes, &finals}) {
      for (const Outcome& o : *list) plan.given_up += o.given_up ? 1 : 0;
    }
    plan.detail_loads = loads_of(plan.config).steps.front();  // every candidate's first simulated step
    return plan;
  }

  // The sampled steps a configuration was simulated on.
  const LoadSet& loads_of(const ParallelConfig& c) const {
    return loads_.at(std::make_tuple(recipe_.batcher, c.dp, micro_batches_of(c)));
  }

 private:
  static constexpr size_t kFinalists = 12;

  // Runs fn(0 .. n − 1) on the request's threads; each index writes only its own result.
  template <typename Fn>
  void parallel_for(size_t n, Fn fn) const {
    std::atomic<size_t> next{0};
    // The first item (by index) that threw, rethrown once every thread is joined: items are taken in index order,
    // so every item before it ran (the error is the same whatever the thread count unless whether an item throws
    // depends on what the others left in a search bar).
    std::mutex failed_mutex;
    size_t failed_at = n;
    std::exception_ptr failure;
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) {
        try {
          fn(i);
        } catch (...) {
          std::lock_guard<std::mutex> lock(failed_mutex);
          if (i < failed_at) {
            failed_at = i;
            failure = std::current_exception();
          }
          next = n;  // no more items
        }
      }
    };
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(std::max(1, r_.threads)));
    try {
      for (int t = 1; t < std::max(1, r_.threads); ++t) threads.emplace_back(work);
    } catch (const std::system_error&) {
      // The system gives no more threads: those started and this one do the work, to the same result.
    }
    work();
    for (std::thread& t : threads) t.join();
    if (failure) std::rethrow_exception(failure);
  }

  // The epoch time a candidate must beat to be among the `kept` best: the kept-th best of the candidates evaluated
  // whole so far, infinite until there are that many. A candidate given up on above it is slower than every
  // candidate it counts, and the bar only falls, so the `kept` best are the same whichever candidates the threads
  // happened to evaluate first.
  class SearchBar {
   public:
    explicit SearchBar(size_t kept) : kept_(kept) {}
    double epoch_seconds() const {
      std::lock_guard<std::mutex> lock(mutex_);
      return best_.size() < kept_ ? std::numeric_limits<double>::infinity() : best_.back();
    }
    void offer(double epoch_seconds) {
      std::lock_guard<std::mutex> lock(mutex_);
      best_.insert(std::upper_bound(best_.begin(), best_.end(), epoch_seconds), epoch_seconds);
      if (best_.size() > kept_) best_.pop_back();
    }

   private:
    mutable std::mutex mutex_;
    size_t kept_;
    std::vector<double> best_;  // ascending
  };

  // The candidates' indices by a rough estimate of their iteration, fastest first, so that the search bar falls
  // early: the mean micro-batch's passes on an even share of the layers, through a pipeline's fill and drain.
  std::vector<size_t> likeliest_first(const std::vector<ParallelConfig>& configs) const {
    std::vector<double> estimate(configs.size());
    parallel_for(configs.size(), [&](size_t i) {
      const ParallelConfig& c = configs[i];
      double seconds = 0;
      for (const LayerInfo& info : layer_infos(layout_of(c), loads_of(c))) seconds += info.training(Recompute::kNone);
      const double m = micro_batches_of(c);
      estimate[i] = (m + static_cast<double>(c.pp - 1) / c.vpp) * seconds / c.pp;
    });
    std::vector<size_t> order(configs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return estimate[a] < estimate[b]; });
    return order;
  }

  struct Outcome {
    TrainingPlan plan;
    // Some partition and recomputation of the configuration fits in memory (known exactly, given up or not).
    bool fits = false;
    // It fits but cannot beat the bar it was evaluated under: `plan` is not its best and it is not ranked.
    bool given_up = false;
    bool simulated = false;  // `plan` holds the fastest partition that fits and was simulated whole
    double shortfall_bytes = std::numeric_limits<double>::infinity();
    std::string where;
  };

  Recipe recipe_;
  const PlanRequest& r_;
  AnalyticCost analytic_;
  std::optional<ProfiledCost> profiled_;  // over analytic_, with the request's profile
  const CostModel& cost() const { return profiled_ ? static_cast<const CostModel&>(*profiled_) : analytic_; }
  Dataset synthetic_;
  const Dataset* data_ = nullptr;
  std::map<std::tuple<std::string, int, int>, LoadSet> loads_;  // (batcher, dp, micro-batches)
  // (dp, micro-batches) whose batches could not be made (ISF's cap search finding no caps on patch-token data), and
  // why: their configurations are left out.
  std::map<std::pair<int, int>, std::string> unbatchable_;
  // Layer-pass prices per sampled step, shared by the configurations simulated on it (the steps in loads_ stay put).
  mutable PassPriceMemo pass_prices_;
  int64_t llm_blocks_ = 0;
  int64_t all_blocks_ = 0;
  // Per flattened layer: an LLM layer Megatron-LM's pipeline layout has a symbol for (embedding, block, head).
  std::vector<bool> layout_layers_;

  void prepare_data() {
    for (const ComponentSpec& c : r_.model.components) {
      for (const LayerSpec& l : c.layers) {
        layout_layers_.push_back(c.role == ComponentRole::kLlm && l.kind != LayerKind::kFinalNorm);
      }
      const int64_t blocks = c.transformer_blocks();
      all_blocks_ += blocks;
      if (c.role == ComponentRole::kLlm) llm_blocks_ += blocks;
    }
    if (r_.gbs < 1) throw InputError(fmt::format("global batch {}: at least one sample", r_.gbs));
    if (r_.data) {
      data_ = r_.data;
      return;
    }
    // Identical samples: `synthetic_steps` steps of them.
    const ModelSampleCost unit(r_.model, cost(), r_.dtype);
    synthetic_ = Dataset(unit.vision_unit());
    const int64_t items = r_.model.has_encoder() ? r_.images_per_sample : 0;
    const int64_t vision = synthetic_vision_per_sample(r_.model, items, r_.image_tokens);
    for (int64_t i = 0; i < r_.gbs * std::max(1, r_.synthetic_steps); ++i) {
      synthetic_.add(static_cast<uint32_t>(vision), static_cast<uint32_t>(r_.seq), static_cast<int32_t>(items));
    }
    data_ = &synthetic_;
  }

  // Largest divisor of `tp` that divides every encoder's and projector's heads (1 replicates them).
  int encoder_tp_for(int tp) const {
    for (int e = tp; e >= 1; --e) {
      if (tp % e != 0) continue;
      bool ok = true;
      for (const ComponentSpec& c : r_.model.components) {
        if (c.role == ComponentRole::kLlm) continue;
        const int64_t heads = c.attention_heads(), kv = c.kv_heads();
        if (heads > 0 && (heads % e != 0 || (kv % e != 0 && e % kv != 0))) ok = false;
      }
      if (ok) return e;
    }
    return 1;
  }

  bool llm_tp_ok(int tp) const {
    for (const ComponentSpec& c : r_.model.components) {
      if (c.role != ComponentRole::kLlm) continue;
      const int64_t heads = c.attention_heads(), kv = c.kv_heads();
      if (heads > 0 && (heads % tp != 0 || (kv % tp != 0 && tp % kv != 0))) return false;
    }
    return true;
  }

  std::vector<ParallelConfig> candidates() const {
    const int64_t devices = r_.cluster.devices;
    std::vector<ParallelConfig> out;
    if (r_.config && recipe_.zero3_data_parallel) {
      throw InputError("--config: the zero3 strategy is pure data parallelism with ZeRO-3; it takes no configuration");
    }
    if (recipe_.zero3_data_parallel) {
      ParallelConfig c;
      c.dp = static_cast<int>(devices);
      c.mbs = r_.gbs % (4 * devices) == 0 ? 4 : std::max<int64_t>(1, r_.gbs / devices);
      c.sharding = StateSharding::kZero3;
      if (r_.gbs % (c.mbs * devices) == 0) out.push_back(c);
      return out;
    }
    if (r_.config) {
      check_config(*r_.config, "--config");
      add_variants(*r_.config, out);
      return out;
    }
    if (r_.pinned && !recipe_.adaptive_recompute && recipe_.batcher == "random") {
      ParallelConfig c = *r_.pinned;
      check_config(c, "--baseline-config");
      c.encoder_tp = encoder_tp_for(c.tp);
      c.sequence_parallel = c.tp > 1;
      c.schedule = c.vpp > 1 ? PipelineKind::kInterleaved : PipelineKind::kOneFOneB;
      out.push_back(c);
      return out;
    }
    const int per_node = std::max(1, r_.cluster.device.devices_per_node);
    for (int tp = 1; tp <= per_node && tp <= devices; tp *= 2) {
      if (devices % tp != 0 || !llm_tp_ok(tp)) continue;
      for (int pp = 1; pp <= devices / tp && pp <= spread_blocks(); pp *= 2) {
        if ((devices / tp) % pp != 0) continue;
        const int dp = static_cast<int>(devices / tp / pp);
        for (int vpp : {1, 2, 4}) {
          if (vpp > 1 && (pp == 1 || static_cast<int64_t>(pp) * vpp > spread_blocks())) continue;
          for (int64_t mbs : {1, 2, 4, 8}) {
            if (r_.gbs % (mbs * dp) != 0) continue;
            const int64_t m = r_.gbs / (mbs * dp);
            if (vpp > 1 && m % pp != 0) continue;
            if (m > 1024) continue;  // more micro-batches than any pipeline needs
            ParallelConfig c;
            c.dp = dp;
            c.tp = tp;
            c.pp = pp;
            c.vpp = vpp;
            c.mbs = mbs;
            add_variants(c, out);
          }
        }
      }
    }
    return out;
  }

  // Transformer blocks the stages share: the LLM's when the encoders sit in the first stage, else all of them.
  int64_t spread_blocks() const {
    return recipe_.partition == PartitionMethod::kMegatronEven ? llm_blocks_ : all_blocks_;
  }

  // What a recipe runs DP × TP × PP × VPP at a micro-batch size as: sequence parallelism with TP, the
  // distributed optimizer with DP, 1F1B (interleaved with model chunks); also ZB-H1 for zero-bubble recipes,
  // and, without a pipeline, ZeRO-3, whose sharded parameters may buy adaptive recomputation the memory to
  // recompute less.
  void add_variants(ParallelConfig c, std::vector<ParallelConfig>& out) const {
    c.encoder_tp = encoder_tp_for(c.tp);
    c.sequence_parallel = c.tp > 1;
    c.sharding = c.dp > 1 ? StateSharding::kMegatronDistributedOptimizer : StateSharding::kZero0;
    c.schedule = c.vpp > 1 ? PipelineKind::kInterleaved : PipelineKind::kOneFOneB;
    out.push_back(c);
    if (recipe_.adaptive_recompute && c.pp == 1 && c.dp > 1) {
      ParallelConfig z = c;
      z.sharding = StateSharding::kZero3;
      out.push_back(z);
    }
    if (recipe_.zero_bubble && c.vpp == 1 && c.pp > 1) {
      c.schedule = PipelineKind::kZeroBubbleH1;
      out.push_back(c);
    }
  }

  // A configuration given instead of searched (the strategy's own, PlanRequest::config, or the baselines',
  // PlanRequest::pinned; `option` names where it came from) must suit the devices, the batch, the model and the
  // schedules.
  void check_config(const ParallelConfig& c, std::string_view option) const {
    const int64_t devices = r_.cluster.devices;
    if (c.dp < 1 || c.tp < 1 || c.pp < 1 || c.vpp < 1 || c.mbs < 1) {
      throw InputError(fmt::format("{}: DP, TP, PP, VPP and micro-batch must be at least 1", option));
    }
    if (static_cast<int64_t>(c.dp) * c.tp * c.pp != devices) {
      throw InputError(fmt::format("{} DP {} × TP {} × PP {} is not the cluster's {} devices", option, c.dp, c.tp,
                                   c.pp, devices));
    }
    if (r_.gbs % (c.mbs * c.dp) != 0) {
      throw InputError(fmt::format("{}: global batch {} is not divisible by micro-batch {} × DP {}", option, r_.gbs,
                                   c.mbs, c.dp));
    }
    if (!llm_tp_ok(c.tp)) {
      throw InputError(fmt::format("{}: TP {} does not divide the attention heads of the LLM of model '{}'", option,
                                   c.tp, r_.model.name));
    }
    if (static_cast<int64_t>(c.pp) * c.vpp > all_blocks_) {
      throw InputError(fmt::format("{}: PP {} × VPP {} stages for {} transformer blocks", option, c.pp, c.vpp,
                                   all_blocks_));
    }
    // Fewer blocks than stages where this recipe cuts (Megatron-LM's even split: the LLM's alone): another recipe
    // may run the configuration, this one has no plan on it.
    if (static_cast<int64_t>(c.pp) * c.vpp > spread_blocks()) {
      throw NoPlanFits(fmt::format("{}: {} cuts the LLM's {} transformer blocks alone, fewer than PP {} × VPP {} "
                                   "stages", option, recipe_.name, spread_blocks(), c.pp, c.vpp));
    }
    if (c.vpp > 1 && (c.pp == 1 || (r_.gbs / (c.mbs * c.dp)) % c.pp != 0)) {
      throw InputError(fmt::format("{}: VPP {} needs a pipeline and micro-batches ({}) divisible by PP {}", option,
                                   c.vpp, r_.gbs / (c.mbs * c.dp), c.pp));
    }
  }

  int micro_batches_of(const ParallelConfig& c) const { return static_cast<int>(r_.gbs / (c.mbs * c.dp)); }

  void prepare_loads(const std::vector<ParallelConfig>& configs) {
    const ModelSampleCost sample_cost(r_.model, cost(), r_.dtype);
    // A model without an encoder reads no vision (the LLM alone of a multimodal model keeps its data's counts).
    if (r_.model.has_encoder() && sample_cost.vision_unit() != data_->vision_unit()) {
      throw InputError(fmt::format("the data counts vision in {}, but model '{}' takes {}",
                                   vision_unit_text(data_->vision_unit()), r_.model.name,
                                   vision_unit_text(sample_cost.vision_unit())));
    }
    const std::string batcher = recipe_.batcher;
    // Each (dp, micro-batches) not batched yet, in the order the configurations name them, batched on the
    // request's threads.
    std::vector<std::pair<int, int>> keys;
    for (const ParallelConfig& c : configs) {
      const std::pair<int, int> key{c.dp, micro_batches_of(c)};
      if (loads_.count(std::make_tuple(batcher, key.first, key.second)) || unbatchable_.count(key) ||
          std::find(keys.begin(), keys.end(), key) != keys.end()) {
        continue;
      }
      keys.push_back(key);
    }
    std::vector<std::optional<LoadSet>> sets(keys.size());
    std::vector<std::string> reasons(keys.size());
    const auto params_of = [&](size_t k) {
      BatchParams params;
      params.dp = keys[k].first;
      params.micro_batches = keys[k].second;
      params.samples_per_step = r_.gbs;
      params.seed = r_.seed;
      params.oversize = OversizePolicy::kOwnGroup;
      return params;
    };
    // ISF's caps are 9 tiles and 4,096 tokens; patch tokens have no such default, so OmniBal's own cap search
    // sets them, for each configuration's samples per micro-batch. The search's trials depend on that count
    // alone, so the configurations sharing it share one search (each scores its trials at its own dp and
    // micro-batches); a search that finds no caps leaves out all of them, not the whole plan.
    std::vector<std::optional<IsfParams>> searched(keys.size());
    if (batcher == "isf" && data_->vision_unit() == VisionUnit::kPatchTokens) {
      // Samples per micro-batch as a fraction in lowest terms: global batch over dp · micro-batches.
      std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> by_share;
      for (size_t k = 0; k < keys.size(); ++k) {
        const int64_t slots = static_cast<int64_t>(keys[k].first) * keys[k].second;
        const int64_t g = std::gcd(r_.gbs, slots);
        by_share[{r_.gbs / g, slots / g}].push_back(k);
      }
      std::vector<std::vector<size_t>> shares;
      for (auto& [share, ks] : by_share) shares.push_back(std::move(ks));
      parallel_for(shares.size(), [&](size_t s) {
        std::vector<BatchParams> runs;
        for (size_t k : shares[s]) runs.push_back(params_of(k));
        try {
          const std::vector<IsfSearchResult> found = isf_search(*data_, runs, sample_cost);
          for (size_t i = 0; i < shares[s].size(); ++i) searched[shares[s][i]] = found[i].best;
        } catch (const IsfSearchFailed& e) {
          for (size_t k : shares[s]) {
            reasons[k] = fmt::format("DP {} × {} micro-batches: {}", keys[k].first, keys[k].second, e.what());
          }
        }
      });
    }
    parallel_for(keys.size(), [&](size_t k) {
      if (!reasons[k].empty()) return;
      const auto [dp, micro_batches] = keys[k];
      BatchParams params = params_of(k);
      if (searched[k]) take_caps(*searched[k], params);
      const BatchPlan plan = make_batcher(batcher)->plan(*data_, params, sample_cost);
      LoadSet set;
      set.caps = searched[k];
      set.steps_per_epoch = plan.steps();
      set.samples_per_step =
          plan.steps() ? static_cast<double>(plan.sample_ids().size()) / static_cast<double>(plan.steps()) : 0;
      const int sampled = static_cast<int>(std::min<int64_t>(std::max(1, r_.sampled_steps), plan.steps()));
      double sums[4] = {0, 0, 0, 0};
      int64_t count = 0;
      for (int s = 0; s < sampled; ++s) {
        const int64_t step = s * plan.steps() / sampled;
        MicroBatchLoads loads;
        loads.per_replica.resize(dp);
        for (int d = 0; d < dp; ++d) {
          for (int j = 0; j < micro_batches; ++j) {
            const MicroBatchLoad l = micro_batch_load(*data_, plan.micro_batch(step, d, j), plan.padded());
            loads.per_replica[d].push_back(l);
            sums[0] += static_cast<double>(l.vision);
            sums[1] += static_cast<double>(l.llm_tokens);
            sums[2] += static_cast<double>(l.llm_tokens_squared);
            sums[3] += static_cast<double>(l.sequences);
            ++count;
            set.largest.vision = std::max(set.largest.vision, l.vision);
            set.largest.llm_tokens = std::max(set.largest.llm_tokens, l.llm_tokens);
            set.largest.llm_tokens_squared = std::max(set.largest.llm_tokens_squared, l.llm_tokens_squared);
            set.largest.sequences = std::max(set.largest.sequences, l.sequences);
          }
        }
        set.steps.push_back(std::move(loads));
      }
      if (count > 0) {
        set.mean.vision = std::llround(sums[0] / static_cast<double>(count));
        set.mean.llm_tokens = std::max<int64_t>(1, std::llround(sums[1] / static_cast<double>(count)));
        set.mean.llm_tokens_squared = std::llround(sums[2] / static_cast<double>(count));
        set.mean.sequences = std::max<int64_t>(1, std::llround(sums[3] / static_cast<double>(count)));
      }
      sets[k] = std::move(set);
    });
    for (size_t k = 0; k < keys.size(); ++k) {
      if (sets[k]) {
        loads_.emplace(std::make_tuple(batcher, keys[k].first, keys[k].second), std::move(*sets[k]));
      } else {
        unbatchable_.emplace(keys[k], std::move(reasons[k]));
      }
    }
  }

  ParallelLayout layout_of(const ParallelConfig& c) const {
    ParallelLayout l;
    l.dp = c.dp;
    l.tp = c.tp;
    l.pp = c.pp;
    l.vpp = c.vpp;
    l.encoder_tp = c.encoder_tp;
    l.sequence_parallel = c.sequence_parallel;
    l.state_sharding = c.sharding;
    return l;
  }

  std::vector<LayerInfo> layer_infos(const ParallelLayout& layout, const LoadSet& loads) const {
    std::vector<LayerInfo> out;
    for (int c = 0; c < static_cast<int>(r_.model.components.size()); ++c) {
      const ComponentSpec& comp = r_.model.components[c];
      TensorSharding sharding;
      sharding.tp = layout.component_tp(comp.role != ComponentRole::kLlm);
      sharding.sequence_parallel = layout.sequence_parallel && sharding.tp > 1;
      const TokenBatch mean = component_batch(r_.model, c, loads.mean);
      const TokenBatch largest = component_batch(r_.model, c, loads.largest);
      const size_t used = comp.layers.size() - static_cast<size_t>(comp.unused_final_layers);
      for (size_t i = 0; i < comp.layers.size(); ++i) {
        LayerInfo info;
        info.component = c;
        info.spec = &comp.layers[i];
        info.runs = i < used;
        if (info.runs && mean.tokens > 0) {
          LayerWork w;
          w.layer = info.spec;
          w.batch = mean;
          w.sharding = sharding;
          w.trainable = comp.trainable;
          w.dtype = r_.dtype;
          w.pass = Pass::kForward;
          info.forward = cost().layer_cost(w).seconds;
          info.backward = backward_seconds(cost(), w);
          w.pass = Pass::kRecompute;
          w.recompute = Recompute::kSelective;
          info.recompute[1] = cost().layer_cost(w).seconds;
          w.recompute = Recompute::kFull;
          info.recompute[2] = cost().layer_cost(w).seconds;
          const double split = sharding.sequence_parallel ? sharding.tp : 1;
          info.boundary_bytes = activation_element_bytes(r_.dtype) * static_cast<double>(mean.tokens) *
                                static_cast<double>(info.spec->hidden) / split;
        }
        if (info.runs && largest.tokens > 0) {
          for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
            info.kept_bytes[static_cast<int>(r)] =
                activation_bytes(*info.spec, largest, sharding, r, /*dropout=*/false, r_.dtype);
          }
          if (info.spec->kind == LayerKind::kLmHead) {
            info.logit_bytes = 4.0 * static_cast<double>(largest.tokens) * static_cast<double>(info.spec->vocab) / sharding.tp;
          }
        }
        out.push_back(info);
      }
    }
    return out;
  }

  // The exact min-max partition of the chain into the layout's stages, each layer at its recomputation mode.
  std::vector<StageLayers> exact_partition(const std::vector<LayerInfo>& layers, const std::vector<Recompute>& modes,
                                           const ParallelLayout& layout, bool with_boundaries) const {
    LayerChain chain;
    const DeviceEfficiency& eff = analytic_.efficiency();
    const int64_t distance = static_cast<int64_t>(layout.dp) * layout.tp;
    for (size_t i = 0; i < layers.size(); ++i) {
      chain.layer_seconds.push_back(layers[i].training(modes[i]));
      if (r_.llm_in_every_stage) chain.required.push_back(layout_layers_[i]);
      if (with_boundaries && i + 1 < layers.size()) {
        chain.boundary_seconds.push_back(p2p_seconds(layers[i].boundary_bytes, r_.cluster, eff, distance));
      }
    }
    return to_stages(min_max_partition(chain, layout.stages()).ends);
  }

  bool every_stage_has_llm(const std::vector<StageLayers>& stages) const {
    for (const StageLayers& st : stages) {
      if (std::none_of(layout_layers_.begin() + st.first_layer, layout_layers_.begin() + st.end_layer,
                       [](bool b) { return b; })) {
        return false;
      }
    }
    return true;
  }

  static std::vector<StageLayers> to_stages(const std::vector<int32_t>& ends) {
    std::vector<StageLayers> stages;
    int32_t begin = 0;
    for (int32_t end : ends) {
      stages.push_back({begin, end});
      begin = end;
    }
    return stages;
  }

  // Adaptive recomputation: per pipeline rank, the modes of its blocks that fit its free memory with the least
  // recomputation, given the micro-batches each of its stages holds at once. `shortfall` gets the bytes the
  // worst rank lacks even when recomputing everything (0 when every rank fits).
  std::vector<Recompute> adaptive_recompute(const std::vector<LayerInfo>& layers, const Schedule& provisional,
                                            int micro_batches, double& shortfall) const {
    const ParallelLayout& l = provisional.layout;
    const std::vector<int> in_flight = max_micro_batches_in_flight(provisional);
    std::vector<Recompute> modes = block_recompute(r_.model, Recompute::kFull);
    shortfall = 0;
    for (int rank = 0; rank < l.pp; ++rank) {
      double budget = r_.cluster.usable_memory_bytes() - rank_state_bytes(provisional, r_.model, rank);
      // Classes: the blocks of one component on one stage.
      std::vector<RecomputeClass> classes;
      std::vector<std::vector<size_t>> members;
      for (int chunk = 0; chunk < l.vpp; ++chunk) {
        const int s = chunk * l.pp + rank;
        const StageLayers& st = provisional.stages[s];
        std::map<int, size_t> class_of_component;
        for (int32_t i = st.first_layer; i < st.end_layer; ++i) {
          const LayerInfo& info = layers[i];
          budget -= info.logit_bytes * in_flight[s];
          if (info.spec->kind != LayerKind::kTransformerBlock || !info.runs) continue;
          auto [it, added] = class_of_component.emplace(info.component, classes.size());
          if (added) {
            RecomputeClass c;
            for (int m = 0; m < 3; ++m) {
              c.kept_bytes[m] = info.kept_bytes[m] * in_flight[s];
              c.recompute_seconds[m] = info.recompute[m] * micro_batches;
            }
            classes.push_back(c);
            members.emplace_back();
          }
          ++classes[it->second].layers;
          members[it->second].push_back(static_cast<size_t>(i));
        }
      }
      const RecomputeChoice choice = choose_recompute(classes, budget);
      if (!choice.fits) shortfall = std::max(shortfall, choice.shortfall_bytes);
      for (size_t k = 0; k < classes.size(); ++k) {
        size_t next = 0;
        for (int m = 0; m < 3; ++m) {
          for (int64_t n = 0; n < choice.layers[k][m]; ++n) modes[members[k][next++]] = static_cast<Recompute>(m);
        }
      }
    }
    return modes;
  }

  // The sampled steps a screening pass simulates: the first and the middle one.
  static std::vector<size_t> screening_steps(const LoadSet& loads) {
    std::vector<size_t> out{0};
    if (loads.steps.size() > 2) out.push_back(loads.steps.size() / 2);
    return out;
  }
  static std::vector<size_t> all_steps(const LoadSet& loads) {
    std::vector<size_t> out(loads.steps.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = i;
    return out;
  }

  struct OptimusOutcome {
    std::shared_ptr<OptimusPlan> optimus;
    Schedule schedule;  // the first step's, over the whole model (optimus_schedule)
    SimResult detail;   // its simulation on the first step
    double mean_iteration_seconds = 0;
    double mean_model_flops = 0;
    // Slower than asked on the first step: the other steps were not simulated (nor their memory checked).
    bool gave_up = false;
  };

  // Optimus on the chosen LLM plan: the encoder plan and split searched on the first sampled step, and its
  // schedule, static as Optimus's is, run on every sampled step for the mean iteration time.
  // `loads`: the sampled steps of the plan's configuration (this planner's, unless another planned the LLM).
  void move_encoders_into_bubbles(TrainingPlan& plan, const LoadSet* loads = nullptr) const {
    const LoadSet& steps = loads ? *loads : loads_of(plan.config);
    auto outcome = [&](Recompute encoder_recompute) {
      return encoders_in_bubbles(plan, nullptr, steps, StepSchedules::kStatic, OptimusInputs{}.split_evaluation_budget,
                                 std::numeric_limits<double>::infinity(), encoder_recompute);
    };
    OptimusOutcome o = outcome(r_.encoder_recompute.value_or(Recompute::kNone));
    if (o.detail.oom && !r_.encoder_recompute) o = outcome(Recompute::kFull);
    if (o.detail.oom) throw NoPlanFits(fmt::format("optimus: {}", bubbles_do_not_fit(o)));
    adopt(plan, o, steps);
  }

  // The request for planning the LLM alone: its layers, the samples with their images (synthetic ones included,
  // which the encoders still run), no progress bar of its own.
  PlanRequest llm_alone_request() const {
    PlanRequest sub = r_;
    sub.model = llm_only(r_.model);
    sub.data = data_;
    sub.progress = false;
    sub.llm_in_every_stage = false;
    return sub;
  }

  // `sub` (an LLM-alone request) planned by `recipe`, then pinned to the configuration found, with the least
  // state any encoder plan for its layout keeps on a device held back: the room the LLM must leave the encoders.
  // InputError when no encoder plan suits that layout.
  PlanRequest with_room_for_the_encoders(const Recipe& recipe, PlanRequest sub) const {
    const TrainingPlan first = Planner(recipe, sub).run();
    const ParallelLayout layout = layout_of(first.config);
    double least = std::numeric_limits<double>::infinity();
    for (const EncoderPlan& e : encoder_plans(r_.model, layout, {std::vector<double>(layout.pp, 0.0), INFINITY})) {
      least = std::min(least, *std::max_element(e.stage_state_bytes.begin(), e.stage_state_bytes.end()));
    }
    if (!std::isfinite(least)) throw InputError("no encoder plan fits the layout");
    sub.config = first.config;
    sub.pinned.reset();
    sub.cluster.reserve_bytes += least;
    return sub;
  }

  // `optimus` where megatron's plan of the whole model fits nowhere (`why`): the LLM planned alone by the same
  // recipe (on the pinned configuration, if any), then on that configuration again with the encoders' least
  // state for its layout held back on every device, and the encoders moved into its bubbles.
  TrainingPlan optimus_on_the_llm_alone(const std::string& why) const {
    try {
      Recipe recipe = recipe_;
      recipe.encoder_in_bubbles = false;
      const PlanRequest sub = with_room_for_the_encoders(recipe, llm_alone_request());
      Planner llm_planner(recipe, sub);  // keeps a reference to its request
      TrainingPlan plan = llm_planner.run();
      move_encoders_into_bubbles(plan, &llm_planner.loads_of(plan.config));
      return plan;
    } catch (const InputError& e) {
      throw NoPlanFits(fmt::format("{}; with the LLM planned alone and the encoders on their own plan: {}", why,
                                   e.what()));
    }
  }

  // `detail`, the first step's simulation, takes another step's memory: each stage's most, and out of memory if
  // either is.
  static void take_memory_of(SimResult& detail, const SimResult& step) {
    detail.oom = detail.oom || step.oom;
    for (size_t r = 0; r < step.peak_memory_bytes.size() && r < detail.peak_memory_bytes.size(); ++r) {
      detail.peak_memory_bytes[r] = std::max(detail.peak_memory_bytes[r], step.peak_memory_bytes[r]);
    }
  }

  // Why a schedule with the encoders in the bubbles does not fit: its activations held beside the LLM's.
  static std::string bubbles_do_not_fit(const OptimusOutcome& o) {
    const SimResult& r = o.detail;
    const double peak = *std::max_element(r.peak_memory_bytes.begin(), r.peak_memory_bytes.end());
    return fmt::format("with the encoders' activations in the LLM's bubbles (their recomputation: {}) a device needs "
                       "{:.1f} GiB more than the {:.1f} GiB usable", recompute_name(o.optimus->encoder_plan.recompute),
                       (peak - r.usable_memory_bytes) / (1024.0 * 1024 * 1024),
                       r.usable_memory_bytes / (1024.0 * 1024 * 1024));
  }

  void try_encoder_bubbles(TrainingPlan& plan) const {
    const bool forced = r_.encoders == EncoderSite::kBubbles;
    if (!r_.model.has_encoder()) {
      if (forced) {
        throw InputError(fmt::format("the encoders cannot run in the LLM's bubbles: model '{}' has no encoder",
                                     r_.model.name));
      }
      return;
    }
    PlanRequest sub = llm_alone_request();
    sub.pinned.reset();
    Recipe recipe = recipe_;
    recipe.try_encoder_bubbles = false;
    // Two LLM plans to fill: this configuration (with fewer chunks per rank where the LLM alone has too few
    // blocks for its chunks), and the LLM's own best configuration alone (unless the request pins one).
    std::vector<std::optional<ParallelConfig>> configs;
    for (int vpp = plan.config.vpp; vpp >= 1; vpp /= 2) {
      if (static_cast<int64_t>(plan.config.pp) * vpp > llm_blocks_) continue;
      ParallelConfig c = plan.config;
      c.vpp = vpp;
      configs.push_back(c);
      break;
    }
    if (!r_.config) configs.push_back(std::nullopt);
    std::string why_not;
    for (const std::optional<ParallelConfig>& config : configs) {
      sub.config = config;
      std::string reason;  // this configuration's
      try {
        // Room for the encoders' state: the least any encoder plan of the configuration keeps on a device.
        sub.cluster = r_.cluster;
        sub = with_room_for_the_encoders(recipe, sub);
        // The encoders' activations are known once they are scheduled: where they overflow, the LLM is planned
        // again with that much less room (more recomputation, say), twice at most.
        bool recomputing_fitted = false;
        for (int attempt = 0; attempt < 3; ++attempt) {
          Planner llm_planner(recipe, sub);
          const TrainingPlan llm_plan = llm_planner.run();
          const LoadSet& loads = llm_planner.loads_of(llm_plan.config);
          // A smaller split search than `optimus`'s own: this runs beside a whole configuration search.
          // A candidate slower than the plan on the first step is not scheduled on the others, unless the
          // request wants the encoders in bubbles and none is there yet.
          auto outcome = [&](Recompute encoder_recompute) {
            const bool must_adopt = forced && !plan.optimus;
            return encoders_in_bubbles(
                plan, &llm_plan.schedule, loads, StepSchedules::kPerStep, kTrySplitEvaluations,
                must_adopt ? std::numeric_limits<double>::infinity() : plan.detail.iteration_seconds, encoder_recompute);
          };
          // Adopted where it is faster than the plan so far (whatever it costs when the request wants the
          // encoders in bubbles and none is there yet).
          auto consider = [&](const OptimusOutcome& o) {
            if (o.gave_up) return;
            if ((forced && !plan.optimus) ||
                o.mean_iteration_seconds * static_cast<double>(loads.steps_per_epoch) < plan.epoch_seconds) {
              adopt(plan, o, loads, &llm_plan.config);
            }
          };
          const OptimusOutcome o = outcome(r_.encoder_recompute.value_or(Recompute::kNone));
          if (o.detail.oom) {
            // The encoders recomputing on this LLM plan (until that once fits), and (below) the LLM planned again
            // with room for them: both are tried, the faster kept. The room is what the encoders need as they
            // are where recomputing fits, and recomputing otherwise.
            const OptimusOutcome* short_of = &o;
            std::optional<OptimusOutcome> recomputing;
            if (!r_.encoder_recompute && !recomputing_fitted) {
              recomputing = outcome(Recompute::kFull);
              if (recomputing->detail.oom) {
                short_of = &*recomputing;
              } else {
                recomputing_fitted = true;
                consider(*recomputing);
              }
            }
            const SimResult& over = short_of->detail;
            reason = bubbles_do_not_fit(*short_of);
            // What the encoders add on a device beside the LLM's own bytes: the room the LLM must leave them.
            double added = 0, overflow = 0;
            for (size_t k = 0; k < over.peak_memory_bytes.size() && k < llm_plan.detail.peak_memory_bytes.size(); ++k) {
              added = std::max(added, over.peak_memory_bytes[k] - llm_plan.detail.peak_memory_bytes[k]);
              overflow = std::max(overflow, over.peak_memory_bytes[k] - over.usable_memory_bytes);
            }
            sub.cluster.reserve_bytes =
                std::max(sub.cluster.reserve_bytes + overflow, r_.cluster.reserve_bytes + added) * 1.02;
            continue;
          }
          consider(o);
          break;
        }
      } catch (const InputError& e) {
        // No encoder plan fits beside this LLM plan, or the LLM alone fits no schedule (in the room left for the
        // encoders, whose shortfall, when known, says more): nothing to adopt.
        if (reason.empty()) reason = e.what();
      }
      if (!reason.empty()) why_not = reason;
    }
    if (forced && !plan.optimus) {
      throw InputError(fmt::format("the encoders cannot run in the LLM's bubbles on this configuration: {}",
                                   why_not.empty() ? "no encoder plan fits" : why_not));
    }
  }

  // How the encoders' bubble schedule meets the epoch's steps: one schedule made on the first step and run on
  // every one, whatever images they carry (Optimus's static schedule), or each step's own, made from its
  // batches, which are known before the epoch starts (Fulcrum's).
  enum class StepSchedules { kStatic, kPerStep };

  // The encoders of `plan`'s model on their own plan in the bubbles of its LLM (`llm_schedule`, or the even
  // split), searched on the first step of `loads`; the whole model's schedule simulated on every step.
  static constexpr int64_t kTrySplitEvaluations = 16;

  // With `give_up_above_seconds`: when the first step takes longer than that, the other steps are not scheduled
  // (the outcome's mean is then that first step's).
  OptimusOutcome encoders_in_bubbles(const TrainingPlan& plan, const Schedule* llm_schedule, const LoadSet& loads,
                                     StepSchedules step_schedules,
                                     int64_t split_evaluation_budget = OptimusInputs{}.split_evaluation_budget,
                                     double give_up_above_seconds = std::numeric_limits<double>::infinity(),
                                     Recompute encoder_recompute = Recompute::kNone) const {
    const ParallelConfig& c = plan.config;
    OptimusInputs in;
    in.model = &r_.model;
    in.cluster = &r_.cluster;
    in.cost = &cost();
    in.efficiency = analytic_.efficiency();
    in.llm_layout = llm_schedule ? llm_schedule->layout : layout_of(c);
    in.llm_schedule = c.schedule;
    in.llm_recompute = Recompute::kFull;
    in.llm_schedule_given = llm_schedule;
    in.micro_batches = llm_schedule ? llm_schedule->micro_batches : micro_batches_of(c);
    in.encoder_pp = r_.encoder_pp;
    in.encoder_recompute = encoder_recompute;
    in.dtype = r_.dtype;
    if (loads.steps.empty()) throw InputError("no step of the plan to place the encoders in");
    in.loads = loads.steps.front();
    in.split_evaluation_budget = split_evaluation_budget;
    in.exhaustive_split_limit = std::min(in.exhaustive_split_limit, split_evaluation_budget);
    OptimusOutcome out;
    out.optimus = std::make_shared<OptimusPlan>(plan_optimus(in));
    SimOptions options;
    options.dtype = r_.dtype;
    // Each schedule made is checked as a loaded one would be: a fault in it is the planner's.
    auto run = [&](const Schedule& s, const MicroBatchLoads& step) {
      validate_planned(s, "the encoders-in-bubbles schedule");
      return simulate(s, r_.model, r_.cluster, cost(), analytic_.efficiency(), step, options);
    };
    out.schedule = optimus_schedule(in, *out.optimus);
    out.detail = run(out.schedule, in.loads);
    double sum = out.detail.iteration_seconds;
    double flops = out.detail.model_flops;
    if (sum > give_up_above_seconds) {
      out.mean_iteration_seconds = sum;
      out.mean_model_flops = flops;
      out.gave_up = true;
      return out;
    }
    for (size_t k = 1; k < loads.steps.size(); ++k) {
      in.loads = loads.steps[k];
      const SimResult step = step_schedules == StepSchedules::kStatic
                                 ? run(out.schedule, in.loads)
                                 : run(optimus_schedule(in, plan_step(in, *out.optimus)), in.loads);
      sum += step.iteration_seconds;
      flops += step.model_flops;
      // Memory over every step, as simulate_plan takes it: a step with more images keeps more activations.
      take_memory_of(out.detail, step);
    }
    out.mean_iteration_seconds = sum / static_cast<double>(loads.steps.size());
    out.mean_model_flops = flops / static_cast<double>(loads.steps.size());
    return out;
  }

  // `plan` becomes the LLM alone with the encoders in its bubbles: the whole model's schedule and its
  // simulation on the first step (encoder state and FLOPs included), the mean over the steps.
  // `config` (when given): the LLM plan's own, replacing the plan's.
  void adopt(TrainingPlan& plan, const OptimusOutcome& o, const LoadSet& loads,
             const ParallelConfig* config = nullptr) const {
    const OptimusPlan& op = *o.optimus;
    if (config) plan.config = *config;
    plan.micro_batches = op.llm.schedule.micro_batches;
    plan.iteration_seconds = o.mean_iteration_seconds;
    plan.model_flops = o.mean_model_flops;
    plan.steps_per_epoch = loads.steps_per_epoch;
    plan.samples_per_step = loads.samples_per_step;
    plan.batch_caps = loads.caps;
    plan.epoch_seconds = plan.iteration_seconds * static_cast<double>(loads.steps_per_epoch);
    plan.schedule = o.schedule;
    plan.config.schedule = op.llm.schedule.kind;
    plan.config.encoder_tp = op.encoder_plan.tp;  // the encoders run under their own plan, not the LLM's TP
    plan.detail = o.detail;
    plan.detail_loads = loads.steps.front();
    plan.optimus = o.optimus;
  }

  // Simulates `schedule` on the sampled steps (a screening pass: two of them). Once the steps' iterations cannot
  // give an epoch of `bar_epoch_seconds` or less, the rest are only checked for memory (detail.gave_up).
  TrainingPlan simulate_plan(const ParallelConfig& c, Schedule schedule, const LoadSet& loads, bool screening,
                             double bar_epoch_seconds = std::numeric_limits<double>::infinity()) const {
    const std::vector<size_t> steps = screening ? screening_steps(loads) : all_steps(loads);
    // The steps' iteration seconds that make that epoch, with room for rounding: what is given up on is slower.
    const double budget_seconds = bar_epoch_seconds * static_cast<double>(steps.size()) /
                          static_cast<double>(std::max<int64_t>(1, loads.steps_per_epoch)) * (1 + 1e-9);
    TrainingPlan plan;
    plan.recipe = recipe_.name;
    plan.config = c;
    plan.batcher = recipe_.batcher;
    plan.micro_batches = micro_batches_of(c);
    plan.steps_per_epoch = loads.steps_per_epoch;
    plan.samples_per_step = loads.samples_per_step;
    plan.batch_caps = loads.caps;
    SimOptions options;
    options.dtype = r_.dtype;
    options.memo = &pass_prices_;
    // What the steps after each one take at least: a step's bar leaves them that much of the budget.
    std::vector<double> later_seconds(steps.size() + 1, 0);
    if (std::isfinite(budget_seconds)) {
      for (size_t k = steps.size(); k-- > 1;) {
        later_seconds[k - 1] = later_seconds[k] + iteration_lower_bound(schedule, r_.model, r_.cluster, cost(),
                                                        analytic_.efficiency(), loads.steps[steps[k]], options);
      }
    }
    double sum = 0, flops = 0;
    for (size_t k = 0; k < steps.size(); ++k) {
      options.give_up_above_seconds = budget_seconds - sum - later_seconds[k];
      SimResult result =
          simulate(schedule, r_.model, r_.cluster, cost(), analytic_.efficiency(), loads.steps[steps[k]], options);
      sum += result.iteration_seconds;
      flops += result.model_flops;
      if (k == 0) {
        plan.detail = std::move(result);
      } else {
        plan.detail.gave_up = plan.detail.gave_up || result.gave_up;
        take_memory_of(plan.detail, result);
      }
    }
    plan.iteration_seconds = steps.empty() ? 0 : sum / static_cast<double>(steps.size());
    plan.model_flops = steps.empty() ? 0 : flops / static_cast<double>(steps.size());
    plan.epoch_seconds = plan.iteration_seconds * static_cast<double>(loads.steps_per_epoch);
    plan.schedule = std::move(schedule);
    return plan;
  }

  // With `bar`: partitions that cannot beat it are given up on (SimOptions::give_up_above_seconds), and the
  // outcome, when evaluated whole, raises it.
  Outcome evaluate(const ParallelConfig& c, bool screening, SearchBar* bar = nullptr) const {
    const double bar_epoch_seconds = bar ? bar->epoch_seconds() : std::numeric_limits<double>::infinity();
    Outcome out;
    out.where = fmt::format("DP {} TP {} PP {} VPP {} micro-batch {}", c.dp, c.tp, c.pp, c.vpp, c.mbs);
    const LoadSet& loads = loads_.at(std::make_tuple(recipe_.batcher, c.dp, micro_batches_of(c)));
    const ParallelLayout layout = layout_of(c);
    const int m = micro_batches_of(c);
    const std::vector<LayerInfo> layers = layer_infos(layout, loads);
    const std::vector<Recompute> all_full = block_recompute(r_.model, Recompute::kFull);
    std::vector<std::pair<std::vector<StageLayers>, std::vector<Recompute>>> options;
    try {
      if (recipe_.zero3_data_parallel) {
        options.push_back({partition_layers(r_.model, 1, EncoderPlacement::kFirstStage), all_full});
      } else {
        switch (recipe_.partition) {
          case PartitionMethod::kMegatronEven:
            options.push_back({partition_layers(r_.model, layout.stages(), EncoderPlacement::kFirstStage), all_full});
            break;
          case PartitionMethod::kMinMax:
            options.push_back({exact_partition(layers, all_full, layout, false), all_full});
            break;
          case PartitionMethod::kOmnibal: {
            std::vector<double> forward, bytes;
            for (size_t i = 0; i < layers.size(); ++i) {
              forward.push_back(layers[i].forward);
              if (i + 1 < layers.size()) bytes.push_back(layers[i].boundary_bytes);
            }
            for (const OmnibalCandidate& p : omnibal_partitions(forward, bytes, layout.stages(), 1, 3)) {
              if (r_.llm_in_every_stage && !every_stage_has_llm(to_stages(p.ends))) continue;
              options.push_back({to_stages(p.ends), all_full});
            }
            break;
          }
          case PartitionMethod::kExact: {
            // For adaptive recomputation: cut for selective recomputation first, then again for the modes that
            // cut allows; otherwise for full recomputation everywhere.
            const std::vector<Recompute> selective = block_recompute(r_.model, Recompute::kSelective);
            const std::vector<Recompute>& modes = recipe_.adaptive_recompute ? selective : all_full;
            options.push_back({exact_partition(layers, modes, layout, true), all_full});
            break;
          }
        }
      }
    } catch (const InputError&) {
      return out;  // fewer layers than stages for this configuration
    }
    const bool adaptive = recipe_.adaptive_recompute;
    double best_shortfall = std::numeric_limits<double>::infinity();
    auto consider = [&](std::vector<StageLayers> stages, std::vector<Recompute> modes, bool refine) {
      if (adaptive) {
        const Schedule provisional = make_pipeline_schedule(c.schedule, layout, m, stages, all_full);
        double shortfall = 0;
        modes = adaptive_recompute(layers, provisional, m, shortfall);
        if (shortfall > 0) {
          best_shortfall = std::min(best_shortfall, shortfall);
          return;
        }
        if (refine) {
          // The partition again with the chosen modes' times, and its own modes.
          std::vector<StageLayers> again = exact_partition(layers, modes, layout, true);
          if (again.size() == stages.size()) {
            const Schedule second = make_pipeline_schedule(c.schedule, layout, m, again, all_full);
            double second_shortfall = 0;
            std::vector<Recompute> second_modes = adaptive_recompute(layers, second, m, second_shortfall);
            if (second_shortfall == 0) {
              consider_plan(out, c, std::move(again), std::move(second_modes), loads, screening, bar_epoch_seconds);
            }
          }
        }
      }
      consider_plan(out, c, std::move(stages), std::move(modes), loads, screening, bar_epoch_seconds);
    };
    const bool refine = recipe_.partition == PartitionMethod::kExact && adaptive;
    for (auto& [stages, modes] : options) consider(stages, modes, refine);
    if (!out.fits && best_shortfall < out.shortfall_bytes) out.shortfall_bytes = best_shortfall;
    // A partition given up on is slower than the bar: the best simulated whole is the configuration's only when
    // it is not.
    if (out.given_up && out.simulated && out.plan.epoch_seconds <= bar_epoch_seconds) out.given_up = false;
    if (out.fits && !out.given_up && bar) bar->offer(out.plan.epoch_seconds);
    return out;
  }

  // Simulates one partition and keeps it if it fits and beats what `out` holds. One that fits but cannot take
  // `bar_epoch_seconds` or less marks `out` given up.
  void consider_plan(Outcome& out, const ParallelConfig& c, std::vector<StageLayers> stages,
                     std::vector<Recompute> modes, const LoadSet& loads, bool screening,
                     double bar_epoch_seconds) const {
    Schedule schedule =
        make_pipeline_schedule(c.schedule, layout_of(c), micro_batches_of(c), std::move(stages), std::move(modes));
    TrainingPlan plan = simulate_plan(c, std::move(schedule), loads, screening, bar_epoch_seconds);
    if (plan.detail.oom) {
      double over = 0;
      for (double peak : plan.detail.peak_memory_bytes) over = std::max(over, peak - plan.detail.usable_memory_bytes);
      out.shortfall_bytes = std::min(out.shortfall_bytes, over);
      return;
    }
    if (plan.detail.gave_up) {
      out.fits = true;
      out.given_up = true;
      return;
    }
    if (!out.simulated || plan.epoch_seconds < out.plan.epoch_seconds) {
      out.plan = std::move(plan);
      out.fits = true;
      out.simulated = true;
    }
  }
};

}  // namespace

TrainingPlan make_plan(const Recipe& recipe, const PlanRequest& request) { return Planner(recipe, request).run(); }

TrainingPlan make_plan(Strategy strategy, const PlanRequest& request) {
  return make_plan(recipe_of(strategy), request);
}

}  // namespace fulcrum

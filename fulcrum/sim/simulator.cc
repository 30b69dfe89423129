#include "fulcrum/sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <utility>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/activation_memory.h"
#include "fulcrum/cost/collective_cost.h"
#include "fulcrum/cost/training_state_memory.h"

namespace fulcrum {

MicroBatchLoads uniform_loads(int micro_batches, int64_t sequences, int64_t tokens, int64_t images) {
  MicroBatchLoad load;
  load.sequences = sequences;
  load.llm_tokens = sequences * tokens;
  load.llm_tokens_squared = sequences * tokens * tokens;
  load.vision = sequences * images;
  return {{std::vector<MicroBatchLoad>(static_cast<size_t>(std::max(0, micro_batches)), load)}};
}

TokenBatch component_batch(const ModelSpec& model, int component, const MicroBatchLoad& mb) {
  const ComponentSpec& c = model.components[component];
  if (c.role == ComponentRole::kLlm) return {mb.sequences, mb.llm_tokens, mb.llm_tokens_squared};
  const ComponentSpec* encoder = nullptr;  // for a projector: the encoder before it
  for (int k = component; k >= 0; --k) {
    if (model.components[k].role == ComponentRole::kEncoder) {
      encoder = &model.components[k];
      break;
    }
  }
  if (!encoder || mb.vision <= 0) return {};
  const int64_t merge = c.role == ComponentRole::kProjector ? std::max<int64_t>(1, encoder->merge) : 1;
  if (encoder->tokens_per_item > 0) {
    const int64_t t = std::max<int64_t>(1, encoder->tokens_per_item / merge);
    return {mb.vision, mb.vision * t, mb.vision * t * t};
  }
  // Dynamic resolution: one image per sample, its patch tokens.
  const int64_t tokens = std::max<int64_t>(1, mb.vision / merge);
  const int64_t sequences = std::max<int64_t>(1, mb.sequences);
  return {sequences, tokens, tokens * tokens / sequences};
}

double rank_state_bytes(const Schedule& schedule, const ModelSpec& model, int rank) {
  const ParallelLayout& l = schedule.layout;
  std::vector<int> component_of;
  std::vector<const LayerSpec*> layer;
  for (int c = 0; c < static_cast<int>(model.components.size()); ++c) {
    for (const LayerSpec& spec : model.components[c].layers) {
      component_of.push_back(c);
      layer.push_back(&spec);
    }
  }
  double bytes = 0;
  int64_t largest = 0;
  for (int chunk = 0; chunk < l.vpp; ++chunk) {
    const StageLayers& st = schedule.stages[chunk * l.pp + rank];
    std::vector<int64_t> params(model.components.size(), 0);
    for (int32_t i = st.first_layer; i < st.end_layer; ++i) {
      const int c = component_of[i];
      const int64_t per_device = layer[i]->parameters() / l.component_tp(model.components[c].role != ComponentRole::kLlm);
      params[c] += per_device;
      largest = std::max(largest, per_device);
    }
    for (size_t c = 0; c < params.size(); ++c) {
      if (params[c] > 0) bytes += training_state_bytes(params[c], l.dp, l.state_sharding, model.components[c].trainable).total();
    }
  }
  // ZeRO-3 gathers layer by layer: the layer in use and the one prefetched.
  if (l.state_sharding == StateSharding::kZero3) bytes += 2 * 2.0 * static_cast<double>(largest);
  return bytes;
}

namespace {

constexpr double kLogitBytes = 4;  // fp32 logits kept for the loss

// Layers of equal shape in one component cost the same: their costs are computed once per micro-batch.
struct LayerClass {
  const LayerSpec* layer = nullptr;
  int component = 0;
};

// Seconds of a pass split into kernels on the compute stream and layer collectives.
struct PassSeconds {
  double compute = 0;
  double comm = 0;
  double total() const { return compute + comm; }
  PassSeconds& operator+=(const PassSeconds& o) {
    compute += o.compute;
    comm += o.comm;
    return *this;
  }
};
PassSeconds scaled(const PassSeconds& p, double k) { return {p.compute * k, p.comm * k}; }

// What one layer class costs for one micro-batch.
struct ClassCost {
  PassSeconds forward, backward_input, backward_weight, recompute_selective, recompute_full;
  PassSeconds backward;  // input and weight gradients in one pass (B): the halves' sum unless measured
  double activation_bytes[3] = {0, 0, 0};  // by Recompute
  // Of those, what the weight gradient still needs after the input gradient: the inputs of the matmuls.
  double weight_input_bytes[3] = {0, 0, 0};
  double model_flops = 0;
  double recompute_flops[3] = {0, 0, 0};
};

struct StageEntry {
  int cls = 0;
  Recompute recompute = Recompute::kNone;
  int64_t count = 0;
};

struct StageInfo {
  std::vector<StageEntry> entries;  // layers that run
  double gradient_bytes = 0;        // what the gradient collective moves (whole stage, one device's share)
  double parameter_bytes = 0;       // what a parameter all-gather assembles
  double optimizer_seconds = 0;
  int64_t parameter_layers = 0;          // layers holding parameters
  // The activation sent to the next stage: the width of the stage's last layer, on encoder or LLM tokens.
  int64_t boundary_width = 0;
  int boundary_component = 0;
};

struct Device {
  size_t pc = 0;
  double compute_free = 0;
  double p2p_free = 0;
  double coll_free = 0;
  double ready = 0;               // when the inputs received for the next compute are there
  bool any_compute = false;
  int forwards_done = 0;
  int forwards_total = 0;
  double last_pass_end = 0;
  double grads_ready = 0;         // end of the last gradient collective
  int64_t collectives_seen = 0;
  size_t waves_crossed = 0;
  bool at_wave = false;
  bool waiting = false;
  double activation_bytes = 0;
  double peak_bytes = 0;
  std::vector<std::deque<int64_t>> pending_gathers;  // per stage of the rank: collective indices not yet used
  TimeBreakdown time;
};

struct CollectiveState {
  int arrived = 0;
  double ready = 0;
  bool resolved = false;
  double start = 0;
  double end = 0;
};

class Simulator {
 public:
  Simulator(const Schedule& s, const ModelSpec& model, const ClusterSpec& cluster, const CostModel& cost,
            const DeviceEfficiency& efficiency, const MicroBatchLoads& loads, const SimOptions& options)
      : s_(s), model_(model), cluster_(cluster), cost_(cost), eff_(efficiency), loads_(loads), options_(options) {}

  SimResult run() {
    check_inputs();
    build_layers();
    build_stages();
    execute();
    return finish();
  }

 private:
  const Schedule& s_;
  const ModelSpec& model_;
  const ClusterSpec& cluster_;
  const CostModel& cost_;
  const DeviceEfficiency& eff_;
  const MicroBatchLoads& loads_;
  const SimOptions& options_;

  int replicas_ = 1;
  int pp_ = 1;
  std::vector<int> layer_class_;       // per flattened layer, -1 for layers the model does not use
  std::vector<int> layer_component_;   // per flattened layer
  std::vector<LayerClass> classes_;
  std::vector<StageInfo> stages_;
  // (load index × classes + class) → cost, computed on first use.
  std::vector<ClassCost> class_costs_;
  std::vector<uint8_t> class_cost_known_;
  std::vector<Device> devices_;
  std::vector<std::vector<double>> arrivals_;  // per replica: (payload, sending stage, micro-batch) → seconds
  std::vector<std::vector<CollectiveState>> collectives_;  // per rank: its k-th collective
  std::vector<std::vector<int64_t>> collective_index_;     // per rank: instruction → collective number
  int64_t events_ = 0;
  std::vector<std::vector<TimelineEvent>> timeline_;     // per device
  std::vector<std::vector<MemorySample>> memory_;        // per device
  double model_flops_ = 0;
  double hardware_flops_ = 0;

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw InputError(fmt::format(format, std::forward<Args>(args)...));
  }

  void check_inputs() {
    const ParallelLayout& l = s_.layout;
    pp_ = l.pp;
    const size_t n = loads_.per_replica.size();
    if (n != 1 && n != static_cast<size_t>(l.dp)) {
      fail("micro-batch loads for {} data-parallel replicas, but the schedule has dp {}", n, l.dp);
    }
    replicas_ = static_cast<int>(n);
    for (size_t d = 0; d < n; ++d) {
      if (loads_.per_replica[d].size() != static_cast<size_t>(s_.micro_batches)) {
        fail("replica {} has {} micro-batches, but the schedule runs {}", d, loads_.per_replica[d].size(),
             s_.micro_batches);
      }
    }
    int64_t layers = 0;
    for (const ComponentSpec& c : model_.components) layers += static_cast<int64_t>(c.layers.size());
    if (layers != s_.model_layers) {
      fail("the schedule covers {} layers but model '{}' has {}", s_.model_layers, model_.name, layers);
    }
    if (l.encoder_tp < 0 || (l.encoder_tp > 0 && l.tp % l.encoder_tp != 0)) {
      fail("encoder tensor parallelism {} must divide tp {}", l.encoder_tp, l.tp);
    }
    // Megatron-style tensor parallelism splits whole heads.
    for (const ComponentSpec& c : model_.components) {
      const int tp = l.component_tp(c.role != ComponentRole::kLlm);
      const int64_t heads = c.attention_heads(), kv = c.kv_heads();
      if (heads > 0 && (heads % tp != 0 || (kv % tp != 0 && tp % kv != 0))) {
        fail("tensor parallelism {} does not divide the {} heads ({} key/value) of component '{}': use a degree "
             "that does{}", tp, heads, kv, c.name,
             c.role != ComponentRole::kLlm ? ", or --encoder-tp 1 to replicate it on every tensor rank" : "");
      }
    }
  }

  bool encoder_side(int component) const { return model_.components[component].role != ComponentRole::kLlm; }

  TensorSharding sharding(int component) const {
    TensorSharding t;
    t.tp = s_.layout.component_tp(encoder_side(component));
    t.sequence_parallel = s_.layout.sequence_parallel && t.tp > 1;
    return t;
  }

  void build_layers() {
    for (int c = 0; c < static_cast<int>(model_.components.size()); ++c) {
      const ComponentSpec& comp = model_.components[c];
      const size_t used = comp.layers.size() - static_cast<size_t>(comp.unused_final_layers);
      for (size_t i = 0; i < comp.layers.size(); ++i) {
        layer_component_.push_back(c);
        if (i >= used) {
          layer_class_.push_back(-1);
          continue;
        }
        int found = -1;
        for (size_t k = 0; k < classes_.size(); ++k) {
          if (classes_[k].component == c && *classes_[k].layer == comp.layers[i]) {
            found = static_cast<int>(k);
            break;
          }
        }
        if (found < 0) {
          found = static_cast<int>(classes_.size());
          classes_.push_back({&comp.layers[i], c});
        }
        layer_class_.push_back(found);
      }
    }
  }

  void build_stages() {
    const ParallelLayout& l = s_.layout;
    stages_.resize(s_.stages.size());
    for (size_t st = 0; st < s_.stages.size(); ++st) {
      StageInfo& info = stages_[st];
      std::map<int, int64_t> params_by_component;
      for (int32_t layer = s_.stages[st].first_layer; layer < s_.stages[st].end_layer; ++layer) {
        const int c = layer_component_[layer];
        const int cls = layer_class_[layer];
        const LayerSpec& spec = model_.components[c].layers[layer - first_layer_of(c)];
        params_by_component[c] += spec.parameters();
        if (spec.parameters() > 0) ++info.parameter_layers;
        if (cls < 0) continue;
        const Recompute rc = s_.recompute[layer];
        if (!info.entries.empty() && info.entries.back().cls == cls && info.entries.back().recompute == rc) {
          ++info.entries.back().count;
        } else {
          info.entries.push_back({cls, rc, 1});
        }
        info.boundary_component = c;
        info.boundary_width = spec.hidden;
      }
      // Gathered parameters and reduced gradients in the training dtype (fp8 keeps 16-bit weights and gradients).
      const double element = activation_element_bytes(options_.dtype);
      for (const auto& [c, params] : params_by_component) {
        const ComponentSpec& comp = model_.components[c];
        const int64_t per_device = params / sharding(c).tp;
        info.parameter_bytes += element * static_cast<double>(per_device);
        if (comp.trainable) {
          const double gradient_element =
              l.state_sharding == StateSharding::kMegatronDistributedOptimizer ? 4 : element;
          info.gradient_bytes += gradient_element * static_cast<double>(per_device);
          const bool sharded = l.state_sharding != StateSharding::kZero0;
          const double shard = sharded ? static_cast<double>(per_device) / l.dp : static_cast<double>(per_device);
          info.optimizer_seconds +=
              kOptimizerStepBytesPerParameter * shard / (cluster_.device.memory_bytes_per_second * eff_.memory);
        }
      }
    }
  }

  int64_t first_layer_of(int component) const {
    int64_t first = 0;
    for (int c = 0; c < component; ++c) first += static_cast<int64_t>(model_.components[c].layers.size());
    return first;
  }

  const MicroBatchLoad& load(int replica, int micro_batch) const {
    return loads_.per_replica[replicas_ == 1 ? 0 : replica][micro_batch];
  }
  int64_t load_index(int replica, int micro_batch) const {
    return static_cast<int64_t>(replicas_ == 1 ? 0 : replica) * s_.micro_batches + micro_batch;
  }

  TokenBatch batch_for(int component, const MicroBatchLoad& mb) const { return component_batch(model_, component, mb); }

  PassSeconds pass_seconds(const LayerWork& work) const {
    PassSeconds out;
    const LayerCost lc = cost_.layer_cost(work);
    if (lc.kernels.empty()) {
      out.compute = lc.seconds;
      return out;
    }
    for (const Kernel& k : lc.kernels) (k.kind == Kernel::Kind::kCompute ? out.compute : out.comm) += k.seconds;
    return out;
  }

  const ClassCost& class_cost(int replica, int micro_batch, int cls) {
    const size_t key = static_cast<size_t>(load_index(replica, micro_batch)) * classes_.size() + cls;
    if (class_costs_.empty()) {
      const size_t loads = static_cast<size_t>(replicas_) * s_.micro_batches;
      class_costs_.resize(loads * classes_.size());
      class_cost_known_.assign(loads * classes_.size(), 0);
    }
    if (class_cost_known_[key]) return class_costs_[key];
    ClassCost cc;
    const LayerClass& lc = classes_[cls];
    const ComponentSpec& comp = model_.components[lc.component];
    const TokenBatch batch = batch_for(lc.component, load(replica, micro_batch));
    if (batch.tokens > 0) {
      LayerWork w;
      w.layer = lc.layer;
      w.batch = batch;
      w.sharding = sharding(lc.component);
      w.trainable = comp.trainable;
      w.dtype = options_.dtype;
      w.pass = Pass::kForward;
      cc.forward = pass_seconds(w);
      w.pass = Pass::kBackwardInput;
      cc.backward_input = pass_seconds(w);
      w.pass = Pass::kBackwardWeight;
      cc.backward_weight = pass_seconds(w);
      if (cost_.prices_whole_backward()) {
        w.pass = Pass::kBackward;
        cc.backward = pass_seconds(w);
      } else {
        cc.backward = cc.backward_input;
        cc.backward += cc.backward_weight;
      }
      w.pass = Pass::kRecompute;
      w.recompute = Recompute::kSelective;
      cc.recompute_selective = pass_seconds(w);
      w.recompute = Recompute::kFull;
      cc.recompute_full = pass_seconds(w);
      for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
        const int i = static_cast<int>(r);
        cc.activation_bytes[i] = activation_bytes(*lc.layer, batch, w.sharding, r, options_.dropout, options_.dtype);
        cc.weight_input_bytes[i] =
            std::min(cc.activation_bytes[i], weight_gradient_input_bytes(*lc.layer, batch, w.sharding));
        cc.recompute_flops[i] = r == Recompute::kNone ? 0 : layer_flops(*lc.layer, Pass::kRecompute, batch, comp.trainable, r).total();
      }
      if (lc.layer->kind == LayerKind::kLmHead) {
        cc.activation_bytes[0] = cc.activation_bytes[1] = cc.activation_bytes[2] =
            kLogitBytes * static_cast<double>(batch.tokens) * static_cast<double>(lc.layer->vocab) / w.sharding.tp;
      }
      cc.model_flops = model_flops(*lc.layer, batch, comp.trainable);
    }
    class_cost_known_[key] = 1;
    return class_costs_[key] = cc;
  }

  // Seconds of a compute instruction of `stage` for a replica's micro-batch.
  PassSeconds op_seconds(OpKind op, int stage, int replica, int micro_batch) {
    PassSeconds out;
    for (const StageEntry& e : stages_[stage].entries) {
      const ClassCost& cc = class_cost(replica, micro_batch, e.cls);
      const double k = static_cast<double>(e.count);
      const PassSeconds& rc = e.recompute == Recompute::kFull        ? cc.recompute_full
                              : e.recompute == Recompute::kSelective ? cc.recompute_selective
                                                                     : PassSeconds{};
      switch (op) {
        case OpKind::kForward:
          out += scaled(cc.forward, k);
          break;
        case OpKind::kBackward:
          out += scaled(rc, k);
          out += scaled(cc.backward, k);
          break;
        case OpKind::kBackwardInput:
          out += scaled(rc, k);
          out += scaled(cc.backward_input, k);
          break;
        case OpKind::kBackwardWeight:
          out += scaled(cc.backward_weight, k);
          break;
        default:
          break;
      }
    }
    return out;
  }

  // Activation bytes a stage keeps for a micro-batch from its forward; with `weight_inputs_only`, the part its
  // weight gradient still needs once the input gradient has run.
  double stage_activation_bytes(int stage, int replica, int micro_batch, bool weight_inputs_only = false) {
    double bytes = 0;
    for (const StageEntry& e : stages_[stage].entries) {
      const ClassCost& cc = class_cost(replica, micro_batch, e.cls);
      const int r = static_cast<int>(e.recompute);
      bytes += static_cast<double>(e.count) * (weight_inputs_only ? cc.weight_input_bytes[r] : cc.activation_bytes[r]);
    }
    return bytes;
  }

  // The inputs of a transformer block's matmuls (QKV, output projection, the MLP's two), in the dtype's matmul
  // input size, on one device: what its weight gradient reads.
  double weight_gradient_input_bytes(const LayerSpec& l, const TokenBatch& batch,
                                     const TensorSharding& sharding) const {
    if (l.kind != LayerKind::kTransformerBlock) return 0;
    const double t = static_cast<double>(batch.tokens), tp = std::max(1, sharding.tp);
    const double outside = sharding.sequence_parallel ? tp : 1;
    const double h = static_cast<double>(l.hidden), q = static_cast<double>(l.heads * l.head_dim);
    const double f = static_cast<double>(l.ffn);
    return matmul_input_bytes(options_.dtype) * t * (2 * h / outside + (q + f) / tp);
  }

  void count_flops(int stage, int replica, int micro_batch) {
    // Replicated components compute on every tensor rank: hardware FLOPs count each copy.
    const double copies = replicas_ == 1 ? s_.layout.dp : 1;
    for (const StageEntry& e : stages_[stage].entries) {
      const ClassCost& cc = class_cost(replica, micro_batch, e.cls);
      const double k = static_cast<double>(e.count) * copies;
      const int component = classes_[e.cls].component;
      const double duplicates = static_cast<double>(s_.layout.tp) / sharding(component).tp;
      model_flops_ += k * cc.model_flops;
      hardware_flops_ += k * duplicates * (cc.model_flops + cc.recompute_flops[static_cast<int>(e.recompute)]);
    }
  }

  double p2p_bytes(int stage, int replica, int micro_batch) {
    const StageInfo& info = stages_[stage];
    const TokenBatch b = batch_for(info.boundary_component, load(replica, micro_batch));
    const TensorSharding sh = sharding(info.boundary_component);
    const double split = sh.sequence_parallel ? sh.tp : 1;
    return activation_element_bytes(options_.dtype) * static_cast<double>(b.tokens) *
           static_cast<double>(info.boundary_width) / split;
  }

  double collective_duration(const Instruction& in) const {
    const StageInfo& info = stages_[in.stage];
    const DeviceGroupShape group{s_.layout.dp, static_cast<int64_t>(s_.layout.tp)};
    const double bytes = in.tensor == CollectiveTensor::kGradients ? info.gradient_bytes : info.parameter_bytes;
    const CollectiveOp op = in.collective == CollectiveKind::kAllReduce       ? CollectiveOp::kAllReduce
                            : in.collective == CollectiveKind::kReduceScatter ? CollectiveOp::kReduceScatter
                                                                              : CollectiveOp::kAllGather;
    return collective_seconds(op, bytes, cluster_, eff_, group);
  }

  size_t arrival_slot(Payload p, int stage, int micro_batch) const {
    return (static_cast<size_t>(p == Payload::kGradient) * s_.stages.size() + stage) * s_.micro_batches + micro_batch;
  }

  bool shares_compute() const { return cluster_.device.communication_shares_compute; }

  void record(int device, TimelineEvent::Stream stream, const Instruction& in, double start, double end,
              double tp_comm = 0) {
    if (!options_.timeline) return;
    TimelineEvent e;
    e.rank = device % pp_;
    e.stream = stream;
    e.op = in.op;
    e.stage = in.stage;
    e.micro_batch = in.micro_batch;
    e.start_seconds = start;
    e.end_seconds = end;
    e.tp_comm_seconds = tp_comm;
    timeline_[device].push_back(e);
  }

  void note_memory(int device, double seconds) {
    Device& dev = devices_[device];
    const int rank = device % pp_;
    const double bytes = rank_state_bytes_[rank] + dev.activation_bytes;
    dev.peak_bytes = std::max(dev.peak_bytes, bytes);
    if (options_.timeline) memory_[device].push_back({rank, seconds, bytes});
  }

  std::vector<double> rank_state_bytes_;

  // Puts idle time before a compute-stream interval starting at `start` into its cause.
  void account_gap(Device& dev, double start, bool gather_bound, bool wave) {
    const double gap = start - dev.compute_free;
    if (gap <= 0) return;
    if (gather_bound) {
      dev.time.dp_comm += gap;
    } else if (wave) {
      dev.time.pp_other += gap;
    } else if (!dev.any_compute) {
      dev.time.pp_warmup += gap;
    } else if (dev.forwards_done == dev.forwards_total) {
      dev.time.pp_cooldown += gap;
    } else {
      dev.time.pp_other += gap;
    }
  }

  // Runs device `d` until it finishes or waits. Returns devices to wake.
  void advance(int d, std::deque<int>& work) {
    Device& dev = devices_[d];
    const int replica = d / pp_;
    const int rank = d % pp_;
    const auto& program = s_.programs[rank].instructions;
    std::vector<double>& arrivals = arrivals_[replica];
    dev.waiting = false;
    while (dev.pc < program.size()) {
      const Instruction& in = program[dev.pc];
      switch (in.op) {
        case OpKind::kRecv: {
          const double at = arrivals[arrival_slot(in.payload, in.peer_stage, in.micro_batch)];
          if (at < 0) {
            dev.waiting = true;
            return;
          }
          dev.ready = std::max(dev.ready, at);
          break;
        }
        case OpKind::kSend: {
          const double bytes = p2p_bytes(in.stage, replica, in.micro_batch);
          const int64_t distance = static_cast<int64_t>(s_.layout.dp) * s_.layout.tp;
          const double seconds = p2p_seconds(bytes, cluster_, eff_, distance);
          double start, end;
          if (shares_compute()) {
            // On the compute cores: it starts when they are free and takes them for slowdown × its seconds.
            start = dev.compute_free;
            end = start + seconds;
            const double lost = cluster_.device.communication_compute_slowdown * seconds;
            dev.time.pp_other += lost;
            dev.compute_free = start + lost;
          } else {
            start = std::max(dev.p2p_free, dev.compute_free);
            end = start + seconds;
            dev.p2p_free = end;
          }
          record(d, TimelineEvent::Stream::kP2p, in, start, end);
          arrivals[arrival_slot(in.payload, in.stage, in.micro_batch)] = end;
          const int peer = replica * pp_ + s_.layout.rank_of_stage(in.peer_stage);
          if (devices_[peer].waiting) work.push_back(peer);
          break;
        }
        case OpKind::kCollective: {
          const int64_t k = collective_index_[rank][dev.pc];
          CollectiveState& c = collectives_[rank][k];
          if (dev.collectives_seen == k) {  // first visit: arrive
            ++dev.collectives_seen;
            c.ready = std::max(c.ready, dev.compute_free);
            if (in.tensor == CollectiveTensor::kParameters) dev.pending_gathers[in.stage / pp_].push_back(k);
            if (++c.arrived == replicas_) resolve(rank, k, in, work);
          }
          if (shares_compute()) {
            // The collective runs on the compute cores: the program waits for every replica to reach it, then
            // loses slowdown × its seconds of compute (a gather's result is still waited for before use).
            if (!c.resolved) {
              dev.waiting = true;
              return;
            }
            const double start = std::max(dev.compute_free, c.end - collective_duration(in));
            account_gap(dev, start, true, false);
            const double lost = cluster_.device.communication_compute_slowdown * (c.end - start);
            dev.time.dp_comm += lost;
            dev.compute_free = start + lost;
          }
          break;
        }
        case OpKind::kForward:
        case OpKind::kBackward:
        case OpKind::kBackwardInput:
        case OpKind::kBackwardWeight: {
          auto& gathers = dev.pending_gathers[in.stage / pp_];
          // The stage's parameters: gathered whole before the first pass (ZeRO-1/2, distributed optimizer), or
          // layer by layer under ZeRO-3, where the pass starts once its first layer has arrived and ends no
          // sooner than its last layer's compute after the gather ends.
          double gathered = 0;
          double gather_end = 0;
          const double layers = static_cast<double>(std::max<int64_t>(1, stages_[in.stage].parameter_layers));
          const PassSeconds p = op_seconds(in.op, in.stage, replica, in.micro_batch);
          if (!gathers.empty()) {
            const CollectiveState& g = collectives_[rank][gathers.front()];
            if (!g.resolved) {
              dev.waiting = true;
              return;
            }
            const bool per_layer = s_.layout.state_sharding == StateSharding::kZero3;
            gathered = per_layer ? g.start + (g.end - g.start) / layers : g.end;
            gather_end = per_layer ? g.end + p.total() / layers : 0;
            gathers.pop_front();
          }
          const double start = std::max({dev.compute_free, dev.ready, gathered});
          account_gap(dev, start, gathered > std::max(dev.compute_free, dev.ready), false);
          const double end = std::max(start + p.total(), gather_end);
          dev.time.dp_comm += end - (start + p.total());
          dev.time.compute += p.compute;
          dev.time.tp_comm += p.comm;
          dev.compute_free = end;
          dev.ready = 0;
          dev.any_compute = true;
          dev.last_pass_end = end;
          record(d, TimelineEvent::Stream::kCompute, in, start, end, p.comm);
          if (in.op == OpKind::kForward) {
            ++dev.forwards_done;
            dev.activation_bytes += stage_activation_bytes(in.stage, replica, in.micro_batch);
            note_memory(d, end);
            count_flops(in.stage, replica, in.micro_batch);
          } else {
            // The input-gradient half frees all but the matmul inputs, which the weight gradient frees.
            const double all = stage_activation_bytes(in.stage, replica, in.micro_batch);
            const double weight_inputs = stage_activation_bytes(in.stage, replica, in.micro_batch, true);
            dev.activation_bytes -= in.op == OpKind::kBackward        ? all
                                    : in.op == OpKind::kBackwardInput ? all - weight_inputs
                                                                      : weight_inputs;
            note_memory(d, end);
          }
          break;
        }
        case OpKind::kEncoderKernels: {
          const int c = layer_component_[in.layer];
          const LayerSpec& spec = model_.components[c].layers[in.layer - first_layer_of(c)];
          LayerWork w;
          w.layer = &spec;
          w.pass = in.pass;
          w.batch = batch_for(c, load(replica, in.micro_batch));
          w.sharding = sharding(c);
          w.trainable = model_.components[c].trainable;
          w.recompute = s_.recompute[in.layer];
          w.dtype = options_.dtype;
          const LayerCost lc = cost_.layer_cost(w);
          PassSeconds p;
          const int end_kernel = std::min<int>(in.kernel_end, static_cast<int>(lc.kernels.size()));
          for (int k = in.kernel_begin; k < end_kernel; ++k) {
            const Kernel& kernel = lc.kernels[k];
            (kernel.kind == Kernel::Kind::kCompute ? p.compute : p.comm) += kernel.seconds;
          }
          const double start = std::max(dev.compute_free, dev.ready);
          account_gap(dev, start, false, false);
          dev.time.compute += p.compute;
          dev.time.tp_comm += p.comm;
          dev.compute_free = start + p.total();
          dev.ready = 0;
          record(d, TimelineEvent::Stream::kCompute, in, start, dev.compute_free, p.comm);
          break;
        }
        case OpKind::kWaveBoundary: {
          // A barrier over every device: all cross their k-th boundary together.
          const size_t k = dev.waves_crossed;
          if (waves_.size() <= k) waves_.resize(k + 1);
          WaveState& w = waves_[k];
          if (!dev.at_wave) {
            dev.at_wave = true;
            w.release = std::max(w.release, dev.compute_free);
            if (++w.arrived == static_cast<int>(devices_.size())) {
              for (size_t other = 0; other < devices_.size(); ++other) {
                if (devices_[other].waiting) work.push_back(static_cast<int>(other));
              }
            }
          }
          if (w.arrived < static_cast<int>(devices_.size())) {
            dev.waiting = true;
            return;
          }
          account_gap(dev, w.release, false, true);
          dev.compute_free = std::max(dev.compute_free, w.release);
          dev.at_wave = false;
          ++dev.waves_crossed;
          break;
        }
        case OpKind::kAllocate:
          dev.activation_bytes += static_cast<double>(in.bytes);
          note_memory(d, dev.compute_free);
          break;
        case OpKind::kFree: {
          // The matching allocation's size.
          for (size_t k = dev.pc; k-- > 0;) {
            const Instruction& a = program[k];
            if (a.op == OpKind::kAllocate && a.buffer == in.buffer) {
              dev.activation_bytes -= static_cast<double>(a.bytes);
              break;
            }
          }
          note_memory(d, dev.compute_free);
          break;
        }
      }
      ++events_;
      ++dev.pc;
    }
  }

  struct WaveState {
    int arrived = 0;
    double release = 0;
  };
  std::vector<WaveState> waves_;

  void resolve(int rank, int64_t k, const Instruction& in, std::deque<int>& work) {
    CollectiveState& c = collectives_[rank][k];
    const double previous = k > 0 ? collectives_[rank][k - 1].end : 0;
    const double start = std::max(c.ready, previous);
    c.start = start;
    c.end = start + collective_duration(in);
    c.resolved = true;
    for (int replica = 0; replica < replicas_; ++replica) {
      const int d = replica * pp_ + rank;
      Device& dev = devices_[d];
      dev.coll_free = c.end;
      if (in.tensor == CollectiveTensor::kGradients) dev.grads_ready = std::max(dev.grads_ready, c.end);
      if (!shares_compute()) record(d, TimelineEvent::Stream::kCollective, in, start, c.end);
      if (dev.waiting) work.push_back(d);
    }
  }

  void execute() {
    const int device_count = replicas_ * pp_;
    devices_.resize(device_count);
    arrivals_.assign(replicas_, std::vector<double>(2 * s_.stages.size() * s_.micro_batches, -1.0));
    collectives_.resize(pp_);
    collective_index_.resize(pp_);
    rank_state_bytes_.assign(pp_, 0);
    for (int r = 0; r < pp_; ++r) {
      const auto& program = s_.programs[r].instructions;
      collective_index_[r].assign(program.size(), -1);
      int64_t k = 0;
      int forwards = 0;
      for (size_t i = 0; i < program.size(); ++i) {
        if (program[i].op == OpKind::kCollective) collective_index_[r][i] = k++;
        if (program[i].op == OpKind::kForward) ++forwards;
      }
      collectives_[r].assign(static_cast<size_t>(k), {});
      for (int replica = 0; replica < replicas_; ++replica) {
        Device& dev = devices_[replica * pp_ + r];
        dev.forwards_total = forwards;
        dev.pending_gathers.resize(s_.layout.vpp);
      }
      rank_state_bytes_[r] = rank_state_bytes(s_, model_, r);
    }
    if (options_.timeline) {
      timeline_.resize(device_count);
      memory_.resize(device_count);
    }
    for (int d = 0; d < device_count; ++d) note_memory(d, 0);
    std::deque<int> work;
    for (int d = 0; d < device_count; ++d) work.push_back(d);
    while (!work.empty()) {
      const int d = work.front();
      work.pop_front();
      advance(d, work);
    }
    for (int d = 0; d < device_count; ++d) {
      if (devices_[d].pc < s_.programs[d % pp_].instructions.size()) {
        fail("the schedule deadlocks: replica {} rank {} waits at instruction {} ({})", d / pp_, d % pp_,
             devices_[d].pc, op_kind_name(s_.programs[d % pp_].instructions[devices_[d].pc].op));
      }
    }
  }

  SimResult finish() {
    SimResult out;
    const int device_count = replicas_ * pp_;
    const ParallelLayout& l = s_.layout;
    // Pipeline ends per replica, and the slowest replica's.
    std::vector<double> pipe_end(replicas_, 0);
    double all_end = 0;
    for (int d = 0; d < device_count; ++d) {
      pipe_end[d / pp_] = std::max(pipe_end[d / pp_], devices_[d].last_pass_end);
    }
    for (double e : pipe_end) all_end = std::max(all_end, e);
    // The global gradient norm: every device's optimizer starts once every gradient is reduced.
    double step_start = 0;
    for (const Device& dev : devices_) step_start = std::max({step_start, dev.compute_free, dev.grads_ready});
    double iteration = step_start;
    std::vector<double> step_seconds(pp_, 0);
    for (int r = 0; r < pp_; ++r) {
      for (int chunk = 0; chunk < l.vpp; ++chunk) step_seconds[r] += stages_[chunk * pp_ + r].optimizer_seconds;
      iteration = std::max(iteration, step_start + step_seconds[r]);
      out.optimizer_seconds = std::max(out.optimizer_seconds, step_seconds[r]);
    }
    out.iteration_seconds = iteration;
    for (int d = 0; d < device_count; ++d) {
      Device& dev = devices_[d];
      TimeBreakdown& t = dev.time;
      // The tail after the device's own work: its pipeline, then slower replicas, then exposed reductions.
      const double own_end = dev.compute_free;
      const double pipeline = std::max(own_end, std::min(pipe_end[d / pp_], step_start));
      const double replicas = std::max(pipeline, std::min(all_end, step_start));
      t.pp_cooldown += pipeline - own_end;
      t.dp_wait += replicas - pipeline;
      t.dp_comm += step_start - replicas;
      t.compute += step_seconds[d % pp_];
      t.pp_other += std::max(0.0, iteration - step_start - step_seconds[d % pp_]);
      if (options_.timeline) {
        TimelineEvent e;
        e.rank = d % pp_;
        e.op = OpKind::kCollective;
        e.start_seconds = step_start;
        e.end_seconds = step_start + step_seconds[d % pp_];
        if (e.end_seconds > e.start_seconds) timeline_[d].push_back(e);
      }
      out.per_device.push_back(t);
    }
    // The critical device: its last pass ends last.
    int critical = 0;
    for (int d = 1; d < device_count; ++d) {
      if (devices_[d].last_pass_end > devices_[critical].last_pass_end) critical = d;
    }
    out.critical = out.per_device[critical];
    out.critical_replica = critical / pp_;
    out.critical_rank = critical % pp_;
    for (const TimeBreakdown& t : out.per_device) {
      out.mean.compute += t.compute / device_count;
      out.mean.pp_warmup += t.pp_warmup / device_count;
      out.mean.pp_cooldown += t.pp_cooldown / device_count;
      out.mean.pp_other += t.pp_other / device_count;
      out.mean.tp_comm += t.tp_comm / device_count;
      out.mean.dp_comm += t.dp_comm / device_count;
      out.mean.dp_wait += t.dp_wait / device_count;
    }
    out.bubble_fraction =
        iteration > 0 ? (out.critical.pp_warmup + out.critical.pp_cooldown + out.critical.pp_other) / iteration : 0;
    out.peak_memory_bytes.assign(pp_, 0);
    out.state_memory_bytes = rank_state_bytes_;
    for (int d = 0; d < device_count; ++d) {
      out.peak_memory_bytes[d % pp_] = std::max(out.peak_memory_bytes[d % pp_], devices_[d].peak_bytes);
    }
    out.usable_memory_bytes = cluster_.usable_memory_bytes();
    for (double peak : out.peak_memory_bytes) out.oom = out.oom || peak > out.usable_memory_bytes;
    out.devices = l.devices();
    out.simulated_devices = device_count;
    out.streams = static_cast<int64_t>(device_count) * (shares_compute() ? 1 : 3);
    out.events = events_;
    // The model FLOPs of one replica, counted once per tensor group: the whole model's work.
    out.model_flops = model_flops_;
    out.hardware_flops = hardware_flops_;
    const double peak = static_cast<double>(out.devices) * cluster_.device.bf16_flops_per_second;
    if (iteration > 0 && peak > 0) {
      out.mfu = out.model_flops / (iteration * peak);
      out.hfu = out.hardware_flops / (iteration * peak);
    }
    if (options_.timeline) {
      out.timeline_replica = out.critical_replica;
      for (int r = 0; r < pp_; ++r) {
        const int d = out.critical_replica * pp_ + r;
        out.timeline.insert(out.timeline.end(), timeline_[d].begin(), timeline_[d].end());
        out.memory_timeline.insert(out.memory_timeline.end(), memory_[d].begin(), memory_[d].end());
      }
    }
    return out;
  }
};

}  // namespace

SimResult simulate(const Schedule& schedule, const ModelSpec& model, const ClusterSpec& cluster,
                   const CostModel& cost, const DeviceEfficiency& efficiency, const MicroBatchLoads& loads,
                   const SimOptions& options) {
  return Simulator(schedule, model, cluster, cost, efficiency, loads, options).run();
}

}  // namespace fulcrum

#include "fulcrum/sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "fulcrum/core/error.h"
#include "fulcrum/core/sorted_ids.h"
#include "fulcrum/cost/activation_memory.h"
#include "fulcrum/cost/collective_cost.h"
#include "fulcrum/cost/reshard_cost.h"
#include "fulcrum/cost/training_state_memory.h"

namespace fulcrum {

MicroBatchLoads uniform_loads(int micro_batches, int64_t sequences, int64_t tokens, int64_t vision) {
  MicroBatchLoad load;
  load.sequences = sequences;
  load.llm_tokens = sequences * tokens;
  load.llm_tokens_squared = sequences * tokens * tokens;
  load.vision = sequences * vision;
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
    const int64_t t =
        c.role == ComponentRole::kProjector ? encoder->projected_tokens_per_item() : encoder->tokens_per_item;
    return {mb.vision, mb.vision * t, mb.vision * t * t};
  }
  // Dynamic resolution: one image per sample, its patch tokens.
  const int64_t tokens = std::max<int64_t>(1, mb.vision / merge);
  const int64_t sequences = std::max<int64_t>(1, mb.sequences);
  return {sequences, tokens, tokens * tokens / sequences};
}

std::vector<std::map<std::pair<int, int>, HeldParameters>> multitask_parameters_by_device(const Schedule& schedule,
                                                                                          const ModelSpec& model,
                                                                                          int devices) {
  std::vector<std::map<std::pair<int, int>, HeldParameters>> held(static_cast<size_t>(std::max(0, devices)));
  // The devices holding each layer, merged slice by slice (each slice's devices are sorted), once for all devices:
  // thousands of devices times every layer, so neither a sort of the repeats nor a merge per device.
  std::map<std::pair<int, int>, std::vector<int32_t>> holders;
  for (const TaskSlice& sl : schedule.tasks.slices) {
    const ComponentSpec& c = model.components.at(sl.component);
    for (int64_t l = sl.first_layer; l < int64_t{sl.first_layer} + sl.layers; ++l) {
      const std::pair<int, int> key{sl.component, static_cast<int>(l)};
      merge_sorted_ids(holders[key], sl.devices);
      const int64_t share = c.layers.at(l).parameters() / std::max(1, sl.tp);
      for (int32_t d : sl.devices) {
        if (d < 0 || d >= devices) continue;
        HeldParameters& h = held[static_cast<size_t>(d)][key];
        h.parameters = std::max(h.parameters, share);
        h.tp = std::max(h.tp, sl.tp);
      }
    }
  }
  for (auto& device : held) {
    for (auto& [key, h] : device) h.replicas = std::max<int64_t>(1, static_cast<int64_t>(holders[key].size()) / h.tp);
  }
  return held;
}

std::map<std::pair<int, int>, HeldParameters> multitask_device_parameters(const Schedule& schedule,
                                                                          const ModelSpec& model, int device) {
  if (device < 0) return {};
  return std::move(multitask_parameters_by_device(schedule, model, device + 1)[static_cast<size_t>(device)]);
}

// Each device keeps the parameters (its tensor-parallel share) of every layer its slices run, once, their optimizer
// state sharded as the schedule says over the layer's replicas.
double multitask_state_bytes(const std::map<std::pair<int, int>, HeldParameters>& held, const ModelSpec& model,
                             StateSharding sharding) {
  double bytes = 0;
  for (const auto& [key, h] : held) {
    bytes += training_state_bytes(h.parameters, h.replicas, sharding, model.components[key.first].trainable).total();
  }
  return bytes;
}

double rank_state_bytes(const Schedule& schedule, const ModelSpec& model, int rank) {
  const ParallelLayout& l = schedule.layout;
  if (schedule.tasks.present()) {
    return multitask_state_bytes(multitask_device_parameters(schedule, model, rank), model, l.state_sharding);
  }
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
  // An encoder section puts one encoder stage on every device of the rank, replicated over the encoder's dp.
  const EncoderSection& enc = schedule.encoder;
  if (enc.present()) {
    const int e = enc.stage_on_rank(l, rank);
    std::vector<int64_t> params(model.components.size(), 0);
    for (const StageLayers& range : enc.stages.at(e)) {
      for (int32_t i = range.first_layer; i < range.end_layer; ++i) params[component_of[i]] += layer[i]->parameters() / enc.tp;
    }
    for (size_t c = 0; c < params.size(); ++c) {
      if (params[c] > 0) bytes += training_state_bytes(params[c], enc.dp, l.state_sharding, model.components[c].trainable).total();
    }
  }
  return bytes;
}

namespace {

constexpr double kLogitBytes = 4;  // fp32 logits kept for the loss

// Layers of equal shape in one component cost the same: their costs are computed once per micro-batch.
struct LayerClass {
  const LayerSpec* layer = nullptr;
  int component = 0;
  // The recomputation modes its layers run with in this schedule (priced_recompute bits): only those are priced.
  uint8_t recomputes = 0;
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

// A layer class's pass seconds (compute and collectives) summed over a replica's micro-batches.
struct ClassTotals {
  double forward = 0, backward = 0, backward_input = 0, backward_weight = 0;
  double recompute_selective = 0, recompute_full = 0;
};

// Which of a ClassCost's prices are worked out (bits): the passes every schedule runs, and each recomputation.
constexpr uint8_t kPricedPasses = 1;
constexpr uint8_t priced_recompute(Recompute r) { return static_cast<uint8_t>(1u << static_cast<int>(r)); }

}  // namespace

struct PassPriceMemo::Key {
  const MicroBatchLoads* loads = nullptr;
  const ModelSpec* model = nullptr;
  const CostModel* cost = nullptr;
  int replicas = 0;
  int micro_batches = 0;
  Dtype dtype = Dtype::kBf16;
  bool dropout = false;
  std::vector<std::tuple<int, bool, int>> shardings;  // per component: tp, sequence parallel, cp

  bool operator==(const Key& o) const {
    return std::tie(loads, model, cost, replicas, micro_batches, dtype, dropout, shardings) ==
           std::tie(o.loads, o.model, o.cost, o.replicas, o.micro_batches, o.dtype, o.dropout, o.shardings);
  }
};

// (load index × classes + class) → prices, and which of them are worked out; and per (replica × classes +
// class), the seconds of each pass summed over the replica's micro-batches (the bound a search gives up by).
struct PassPriceMemo::Table {
  std::vector<ClassCost> costs;
  std::vector<uint8_t> priced;
  std::vector<ClassTotals> totals;
  std::vector<uint8_t> totalled;  // which of the totals are summed, as `priced`
  size_t bytes() const {
    return costs.capacity() * sizeof(ClassCost) + priced.capacity() + totals.capacity() * sizeof(ClassTotals) +
           totalled.capacity();
  }
};

struct PassPriceMemo::Impl {
  size_t max_tables = 0;
  size_t max_bytes = 0;
  size_t bytes = 0;  // of the tables held
  mutable std::mutex mutex;
  std::list<std::pair<Key, std::unique_ptr<Table>>> tables;  // most recently put first

  void drop_last() {
    bytes -= tables.back().second->bytes();
    tables.pop_back();
  }
};

PassPriceMemo::PassPriceMemo(size_t max_tables, size_t max_bytes) : impl_(std::make_unique<Impl>()) {
  impl_->max_tables = std::max<size_t>(1, max_tables);
  impl_->max_bytes = max_bytes;
}

PassPriceMemo::~PassPriceMemo() = default;

std::unique_ptr<PassPriceMemo::Table> PassPriceMemo::take(const Key& key) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (auto it = impl_->tables.begin(); it != impl_->tables.end(); ++it) {
    if (it->first == key) {
      std::unique_ptr<Table> table = std::move(it->second);
      impl_->bytes -= table->bytes();
      impl_->tables.erase(it);
      return table;
    }
  }
  return nullptr;
}

void PassPriceMemo::put(const Key& key, std::unique_ptr<Table> table) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  // Another simulation of the same step may have put its own back meanwhile: the later one replaces it.
  for (auto it = impl_->tables.begin(); it != impl_->tables.end();) {
    if (it->first == key) {
      impl_->bytes -= it->second->bytes();
      it = impl_->tables.erase(it);
    } else {
      ++it;
    }
  }
  impl_->bytes += table->bytes();
  impl_->tables.emplace_front(key, std::move(table));
  while (impl_->tables.size() > 1 &&
         (impl_->tables.size() > impl_->max_tables || impl_->bytes > impl_->max_bytes)) {
    impl_->drop_last();
  }
}

size_t PassPriceMemo::tables() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->tables.size();
}

size_t PassPriceMemo::bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->bytes;
}

namespace {

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

// An encoder stage (EncoderSection) on one of its devices.
struct EncoderStageInfo {
  double gradient_bytes = 0;
  double parameter_bytes = 0;
  double optimizer_seconds = 0;
  // The activations it sends on: the last running layer of each of its ranges (component, width).
  std::vector<std::pair<int, int64_t>> boundaries;
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
  bool waiting = false;
  double activation_bytes = 0;
  double peak_bytes = 0;
  std::vector<std::deque<int64_t>> pending_gathers;  // per stage of the rank: collective indices not yet used
  // multitask: sync groups reached and not yet started, in program order (a list: no allocation while empty,
  // where a deque allocates on construction, for every device of every simulation)
  std::list<int> sync_pending;
  TimeBreakdown time;
  // With an encoder section, the rank's tensor slices run their own encoder pipelines: compute_free is slice 0's
  // compute stream (the device whose time is broken down), slice_free[b] slice b's for b ≥ 1. An LLM pass takes
  // every slice.
  std::vector<double> slice_free;
  std::vector<double> slice_ready;  // when the inputs received for a slice's next encoder kernels are there
  std::vector<double> encoder_done;  // end of a slice's last encoder kernels
  std::vector<int> encoder_collectives_seen;  // per slice
  double llm_done = 0;  // end of the last LLM pass: what the LLM's sends wait for
  // The last LLM pass, whose tensor-parallel gaps encoder kernels inside it fill: spread evenly over the pass.
  bool in_pass = false;
  double pass_start = 0;
  double pass_end = 0;
  double pass_gap_seconds = 0;
  std::vector<double> gap_left;  // per slice: gap seconds not yet filled
  std::vector<double> gap_at;    // per slice: where in the pass its filling has reached
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
  ~Simulator() {
    if (options_.memo && prices_) options_.memo->put(prices_key_, std::move(prices_));
  }
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  void build() {
    check_inputs();
    build_layers();
    build_stages();
    build_encoder_stages();
    build_slices();
  }

  SimResult run() {
    build();
    SimResult bound;
    if (gives_up(bound)) return bound;
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
  std::unordered_map<const Instruction*, std::vector<double>> freed_;  // freed_bytes() by program
  std::vector<int> layer_class_;       // per flattened layer, -1 for layers the model does not use
  std::vector<int> layer_component_;   // per flattened layer
  std::vector<LayerClass> classes_;
  std::vector<StageInfo> stages_;
  // (load index × classes + class) → cost, worked out on first use; from options_.memo when it has them.
  std::unique_ptr<PassPriceMemo::Table> prices_;
  PassPriceMemo::Key prices_key_;
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
    if (s_.tasks.present()) {
      check_slices();
      return;
    }
    check_encoder_section();
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

  // A multitask schedule's slices name layers the model has, on tensor-parallel degrees their heads allow.
  void check_slices() {
    replicas_ = 1;
    int64_t layers = 0;
    for (const ComponentSpec& c : model_.components) layers += static_cast<int64_t>(c.layers.size());
    if (layers != s_.model_layers) {
      fail("the schedule covers {} layers but model '{}' has {}", s_.model_layers, model_.name, layers);
    }
    for (size_t i = 0; i < s_.tasks.slices.size(); ++i) {
      const TaskSlice& sl = s_.tasks.slices[i];
      if (sl.component < 0 || sl.component >= static_cast<int>(model_.components.size()) ||
          sl.first_layer + static_cast<int64_t>(sl.layers) >
              static_cast<int64_t>(model_.components[sl.component].layers.size())) {
        fail("slice {} names layers [{}, {}) of component {}, which model '{}' does not have", i, sl.first_layer,
             int64_t{sl.first_layer} + sl.layers, sl.component, model_.name);
      }
      const ComponentSpec& c = model_.components[sl.component];
      const int64_t heads = c.attention_heads(), kv = c.kv_heads();
      if (sl.tp > 1 && (heads == 0 || heads % sl.tp != 0 || (kv % sl.tp != 0 && sl.tp % kv != 0))) {
        fail("slice {}: tensor parallelism {} does not divide the heads of component '{}'", i, sl.tp, c.name);
      }
    }
    for (size_t g = 0; g < s_.tasks.sync_groups.size(); ++g) {
      for (const auto& [component, layer] : s_.tasks.sync_groups[g].layers) {
        if (component < 0 || component >= static_cast<int>(model_.components.size()) || layer < 0 ||
            layer >= static_cast<int>(model_.components[component].layers.size())) {
          fail("sync group {} names layer {} of component {}, which model '{}' does not have", g, layer, component,
               model_.name);
        }
      }
    }
    check_copies_are_synchronised();
  }

  // A trainable layer held by more than one copy of its shards (slices of several tasks, or data parallelism)
  // needs a sync group over exactly the devices that hold it; without it the copies train apart and nothing
  // fails. A layer in two groups, or a group over other devices than its layers', would all-reduce other bytes
  // over other devices than the copies hold.
  void check_copies_are_synchronised() const {
    struct Holders {
      std::vector<int> devices;
      int tp = 0;  // the shards every slice's split refines
    };
    std::map<std::pair<int, int>, Holders> held;
    for (const TaskSlice& sl : s_.tasks.slices) {
      for (int64_t l = sl.first_layer; l < int64_t{sl.first_layer} + sl.layers; ++l) {
        Holders& h = held[{sl.component, static_cast<int>(l)}];
        h.devices.insert(h.devices.end(), sl.devices.begin(), sl.devices.end());
        h.tp = std::gcd(h.tp, static_cast<int>(sl.tp));
      }
    }
    for (auto& [key, h] : held) {
      std::sort(h.devices.begin(), h.devices.end());
      h.devices.erase(std::unique(h.devices.begin(), h.devices.end()), h.devices.end());
    }
    std::map<std::pair<int, int>, size_t> group_of;
    for (size_t g = 0; g < s_.tasks.sync_groups.size(); ++g) {
      const SyncGroupSpec& group = s_.tasks.sync_groups[g];
      for (const std::pair<int, int>& key : group.layers) {
        const auto [component, layer] = key;
        const std::string name = fmt::format("layer {} of component '{}'", layer, model_.components[component].name);
        const auto [at, added] = group_of.emplace(key, g);
        if (!added) {
          fail("{} is in sync group {} and again in sync group {}: its gradients would be all-reduced twice", name,
               at->second, g);
        }
        const auto h = held.find(key);
        const std::vector<int> holders = h == held.end() ? std::vector<int>{} : h->second.devices;
        if (!std::equal(group.devices.begin(), group.devices.end(), holders.begin(), holders.end())) {
          fail("sync group {} spans devices {}, but {} is held by devices {}", g, fmt::join(group.devices, ","), name,
               fmt::join(holders, ","));
        }
      }
    }
    for (const auto& [key, h] : held) {
      const auto [component, layer] = key;
      if (!model_.components[component].trainable) continue;
      if (model_.components[component].layers[layer].parameters() == 0) continue;
      if (static_cast<int>(h.devices.size()) / std::gcd(h.tp, static_cast<int>(h.devices.size())) < 2) continue;
      if (group_of.count(key) == 0) {
        fail("layer {} of component '{}' is held by devices {} and no sync group over all of them keeps its copies "
             "equal",
             layer, model_.components[component].name, fmt::join(h.devices, ","));
      }
    }
  }

  // What the simulator relies on beyond validate(): the section's shape and its map of micro-batches.
  void check_encoder_section() {
    const EncoderSection& enc = s_.encoder;
    if (!enc.present()) return;
    const ParallelLayout& l = s_.layout;
    if (enc.pp < 1 || enc.tp < 1 || l.pp % enc.pp != 0 || l.tp % enc.tp != 0 ||
        enc.pipelines != (l.pp / enc.pp) * (l.tp / enc.tp) || static_cast<int>(enc.stages.size()) != enc.pp ||
        static_cast<int>(enc.llm_micro_batch.size()) != enc.pipelines) {
      fail("the encoder section (pp {}, tp {}, {} pipelines) does not fit the LLM's pp {} and tp {}", enc.pp, enc.tp,
           enc.pipelines, l.pp, l.tp);
    }
    encoder_of_llm_.assign(enc.pipelines, std::vector<int>(s_.micro_batches, -1));
    std::vector<int> fed(s_.micro_batches, 0);
    for (int j = 0; j < enc.pipelines; ++j) {
      encoder_max_micro_batches_ = std::max(encoder_max_micro_batches_, enc.micro_batches(j));
      for (int k = 0; k < enc.micro_batches(j); ++k) {
        const int i = enc.llm_micro_batch[j][k];
        if (i < 0 || i >= s_.micro_batches || fed[i]++) {
          fail("encoder pipeline {}'s micro-batch {} feeds LLM micro-batch {}, which is not one of the {} or is fed "
               "twice", j, k, i, s_.micro_batches);
        }
        encoder_of_llm_[j][i] = k;
      }
    }
    for (int i = 0; i < s_.micro_batches; ++i) {
      if (!fed[i]) fail("no encoder micro-batch feeds LLM micro-batch {}", i);
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
        classes_[cls].recomputes |= priced_recompute(rc);
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

  // A multitask slice's passes over all its micro-batches on one of its devices.
  struct SliceCost {
    PassSeconds forward, backward;
    double activation_bytes = 0;  // kept from its forward to its backward
    double model_flops = 0;       // of the whole slice, every device together
    double recompute_flops = 0;   // likewise, of its recomputation
    double output_bytes = 0;      // its output, all its rows
  };
  std::vector<SliceCost> slice_costs_;

  static PassSeconds seconds_of(const LayerCost& lc) {
    PassSeconds out;
    if (lc.kernels.empty()) {
      out.compute = lc.seconds;
      return out;
    }
    for (const Kernel& k : lc.kernels) (k.kind == Kernel::Kind::kCompute ? out.compute : out.comm) += k.seconds;
    return out;
  }

  // Whether a slice's tensor-parallel groups of at most a node's devices (tp consecutive ones of its sorted
  // devices each) lie across a node boundary: placed where no block of a node was free, they run their collectives
  // at the network's rate. A wider group is priced over the network already.
  bool tensor_parallel_across_nodes(const TaskSlice& sl) const {
    const int per_node = std::max(1, cluster_.device.devices_per_node);
    if (sl.tp <= 1 || sl.tp > per_node) return false;
    for (size_t k = 0; k + static_cast<size_t>(sl.tp) <= sl.devices.size(); k += static_cast<size_t>(sl.tp)) {
      if (sl.devices[k] / per_node != sl.devices[k + sl.tp - 1] / per_node) return true;
    }
    return false;
  }

  void build_slices() {
    for (const TaskSlice& sl : s_.tasks.slices) {
      SliceCost cost;
      const ComponentSpec& c = model_.components[sl.component];
      const int64_t per_device = sl.sequences / sl.dp;
      const double micro = static_cast<double>(sl.micro_batches);
      TensorSharding sharding;
      sharding.tp = sl.tp;
      sharding.sequence_parallel = sl.tp > 1;
      sharding.across_nodes = tensor_parallel_across_nodes(sl);
      int64_t width = 0;
      for (int64_t l = sl.first_layer; l < int64_t{sl.first_layer} + sl.layers; ++l) {
        const int64_t flat = first_layer_of(sl.component) + l;
        if (layer_class_[flat] < 0) continue;  // not run
        const LayerSpec& spec = c.layers[l];
        LayerWork w;
        w.layer = &spec;
        w.batch = {per_device, per_device * sl.tokens, per_device * sl.tokens * sl.tokens};
        w.sharding = sharding;
        w.trainable = c.trainable;
        w.dtype = options_.dtype;
        w.pass = Pass::kForward;
        cost.forward += scaled(seconds_of(cost_.layer_cost(w)), micro);
        // A frozen slice with nothing trained upstream has no backward: it keeps and recomputes nothing.
        const bool backward = c.trainable || sl.input_gradient;
        // The layer's recomputation (one mode for every task that runs it) before its backward.
        const Recompute rc = backward ? s_.recompute[flat] : Recompute::kNone;
        if (rc != Recompute::kNone) {
          w.pass = Pass::kRecompute;
          w.recompute = rc;
          cost.backward += scaled(seconds_of(cost_.layer_cost(w)), micro);
          w.recompute = Recompute::kNone;
          w.pass = Pass::kForward;
        }
        if (c.trainable) {
          cost.backward += scaled(seconds_of(backward_cost(cost_, w)), micro);
        } else if (sl.input_gradient) {
          w.pass = Pass::kBackwardInput;  // a frozen layer still passes the gradient of its input back
          cost.backward += scaled(seconds_of(cost_.layer_cost(w)), micro);
        }
        if (backward) {
          cost.activation_bytes += micro * activation_bytes(spec, w.batch, sharding, rc, options_.dropout,
                                                            options_.dtype);
        }
        const TokenBatch whole{sl.sequences, sl.sequences * sl.tokens, sl.sequences * sl.tokens * sl.tokens};
        cost.model_flops += micro * model_flops(spec, whole, c.trainable);
        if (rc != Recompute::kNone) {
          cost.recompute_flops += micro * layer_flops(spec, Pass::kRecompute, whole, c.trainable, rc).total();
        }
        width = spec.hidden;
      }
      cost.output_bytes = activation_element_bytes(options_.dtype) * micro * static_cast<double>(sl.sequences) *
                          static_cast<double>(sl.tokens * width);
      slice_costs_.push_back(cost);
    }
  }

  void build_encoder_stages() {
    const EncoderSection& enc = s_.encoder;
    if (!enc.present()) return;
    const ParallelLayout& l = s_.layout;
    const double element = activation_element_bytes(options_.dtype);
    for (const std::vector<StageLayers>& ranges : enc.stages) {
      EncoderStageInfo info;
      std::map<int, int64_t> params_by_component;
      for (const StageLayers& range : ranges) {
        int32_t last = -1;
        for (int32_t layer = range.first_layer; layer < range.end_layer; ++layer) {
          const int c = layer_component_.at(layer);
          params_by_component[c] += model_.components[c].layers[layer - first_layer_of(c)].parameters();
          if (layer_class_[layer] >= 0) last = layer;
        }
        if (last >= 0) {
          const int c = layer_component_[last];
          info.boundaries.emplace_back(c, model_.components[c].layers[last - first_layer_of(c)].hidden);
        }
      }
      for (const auto& [c, params] : params_by_component) {
        if (!model_.components[c].trainable) continue;
        const int64_t per_device = params / enc.tp;
        info.parameter_bytes += element * static_cast<double>(per_device);
        info.gradient_bytes +=
            (l.state_sharding == StateSharding::kMegatronDistributedOptimizer ? 4 : element) * static_cast<double>(per_device);
        const bool sharded = l.state_sharding != StateSharding::kZero0;
        const double shard = sharded ? static_cast<double>(per_device) / enc.dp : static_cast<double>(per_device);
        info.optimizer_seconds +=
            kOptimizerStepBytesPerParameter * shard / (cluster_.device.memory_bytes_per_second * eff_.memory);
      }
      encoder_stages_.push_back(std::move(info));
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

  void open_prices() {
    const size_t entries = static_cast<size_t>(replicas_) * s_.micro_batches * classes_.size();
    if (options_.memo) {
      prices_key_.loads = &loads_;
      prices_key_.model = &model_;
      prices_key_.cost = &cost_;
      prices_key_.replicas = replicas_;
      prices_key_.micro_batches = s_.micro_batches;
      prices_key_.dtype = options_.dtype;
      prices_key_.dropout = options_.dropout;
      for (int c = 0; c < static_cast<int>(model_.components.size()); ++c) {
        const TensorSharding t = sharding(c);
        prices_key_.shardings.emplace_back(t.tp, t.sequence_parallel, t.cp);
      }
      prices_ = options_.memo->take(prices_key_);
      if (prices_ && prices_->costs.size() == entries) return;
    }
    prices_ = std::make_unique<PassPriceMemo::Table>();
    prices_->costs.resize(entries);
    prices_->priced.assign(entries, 0);
  }

  const ClassCost& class_cost(int replica, int micro_batch, int cls) {
    if (!prices_) open_prices();
    const size_t key = static_cast<size_t>(load_index(replica, micro_batch)) * classes_.size() + cls;
    const LayerClass& lc = classes_[cls];
    const uint8_t wanted = kPricedPasses | (lc.recomputes & (priced_recompute(Recompute::kSelective) |
                                                             priced_recompute(Recompute::kFull)));
    uint8_t& priced = prices_->priced[key];
    ClassCost& cc = prices_->costs[key];
    if ((priced & wanted) == wanted) return cc;
    const ComponentSpec& comp = model_.components[lc.component];
    const TokenBatch batch = batch_for(lc.component, load(replica, micro_batch));
    if (batch.tokens > 0) {
      LayerWork w;
      w.layer = lc.layer;
      w.batch = batch;
      w.sharding = sharding(lc.component);
      w.trainable = comp.trainable;
      w.dtype = options_.dtype;
      if (!(priced & kPricedPasses)) {
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
        for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
          const int i = static_cast<int>(r);
          cc.activation_bytes[i] =
              activation_bytes(*lc.layer, batch, w.sharding, r, options_.dropout, options_.dtype);
          cc.weight_input_bytes[i] =
              std::min(cc.activation_bytes[i], weight_gradient_input_bytes(*lc.layer, batch, w.sharding));
          cc.recompute_flops[i] =
              r == Recompute::kNone ? 0 : layer_flops(*lc.layer, Pass::kRecompute, batch, comp.trainable, r).total();
        }
        if (lc.layer->kind == LayerKind::kLmHead) {
          cc.activation_bytes[0] = cc.activation_bytes[1] = cc.activation_bytes[2] =
              kLogitBytes * static_cast<double>(batch.tokens) * static_cast<double>(lc.layer->vocab) / w.sharding.tp;
        }
        cc.model_flops = model_flops(*lc.layer, batch, comp.trainable);
      }
      // Recomputation is priced only in the modes the schedule runs the class with.
      w.pass = Pass::kRecompute;
      for (Recompute r : {Recompute::kSelective, Recompute::kFull}) {
        if (!(wanted & priced_recompute(r)) || (priced & priced_recompute(r))) continue;
        w.recompute = r;
        (r == Recompute::kSelective ? cc.recompute_selective : cc.recompute_full) = pass_seconds(w);
      }
    }
    priced |= wanted;
    return cc;
  }

  // A class's pass seconds summed over a replica's micro-batches (in the modes the schedule recomputes it in).
  const ClassTotals& class_totals(int replica, int cls) {
    if (!prices_) open_prices();
    const size_t key = static_cast<size_t>(load_index(replica, 0) / s_.micro_batches) * classes_.size() + cls;
    if (prices_->totals.empty()) {
      prices_->totals.resize(prices_->costs.size() / std::max(1, s_.micro_batches));
      prices_->totalled.assign(prices_->totals.size(), 0);
    }
    const uint8_t wanted = kPricedPasses | (classes_[cls].recomputes & (priced_recompute(Recompute::kSelective) |
                                                                        priced_recompute(Recompute::kFull)));
    ClassTotals& t = prices_->totals[key];
    if ((prices_->totalled[key] & wanted) == wanted) return t;
    t = ClassTotals{};
    for (int j = 0; j < s_.micro_batches; ++j) {
      const ClassCost& cc = class_cost(replica, j, cls);
      t.forward += cc.forward.total();
      t.backward += cc.backward.total();
      t.backward_input += cc.backward_input.total();
      t.backward_weight += cc.backward_weight.total();
      t.recompute_selective += cc.recompute_selective.total();
      t.recompute_full += cc.recompute_full.total();
    }
    prices_->totalled[key] = wanted;
    return t;
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
  // The compute a collective of `seconds` takes from each member on cores it shares with compute.
  double collective_compute_loss(double seconds) const {
    return cluster_.device.communication_compute_slowdown * seconds + cluster_.device.collective_compute_seconds;
  }

  void record(int device, TimelineEvent::Stream stream, const Instruction& in, double start, double end,
              double tp_comm = 0) {
    if (!options_.timeline) return;
    TimelineEvent e;
    e.rank = device % pp_;
    e.stream = stream;
    e.op = in.op;
    e.stage = in.stage;
    e.micro_batch = in.micro_batch;
    e.encoder_pipeline = in.encoder_pipeline;
    e.start_seconds = start;
    e.end_seconds = end;
    e.tp_comm_seconds = tp_comm;
    timeline_[device].push_back(e);
  }

  // On cores shared with communication (the cpu kind), the compute a transfer or collective takes, drawn on the
  // compute stream under its own op: what plans around the timeline's compute (the bubble scheduler) sees it.
  void record_cores_taken(int device, const Instruction& in, double start, double end) {
    if (end > start) record(device, TimelineEvent::Stream::kCompute, in, start, end);
  }

  // A transfer issued from shared cores at `issued`: it takes them for slowdown × its seconds from then and
  // queues behind the device's earlier transfers on the link. Returns the compute seconds it takes; `start` and
  // `end` get its time on the link.
  double transfer_on_shared_cores(int d, const Instruction& in, double issued, double seconds, double& start,
                                  double& end) {
    Device& dev = devices_[d];
    start = std::max(issued, dev.p2p_free);
    end = start + seconds;
    dev.p2p_free = end;
    const double lost = cluster_.device.communication_compute_slowdown * seconds;
    record_cores_taken(d, in, issued, issued + lost);
    return lost;
  }

  void note_memory(int device, double seconds) {
    Device& dev = devices_[device];
    const int rank = device % pp_;
    const double bytes = rank_state_bytes_[rank] + dev.activation_bytes;
    dev.peak_bytes = std::max(dev.peak_bytes, bytes);
    if (options_.timeline) memory_[device].push_back({rank, seconds, bytes});
  }

  std::vector<double> rank_state_bytes_;
  std::vector<std::map<std::pair<int, int>, HeldParameters>> held_by_device_;  // multitask: each device's layers
  std::vector<EncoderStageInfo> encoder_stages_;
  // Per replica: (payload, pipeline, sending encoder stage, encoder micro-batch) → seconds of arrival.
  std::vector<std::vector<double>> encoder_arrivals_;
  // [pipeline][LLM micro-batch] → the pipeline's encoder micro-batch that feeds it, -1 for none.
  std::vector<std::vector<int>> encoder_of_llm_;
  int encoder_max_micro_batches_ = 0;
  // [encoder stage][k]: its k-th collective over the encoder's data-parallel group.
  std::vector<std::vector<CollectiveState>> encoder_collectives_;
  // (replica, pipeline, encoder micro-batch, layer, pass) → kernels run and kernels the layer has.
  std::map<std::tuple<int, int, int, int, int>, std::pair<int, int>> encoder_kernels_run_;
  // Encoder layers with a backward on each pipeline rank: their forward keeps its activations until it runs.
  std::vector<std::set<int32_t>> encoder_backward_layers_;
  // (replica, encoder pipeline, micro-batch, layer) → the activation bytes its forward keeps on its device.
  std::map<std::tuple<int, int, int, int32_t>, double> encoder_kept_bytes_;

  // Puts idle time before a compute-stream interval starting at `start` into its cause.
  void account_gap(Device& dev, double start, bool gather_bound) {
    const double gap = start - dev.compute_free;
    if (gap <= 0) return;
    if (gather_bound) {
      dev.time.dp_comm += gap;
    } else if (!dev.any_compute) {
      dev.time.pp_warmup += gap;
    } else if (dev.forwards_done == dev.forwards_total) {
      dev.time.pp_cooldown += gap;
    } else {
      dev.time.pp_other += gap;
    }
  }

  // Encoder side (EncoderSection).
  int slice_of(const Instruction& in) const { return s_.encoder.slice_of(s_.layout, in.encoder_pipeline); }
  double& cursor(Device& dev, int slice) { return slice == 0 ? dev.compute_free : dev.slice_free[slice]; }
  double busiest_cursor(const Device& dev) const {
    double most = dev.compute_free;
    for (double f : dev.slice_free) most = std::max(most, f);
    return most;
  }
  size_t encoder_slot(Payload p, int pipeline, int stage, int k) const {
    return ((static_cast<size_t>(p == Payload::kGradient) * s_.encoder.pipelines + pipeline) * s_.encoder.pp + stage) *
               static_cast<size_t>(encoder_max_micro_batches_) + k;
  }
  int llm_micro_batch_of(int pipeline, int k) const { return s_.encoder.llm_micro_batch[pipeline][k]; }
  // What encoder stage `stage` sends on for an LLM micro-batch's images (and what comes back as its gradient).
  double encoder_p2p_bytes(int stage, int replica, int llm_micro_batch) {
    double bytes = 0;
    for (const auto& [c, width] : encoder_stages_[stage].boundaries) {
      const TokenBatch b = batch_for(c, load(replica, llm_micro_batch));
      const TensorSharding sh = sharding(c);
      bytes += activation_element_bytes(options_.dtype) * static_cast<double>(b.tokens) * static_cast<double>(width) /
               (sh.sequence_parallel ? sh.tp : 1);
    }
    return bytes;
  }
  int device_of(int replica, int rank) const { return replica * pp_ + rank; }
  // The seconds of a kernel range of an encoder layer's pass on an LLM micro-batch's images; records how much
  // of the layer has run, for the check that every kernel runs once.
  PassSeconds encoder_range_seconds(const Instruction& in, int replica) {
    const int c = layer_component_.at(in.layer);
    const int llm_mb = llm_micro_batch_of(in.encoder_pipeline, in.micro_batch);
    PassSeconds p;
    if (layer_class_[in.layer] < 0) return p;  // a layer the model does not use
    LayerWork w;
    w.layer = &model_.components[c].layers[in.layer - first_layer_of(c)];
    w.pass = in.pass;
    w.batch = batch_for(c, load(replica, llm_mb));
    if (w.batch.tokens <= 0) return p;  // no images in this micro-batch
    w.sharding = sharding(c);
    w.trainable = model_.components[c].trainable;
    w.recompute = s_.recompute[in.layer];
    w.dtype = options_.dtype;
    const LayerCost lc = in.pass == Pass::kBackward ? backward_cost(cost_, w) : cost_.layer_cost(w);
    const int kernels = lc.kernels.empty() ? 1 : static_cast<int>(lc.kernels.size());
    const double copies = replicas_ == 1 ? s_.layout.dp : 1;
    if (in.pass == Pass::kForward && in.kernel_begin == 0) {
      model_flops_ += copies * model_flops(*w.layer, w.batch, w.trainable);
      hardware_flops_ += copies * model_flops(*w.layer, w.batch, w.trainable);
    }
    if (in.pass == Pass::kRecompute && in.kernel_begin == 0) {
      hardware_flops_ += copies * layer_flops(*w.layer, Pass::kRecompute, w.batch, w.trainable, w.recompute).total();
    }
    if (in.kernel_end > kernels) {
      fail("encoder pipeline {} micro-batch {}: layer {}'s {} pass has {} kernels, the schedule runs [{}, {})",
           in.encoder_pipeline, in.micro_batch, in.layer, pass_label(in.pass), kernels, in.kernel_begin, in.kernel_end);
    }
    auto& run = encoder_kernels_run_[{replica, in.encoder_pipeline, in.micro_batch, in.layer, static_cast<int>(in.pass)}];
    run.first += in.kernel_end - in.kernel_begin;
    run.second = kernels;
    if (lc.kernels.empty()) {
      p.compute = lc.seconds;
      return p;
    }
    for (int k = in.kernel_begin; k < in.kernel_end; ++k) {
      (lc.kernels[k].kind == Kernel::Kind::kCompute ? p.compute : p.comm) += lc.kernels[k].seconds;
    }
    return p;
  }
  static std::string_view pass_label(Pass pass) {
    switch (pass) {
      case Pass::kForward: return "forward";
      case Pass::kBackward: return "backward";
      case Pass::kBackwardInput: return "input-gradient";
      case Pass::kBackwardWeight: return "weight-gradient";
      case Pass::kRecompute: return "recompute";
    }
    return "?";
  }

  // What an encoder layer pass's kernel range changes in its device's live activation bytes: the forward of a
  // layer with a backward on the device keeps the layer's activations from its first kernel (its input alone
  // when it recomputes, and the recomputation the rest from its first), the backward frees them after its last
  // (a frozen encoder's forward, with none, keeps nothing).
  double encoder_activation_change(int d, const Instruction& in) {
    const int replica = d / pp_;
    const std::tuple<int, int, int, int32_t> key{replica, in.encoder_pipeline, in.micro_batch, in.layer};
    if (in.pass == Pass::kForward || in.pass == Pass::kRecompute) {
      if (in.kernel_begin != 0 || !encoder_backward_layers_[d % pp_].count(in.layer) || layer_class_[in.layer] < 0) {
        return 0;
      }
      const int c = layer_component_.at(in.layer);
      const TokenBatch batch = batch_for(c, load(replica, llm_micro_batch_of(in.encoder_pipeline, in.micro_batch)));
      if (batch.tokens <= 0) return 0;
      const LayerSpec& layer = model_.components[c].layers[in.layer - first_layer_of(c)];
      const Recompute mode = s_.recompute[in.layer];
      const double kept = activation_bytes(layer, batch, sharding(c), mode, options_.dropout, options_.dtype);
      const double bytes =
          in.pass == Pass::kForward
              ? kept
              : activation_bytes(layer, batch, sharding(c), Recompute::kNone, options_.dropout, options_.dtype) - kept;
      encoder_kept_bytes_[key] += bytes;
      return bytes;
    }
    const auto run = encoder_kernels_run_.find({replica, in.encoder_pipeline, in.micro_batch, in.layer,
                                                static_cast<int>(in.pass)});
    if (run == encoder_kernels_run_.end() || run->second.first < run->second.second) return 0;  // not its last range
    const auto kept = encoder_kept_bytes_.find(key);
    if (kept == encoder_kept_bytes_.end()) return 0;
    const double bytes = kept->second;
    encoder_kept_bytes_.erase(kept);
    return -bytes;
  }

  // Encoder kernels on their tensor slice: inside the LLM pass before them (filling its tensor-parallel gaps,
  // their collectives slowing its compute), or after it on the slice's stream. What overruns the pass's gaps
  // runs after the pass and delays whatever comes next on the slice.
  void run_encoder_kernels(int d, const Instruction& in) {
    Device& dev = devices_[d];
    const int replica = d / pp_;
    const int b = slice_of(in);
    const PassSeconds p = encoder_range_seconds(in, replica);
    double& free = cursor(dev, b);
    const double ready = std::max(dev.slice_ready[b], dev.encoder_done[b]);
    double start, end;
    if (in.inside_pass && dev.in_pass && ready < dev.pass_end) {
      const double span = dev.pass_end - dev.pass_start;
      const double density = span > 0 ? dev.pass_gap_seconds / span : 0;
      start = std::max({dev.gap_at[b], ready, dev.pass_start});
      const double available = density > 0 ? std::min(dev.gap_left[b], density * (dev.pass_end - start)) : 0;
      const double fitted = std::min(p.compute, std::max(0.0, available));
      const double finish = density > 0 ? start + fitted / density : start;
      dev.gap_left[b] -= fitted;
      dev.gap_at[b] = finish;
      const double overrun = p.compute - fitted;
      const double contention = s_.encoder.collective_slowdown * p.comm;
      if (overrun > 0 || contention > 0) {
        const double from = std::max(free, dev.pass_end);
        if (b == 0) account_gap(dev, from, false);
        free = from + overrun + contention;
      }
      end = (overrun > 0 ? free - contention : finish) + p.comm;
      if (b == 0) {
        dev.time.tp_comm -= fitted;  // gaps of the pass now hold encoder compute
        dev.time.compute += p.compute + contention;
      }
    } else {
      start = std::max(free, ready);
      if (b == 0) {
        account_gap(dev, start, false);
        dev.time.compute += p.compute;
        dev.time.tp_comm += p.comm;
      }
      end = start + p.total();
      free = end;
    }
    dev.encoder_done[b] = end;
    dev.slice_ready[b] = 0;
    dev.last_pass_end = std::max(dev.last_pass_end, end);
    record(d, TimelineEvent::Stream::kCompute, in, start, end, p.comm);
    if (const double change = encoder_activation_change(d, in); change != 0) {
      dev.activation_bytes += change;
      note_memory(d, change > 0 ? start : end);
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
          if (s_.tasks.present()) {
            const auto it = slice_arrivals_.find({in.payload == Payload::kActivation ? 0 : 1, in.peer_stage, in.stage});
            if (it == slice_arrivals_.end() ||
                it->second.senders < static_cast<int>(s_.tasks.slices[in.peer_stage].devices.size())) {
              dev.waiting = true;
              return;
            }
            dev.ready = std::max(dev.ready, it->second.arrival);
            break;
          }
          double at;
          if (in.encoder_pipeline >= 0) {
            // From the previous encoder stage, or the gradient of the LLM micro-batch it fed from the LLM's first
            // stage (whose gradient slot towards a previous LLM stage is otherwise unused).
            at = in.peer_encoder_pipeline >= 0
                     ? encoder_arrivals_[replica][encoder_slot(in.payload, in.peer_encoder_pipeline, in.peer_stage,
                                                               in.micro_batch)]
                     : arrivals[arrival_slot(in.payload, in.peer_stage,
                                             llm_micro_batch_of(in.encoder_pipeline, in.micro_batch))];
          } else if (in.peer_encoder_pipeline >= 0) {
            const int k = encoder_of_llm_[in.peer_encoder_pipeline][in.micro_batch];
            at = k < 0 ? -1 : encoder_arrivals_[replica][encoder_slot(in.payload, in.peer_encoder_pipeline, in.peer_stage, k)];
          } else {
            at = arrivals[arrival_slot(in.payload, in.peer_stage, in.micro_batch)];
          }
          if (at < 0) {
            dev.waiting = true;
            return;
          }
          if (in.encoder_pipeline >= 0) {
            dev.slice_ready[slice_of(in)] = std::max(dev.slice_ready[slice_of(in)], at);
          } else {
            dev.ready = std::max(dev.ready, at);
          }
          break;
        }
        case OpKind::kSend: {
          if (s_.tasks.present()) {
            send_between_slices(d, in, work);
            break;
          }
          const bool encoder = in.encoder_pipeline >= 0;
          const bool to_encoder = in.peer_encoder_pipeline >= 0;
          // Between the encoder and the LLM both ways: the encoder's output for the LLM micro-batch it feeds.
          const double bytes =
              encoder      ? encoder_p2p_bytes(in.stage, replica, llm_micro_batch_of(in.encoder_pipeline, in.micro_batch))
              : to_encoder ? encoder_p2p_bytes(s_.encoder.pp - 1, replica, in.micro_batch)
                           : p2p_bytes(in.stage, replica, in.micro_batch);
          const int64_t distance = static_cast<int64_t>(s_.layout.dp) * s_.layout.tp;
          const double seconds = p2p_seconds(bytes, cluster_, eff_, distance);
          // What is sent is there when the pass that made it ends: the LLM's last pass, or the slice's encoder
          // kernels (without an encoder section, the device's compute stream as it stands).
          const double made = encoder ? dev.encoder_done[slice_of(in)]
                              : s_.encoder.present() ? dev.llm_done
                                                     : dev.compute_free;
          double start, end;
          if (shares_compute()) {
            // On the compute cores: it is issued when they are free and takes them for slowdown × its seconds;
            // the transfer itself queues behind the device's sends before it on the link.
            double& free = encoder ? cursor(dev, slice_of(in)) : dev.compute_free;
            const double issued = std::max(free, made);
            const double lost = transfer_on_shared_cores(d, in, issued, seconds, start, end);
            if (!encoder || slice_of(in) == 0) {
              account_gap(dev, issued, false);
              dev.time.pp_other += lost;
            }
            free = issued + lost;
          } else {
            start = std::max(dev.p2p_free, made);
            end = start + seconds;
            dev.p2p_free = end;
          }
          record(d, TimelineEvent::Stream::kP2p, in, start, end);
          int peer;
          if (encoder && in.peer_encoder_pipeline >= 0) {
            encoder_arrivals_[replica][encoder_slot(in.payload, in.encoder_pipeline, in.stage, in.micro_batch)] = end;
            peer = device_of(replica, s_.encoder.rank_of(s_.layout, in.peer_encoder_pipeline, in.peer_stage));
          } else if (encoder) {
            encoder_arrivals_[replica][encoder_slot(in.payload, in.encoder_pipeline, in.stage, in.micro_batch)] = end;
            peer = device_of(replica, s_.layout.rank_of_stage(in.peer_stage));
          } else if (to_encoder) {
            arrivals[arrival_slot(in.payload, in.stage, in.micro_batch)] = end;
            peer = device_of(replica, s_.encoder.rank_of(s_.layout, in.peer_encoder_pipeline, in.peer_stage));
          } else {
            arrivals[arrival_slot(in.payload, in.stage, in.micro_batch)] = end;
            peer = device_of(replica, s_.layout.rank_of_stage(in.peer_stage));
          }
          if (devices_[peer].waiting) work.push_back(peer);
          break;
        }
        case OpKind::kCollective: {
          if (s_.tasks.present()) {
            arrive_sync_group(d, in, work);
            break;
          }
          if (in.encoder_pipeline >= 0) {
            arrive_encoder_collective(d, in, work);
            break;
          }
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
            // loses slowdown × its seconds of compute, and the cost of starting it (a gather's result is still
            // waited for before use).
            if (!c.resolved) {
              dev.waiting = true;
              return;
            }
            const double start = std::max(dev.compute_free, c.end - collective_duration(in));
            account_gap(dev, start, true);
            const double lost = collective_compute_loss(c.end - start);
            dev.time.dp_comm += lost;
            dev.compute_free = start + lost;
            record_cores_taken(d, in, start, dev.compute_free);
          }
          break;
        }
        case OpKind::kForward:
        case OpKind::kBackward:
        case OpKind::kBackwardInput:
        case OpKind::kBackwardWeight: {
          if (s_.tasks.present()) {
            run_slice(d, in);
            break;
          }
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
          // An LLM pass takes every tensor slice: it waits for the encoder kernels each one runs.
          const double slices_free = busiest_cursor(dev);
          const double start = std::max({slices_free, dev.ready, gathered});
          account_gap(dev, start, gathered > std::max(slices_free, dev.ready));
          const double end = std::max(start + p.total(), gather_end);
          dev.time.dp_comm += end - (start + p.total());
          dev.time.compute += p.compute;
          dev.time.tp_comm += p.comm;
          dev.compute_free = end;
          for (double& f : dev.slice_free) f = end;
          dev.ready = 0;
          dev.any_compute = true;
          dev.last_pass_end = std::max(dev.last_pass_end, end);
          dev.llm_done = end;
          if (s_.encoder.present()) {
            dev.in_pass = true;
            dev.pass_start = start;
            dev.pass_end = end;
            dev.pass_gap_seconds = p.comm;
            std::fill(dev.gap_left.begin(), dev.gap_left.end(), p.comm);
            std::fill(dev.gap_at.begin(), dev.gap_at.end(), start);
          }
          record(d, TimelineEvent::Stream::kCompute, in, start, end, p.comm);
          dev.activation_bytes += activation_change(program, dev.pc, replica);
          note_memory(d, end);
          if (in.op == OpKind::kForward) {
            ++dev.forwards_done;
            count_flops(in.stage, replica, in.micro_batch);
          }
          break;
        }
        case OpKind::kEncoderKernels:
          run_encoder_kernels(d, in);
          break;
        case OpKind::kWaveBoundary:
          // Orders the device's own work only, as the runtime runs it: every dependency across a boundary is a
          // transfer (or on the same device), so no device waits for the others to reach it.
          break;
        case OpKind::kAllocate:
        case OpKind::kFree:
          dev.activation_bytes += activation_change(program, dev.pc, replica);
          note_memory(d, dev.compute_free);
          break;
      }
      ++events_;
      ++dev.pc;
    }
  }

  // What instruction `pc` of a pipeline program changes in its device's live activation bytes: a forward keeps
  // its stage's activations, the input-gradient half of a backward frees all but the matmul inputs, which the
  // weight gradient frees; a buffer is held from its allocation to its free.
  double activation_change(const std::vector<Instruction>& program, size_t pc, int replica) {
    const Instruction& in = program[pc];
    switch (in.op) {
      case OpKind::kForward:
        return stage_activation_bytes(in.stage, replica, in.micro_batch);
      case OpKind::kBackward:
        return -stage_activation_bytes(in.stage, replica, in.micro_batch);
      case OpKind::kBackwardInput:
        return -(stage_activation_bytes(in.stage, replica, in.micro_batch) -
                 stage_activation_bytes(in.stage, replica, in.micro_batch, true));
      case OpKind::kBackwardWeight:
        return -stage_activation_bytes(in.stage, replica, in.micro_batch, true);
      case OpKind::kAllocate:
        return static_cast<double>(in.bytes);
      case OpKind::kFree:
        return -freed_bytes(program)[pc];
      default:
        return 0;
    }
  }

  // Each free's bytes, those its buffer's allocation took, by pc: found in one pass over the program on first use
  // (looking back from every free was quadratic in a program's buffers).
  const std::vector<double>& freed_bytes(const std::vector<Instruction>& program) {
    auto [it, added] = freed_.try_emplace(program.data());
    if (added) {
      it->second.assign(program.size(), 0);
      std::unordered_map<int32_t, double> held;
      for (size_t pc = 0; pc < program.size(); ++pc) {
        const Instruction& in = program[pc];
        if (in.op == OpKind::kAllocate) {
          held[in.buffer] = static_cast<double>(in.bytes);
        } else if (in.op == OpKind::kFree) {
          const auto found = held.find(in.buffer);
          if (found != held.end()) it->second[pc] = found->second;
        }
      }
    }
    return it->second;
  }

  // Under a give-up bar (SimOptions::give_up_above_seconds), before running the pipeline schedule: no device
  // ends its passes before their seconds add up, and the optimizer steps start only after every device's passes,
  // so the busiest device's passes plus the longest step bound the iteration from below. When that exceeds the
  // bar, `out` gets the bound and the memory, which follows each program's order alone, and this returns true.
  bool gives_up(SimResult& out) {
    const double bar = options_.give_up_above_seconds;
    if (!(bar < std::numeric_limits<double>::infinity()) || s_.tasks.present() || s_.encoder.present()) return false;
    const double bound = busy_bound();
    if (bound <= bar) return false;
    out.gave_up = true;
    out.iteration_seconds = bound;
    out.state_memory_bytes.assign(pp_, 0);
    for (int r = 0; r < pp_; ++r) out.state_memory_bytes[r] = rank_state_bytes(s_, model_, r);
    out.peak_memory_bytes = out.state_memory_bytes;
    for (int replica = 0; replica < replicas_; ++replica) {
      for (int r = 0; r < pp_; ++r) {
        const auto& program = s_.programs[r].instructions;
        double live = 0;
        for (size_t pc = 0; pc < program.size(); ++pc) {
          const OpKind op = program[pc].op;
          if (!is_pass(op) && op != OpKind::kAllocate && op != OpKind::kFree) continue;
          live += activation_change(program, pc, replica);
          out.peak_memory_bytes[r] = std::max(out.peak_memory_bytes[r], out.state_memory_bytes[r] + live);
        }
      }
    }
    out.usable_memory_bytes = cluster_.usable_memory_bytes();
    for (double peak : out.peak_memory_bytes) out.oom = out.oom || peak > out.usable_memory_bytes;
    out.devices = s_.layout.devices();
    out.simulated_devices = static_cast<int64_t>(replicas_) * pp_;
    return true;
  }

 public:
  // The busiest device's passes plus the longest optimizer step (0 where the schedule has an encoder or
  // multitask section, or is not a pipeline program).
  double busy_bound() {
    if (s_.tasks.present() || s_.encoder.present()) return 0;
    const ParallelLayout& l = s_.layout;
    double longest_step = 0;
    for (int r = 0; r < pp_; ++r) {
      double step = 0;
      for (int chunk = 0; chunk < l.vpp; ++chunk) step += stages_[chunk * pp_ + r].optimizer_seconds;
      longest_step = std::max(longest_step, step);
    }
    // Each rank's passes by (stage, kind): a pipeline program runs each for every micro-batch once, so a device's
    // busy time is its classes' totals over the replica's micro-batches.
    std::vector<std::map<std::pair<int, OpKind>, int>> passes(pp_);
    for (int r = 0; r < pp_; ++r) {
      for (const Instruction& in : s_.programs[r].instructions) {
        if (is_pass(in.op)) ++passes[r][{in.stage, in.op}];
      }
      for (const auto& [what, count] : passes[r]) {
        if (count != s_.micro_batches) return 0;  // not a pipeline program
      }
    }
    double busiest = 0;
    for (int replica = 0; replica < replicas_; ++replica) {
      for (int r = 0; r < pp_; ++r) {
        double busy = 0;
        for (const auto& [what, count] : passes[r]) {
          for (const StageEntry& e : stages_[what.first].entries) {
            const ClassTotals& t = class_totals(replica, e.cls);
            const double recompute = e.recompute == Recompute::kFull        ? t.recompute_full
                                     : e.recompute == Recompute::kSelective ? t.recompute_selective
                                                                            : 0.0;
            const double seconds = what.second == OpKind::kForward         ? t.forward
                                   : what.second == OpKind::kBackward      ? recompute + t.backward
                                   : what.second == OpKind::kBackwardInput ? recompute + t.backward_input
                                                                           : t.backward_weight;
            busy += static_cast<double>(e.count) * seconds;
          }
        }
        busiest = std::max(busiest, busy);
      }
    }
    // Less the rounding of sums in another order than the run's: a bound, never above the iteration.
    return (busiest + longest_step) * (1 - 1e-9);
  }

 private:
  static bool is_pass(OpKind op) {
    return op == OpKind::kForward || op == OpKind::kBackward || op == OpKind::kBackwardInput ||
           op == OpKind::kBackwardWeight;
  }

  // An encoder stage's collective over its data-parallel group (every pipeline's copy of the stage on every
  // replica): it starts once all have reached it and the stage's previous one has ended, on the collective
  // stream, and the optimizer step waits for it. It never blocks the program, on any kind of device.
  void arrive_encoder_collective(int d, const Instruction& in, std::deque<int>& work) {
    Device& dev = devices_[d];
    const int b = slice_of(in);
    const int e = in.stage;
    const int k = dev.encoder_collectives_seen[b]++;
    auto& chain = encoder_collectives_[e];
    if (chain.size() <= static_cast<size_t>(k)) chain.resize(k + 1);
    CollectiveState& c = chain[k];
    c.ready = std::max(c.ready, dev.encoder_done[b]);
    if (++c.arrived < replicas_ * s_.encoder.pipelines) return;
    const EncoderStageInfo& info = encoder_stages_[e];
    const bool gradients = in.tensor == CollectiveTensor::kGradients;
    const CollectiveOp op = in.collective == CollectiveKind::kAllReduce       ? CollectiveOp::kAllReduce
                            : in.collective == CollectiveKind::kReduceScatter ? CollectiveOp::kReduceScatter
                                                                              : CollectiveOp::kAllGather;
    const DeviceGroupShape group{s_.encoder.dp, static_cast<int64_t>(s_.encoder.tp)};
    c.start = std::max(c.ready, k > 0 ? chain[k - 1].end : 0.0);
    // One collective stream a device: the LLM's collectives and the encoders' take their turns on it.
    for (int replica = 0; replica < replicas_; ++replica) {
      for (int r = 0; r < pp_; ++r) {
        if (s_.encoder.stage_on_rank(s_.layout, r) == e) c.start = std::max(c.start, devices_[device_of(replica, r)].coll_free);
      }
    }
    c.end = c.start + collective_seconds(op, gradients ? info.gradient_bytes : info.parameter_bytes, cluster_, eff_, group);
    c.resolved = true;
    for (int replica = 0; replica < replicas_; ++replica) {
      for (int r = 0; r < pp_; ++r) {
        if (s_.encoder.stage_on_rank(s_.layout, r) != e) continue;
        Device& host = devices_[device_of(replica, r)];
        host.coll_free = std::max(host.coll_free, c.end);
        host.grads_ready = std::max(host.grads_ready, c.end);
        record(device_of(replica, r), TimelineEvent::Stream::kCollective, in, c.start, c.end);
        if (host.waiting) work.push_back(device_of(replica, r));
      }
    }
  }

  // Every used layer of each encoder stage ran its forward for every micro-batch with images, and a trained one
  // its backward; every encoder collective was reached by all the devices that take part in it.
  void check_encoder_complete() {
    const EncoderSection& enc = s_.encoder;
    if (!enc.present()) return;
    for (int replica = 0; replica < replicas_; ++replica) {
      for (int j = 0; j < enc.pipelines; ++j) {
        for (int e = 0; e < enc.pp; ++e) {
          for (const StageLayers& range : enc.stages[e]) {
            for (int32_t layer = range.first_layer; layer < range.end_layer; ++layer) {
              if (layer_class_[layer] < 0) continue;
              const int c = layer_component_[layer];
              for (int k = 0; k < enc.micro_batches(j); ++k) {
                if (batch_for(c, load(replica, llm_micro_batch_of(j, k))).tokens <= 0) continue;
                const bool forward = encoder_kernels_run_.count({replica, j, k, layer, static_cast<int>(Pass::kForward)});
                const bool backward = encoder_kernels_run_.count({replica, j, k, layer, static_cast<int>(Pass::kBackward)});
                if (!forward || (model_.components[c].trainable && !backward)) {
                  fail("encoder pipeline {} micro-batch {}: layer {}'s {} never runs", j, k, layer,
                       forward ? "backward" : "forward");
                }
                const bool recomputed =
                    encoder_kernels_run_.count({replica, j, k, layer, static_cast<int>(Pass::kRecompute)});
                const bool any_backward =
                    backward || encoder_kernels_run_.count({replica, j, k, layer, static_cast<int>(Pass::kBackwardInput)});
                if (recomputed && !any_backward) {
                  fail("encoder pipeline {} micro-batch {}: layer {} recomputes, but never runs its backward", j, k,
                       layer);
                }
                if (any_backward && recomputed != (s_.recompute[layer] != Recompute::kNone)) {
                  fail("encoder pipeline {} micro-batch {}: layer {} {}", j, k, layer,
                       recomputed ? "recomputes, but its mode is none" : "never runs the recomputation its mode asks");
                }
              }
            }
          }
        }
      }
    }
    for (size_t e = 0; e < encoder_collectives_.size(); ++e) {
      for (size_t k = 0; k < encoder_collectives_[e].size(); ++k) {
        const CollectiveState& c = encoder_collectives_[e][k];
        if (!c.resolved) {
          fail("encoder stage {}'s collective {} is reached by {} of its {} devices", e, k, c.arrived,
               replicas_ * enc.pipelines);
        }
      }
    }
  }

  // Multitask: (payload, sending slice, receiving slice) → how the exchange goes, the devices that have sent, the
  // earliest start of a send that moves anything, and when the last receiver has it all.
  struct SliceArrival {
    ReshardSeconds reshard;
    int senders = 0;
    double first_start = std::numeric_limits<double>::infinity();
    double arrival = 0;
  };
  std::map<std::tuple<int, int, int>, SliceArrival> slice_arrivals_;
  std::vector<CollectiveState> sync_groups_;
  std::vector<double> device_optimizer_seconds_;

  void run_slice(int d, const Instruction& in) {
    Device& dev = devices_[d];
    const SliceCost& c = slice_costs_[in.stage];
    const bool forward = in.op == OpKind::kForward;
    const PassSeconds& p = forward ? c.forward : c.backward;
    const double start = std::max(dev.compute_free, dev.ready);
    account_gap(dev, start, false);
    const double end = start + p.total();
    dev.time.compute += p.compute;
    dev.time.tp_comm += p.comm;
    dev.compute_free = end;
    dev.ready = 0;
    dev.any_compute = true;
    dev.last_pass_end = end;
    record(d, TimelineEvent::Stream::kCompute, in, start, end, p.comm);
    if (forward) {
      ++dev.forwards_done;
      dev.activation_bytes += c.activation_bytes;
      // The slice's FLOPs once, on its first device.
      if (s_.tasks.slices[in.stage].devices.front() == d) {
        model_flops_ += c.model_flops;
        hardware_flops_ += c.model_flops + c.recompute_flops;
      }
    } else {
      dev.activation_bytes -= c.activation_bytes;
    }
    note_memory(d, end);
  }

  void send_between_slices(int d, const Instruction& in, std::deque<int>& work) {
    Device& dev = devices_[d];
    const bool activation = in.payload == Payload::kActivation;
    const TaskSlice& from = s_.tasks.slices[in.stage];
    const TaskSlice& to = s_.tasks.slices[in.peer_stage];
    auto [it, first_sender] = slice_arrivals_.try_emplace({activation ? 0 : 1, in.stage, in.peer_stage});
    SliceArrival& arrival = it->second;
    if (first_sender) {
      // An activation is the sender's output; a gradient the receiver's output's, sent back.
      const double bytes = activation ? slice_costs_[in.stage].output_bytes : slice_costs_[in.peer_stage].output_bytes;
      arrival.reshard =
          reshard_seconds({from.devices, from.dp, from.tp}, {to.devices, to.dp, to.tp}, bytes, cluster_, eff_);
    }
    const auto position = std::lower_bound(from.devices.begin(), from.devices.end(), d) - from.devices.begin();
    const double seconds = arrival.reshard.send[static_cast<size_t>(position)];
    double start, end;
    if (shares_compute()) {
      const double lost = transfer_on_shared_cores(d, in, dev.compute_free, seconds, start, end);
      dev.time.pp_other += lost;
      dev.compute_free += lost;
    } else {
      start = std::max(dev.p2p_free, dev.compute_free);
      end = start + seconds;
      dev.p2p_free = end;
    }
    record(d, TimelineEvent::Stream::kP2p, in, start, end);
    ++arrival.senders;
    if (seconds > 0) arrival.first_start = std::min(arrival.first_start, start);
    arrival.arrival = std::max(arrival.arrival, end);
    if (arrival.senders == static_cast<int>(from.devices.size())) {
      // The busiest receiver's links take its parts at their rates, from when the first part is sent at the earliest.
      if (arrival.reshard.receive > 0) {
        arrival.arrival = std::max(arrival.arrival, arrival.first_start + arrival.reshard.receive);
      }
      for (int peer : to.devices) {
        if (devices_[peer].waiting) work.push_back(peer);
      }
    }
  }

  // A sync group's all-reduce: once every device of the group has reached it, after the collectives each of
  // them reached before it (a device's collectives run one at a time in its program's order, as on one
  // communication stream); it never blocks a program. On cores it shares with compute, it takes slowdown × its
  // seconds and the cost of starting it from each member's compute, as the data-parallel all-reduce of a
  // pipeline does.
  void arrive_sync_group(int d, const Instruction& in, std::deque<int>& work) {
    CollectiveState& c = sync_groups_[in.stage];
    c.ready = std::max(c.ready, devices_[d].compute_free);
    ++c.arrived;
    devices_[d].sync_pending.push_back(in.stage);
    // Programs reach their groups in one order (validate_multitask.cc refuses two devices that issue two groups
    // in opposite orders), so the earliest group not yet started is first on every member's list once they
    // have all reached it: starting groups only from the fronts cannot stall. execute() fails if one is left.
    std::vector<int> candidates{devices_[d].sync_pending.front()};
    while (!candidates.empty()) {
      const int g = candidates.back();
      candidates.pop_back();
      const SyncGroupSpec& group = s_.tasks.sync_groups[g];
      if (sync_groups_[g].resolved || sync_groups_[g].arrived < static_cast<int>(group.devices.size())) continue;
      const bool first_everywhere = std::all_of(group.devices.begin(), group.devices.end(), [&](int m) {
        return !devices_[m].sync_pending.empty() && devices_[m].sync_pending.front() == g;
      });
      if (!first_everywhere) continue;
      Instruction collective = in;
      collective.stage = g;
      start_sync_group(collective, work);
      for (int m : group.devices) {
        devices_[m].sync_pending.pop_front();
        if (!devices_[m].sync_pending.empty()) candidates.push_back(devices_[m].sync_pending.front());
      }
    }
  }

  void start_sync_group(const Instruction& in, std::deque<int>& work) {
    const SyncGroupSpec& group = s_.tasks.sync_groups[in.stage];
    CollectiveState& c = sync_groups_[in.stage];
    double bytes = 0;
    for (const auto& [component, layer] : group.layers) {
      if (model_.components[component].trainable) {
        bytes += activation_element_bytes(options_.dtype) *
                 static_cast<double>(model_.components[component].layers[layer].parameters());
      }
    }
    bytes /= group.tp;  // each device's shard, all-reduced over its copies
    c.start = c.ready;
    for (int member : group.devices) c.start = std::max(c.start, devices_[member].coll_free);
    const int64_t copies = static_cast<int64_t>(group.devices.size()) / group.tp;
    const DeviceGroupShape shape = device_group_shape(group.devices, group.tp, cluster_.device.devices_per_node);
    c.end = c.start + (copies > 1 && bytes > 0
                           ? collective_seconds(CollectiveOp::kAllReduce, bytes, cluster_, eff_, shape)
                           : 0.0);
    c.resolved = true;
    for (int member : group.devices) {
      Device& m = devices_[member];
      m.coll_free = c.end;
      m.grads_ready = std::max(m.grads_ready, c.end);
      if (shares_compute()) {
        // A group with nothing to all-reduce (one copy, or no parameters) starts no collective.
        const double lost = c.end > c.start ? collective_compute_loss(c.end - c.start) : 0.0;
        m.time.dp_comm += lost;
        record_cores_taken(member, in, m.compute_free, m.compute_free + lost);
        m.compute_free += lost;  // wherever the member's compute stands: the all-reduce runs beside it
      } else {
        record(member, TimelineEvent::Stream::kCollective, in, c.start, c.end);
      }
      if (m.waiting) work.push_back(member);
    }
  }

  void resolve(int rank, int64_t k, const Instruction& in, std::deque<int>& work) {
    CollectiveState& c = collectives_[rank][k];
    const double previous = k > 0 ? collectives_[rank][k - 1].end : 0;
    double start = std::max(c.ready, previous);
    // After whatever else holds the replicas' collective streams (the encoders' collectives in bubbles).
    if (s_.encoder.present()) {
      for (int replica = 0; replica < replicas_; ++replica) start = std::max(start, devices_[replica * pp_ + rank].coll_free);
    }
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
    if (s_.tasks.present()) {
      sync_groups_.assign(s_.tasks.sync_groups.size(), {});
      device_optimizer_seconds_.assign(pp_, 0);
      const double bandwidth = cluster_.device.memory_bytes_per_second * eff_.memory;
      held_by_device_ = multitask_parameters_by_device(s_, model_, pp_);
      for (int r = 0; r < pp_; ++r) {
        for (const auto& [key, h] : held_by_device_[r]) {
          if (!model_.components[key.first].trainable) continue;
          const bool sharded = s_.layout.state_sharding != StateSharding::kZero0;
          const double shard = static_cast<double>(h.parameters) / (sharded ? static_cast<double>(h.replicas) : 1.0);
          device_optimizer_seconds_[r] += kOptimizerStepBytesPerParameter * shard / bandwidth;
        }
      }
    }
    if (s_.encoder.present()) {
      encoder_arrivals_.assign(replicas_, std::vector<double>(static_cast<size_t>(2) * s_.encoder.pipelines *
                                                                  s_.encoder.pp * encoder_max_micro_batches_, -1.0));
      encoder_collectives_.resize(s_.encoder.pp);
      encoder_backward_layers_.assign(pp_, {});
      for (int r = 0; r < pp_; ++r) {
        for (const Instruction& in : s_.programs[r].instructions) {
          if (in.op == OpKind::kEncoderKernels && in.pass != Pass::kForward) encoder_backward_layers_[r].insert(in.layer);
        }
      }
    }
    collectives_.resize(pp_);
    collective_index_.resize(pp_);
    rank_state_bytes_.assign(pp_, 0);
    for (int r = 0; r < pp_; ++r) {
      const auto& program = s_.programs[r].instructions;
      collective_index_[r].assign(program.size(), -1);
      int64_t k = 0;
      int forwards = 0;
      for (size_t i = 0; i < program.size(); ++i) {
        if (program[i].op == OpKind::kCollective && program[i].encoder_pipeline < 0 && !s_.tasks.present()) {
          collective_index_[r][i] = k++;
        }
        if (program[i].op == OpKind::kForward) ++forwards;
      }
      collectives_[r].assign(static_cast<size_t>(k), {});
      for (int replica = 0; replica < replicas_; ++replica) {
        Device& dev = devices_[replica * pp_ + r];
        dev.forwards_total = forwards;
        dev.pending_gathers.resize(s_.layout.vpp);
        if (s_.encoder.present()) {
          const size_t slices = static_cast<size_t>(s_.encoder.slices(s_.layout));
          dev.slice_free.assign(slices, 0);
          dev.slice_free[0] = 0;  // slice 0 is compute_free; its entry stays unused
          dev.slice_ready.assign(slices, 0);
          dev.encoder_done.assign(slices, 0);
          dev.encoder_collectives_seen.assign(slices, 0);
          dev.gap_left.assign(slices, 0);
          dev.gap_at.assign(slices, 0);
        }
      }
      rank_state_bytes_[r] = s_.tasks.present()
                                 ? multitask_state_bytes(held_by_device_[r], model_, s_.layout.state_sharding)
                                 : rank_state_bytes(s_, model_, r);
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
    // Only a schedule that skipped validate() fails here: a group some member never reaches, or reaches twice.
    for (int d = 0; d < device_count; ++d) {
      if (devices_[d].sync_pending.empty()) continue;
      const int g = devices_[d].sync_pending.front();
      fail("sync group {} is left waiting on device {} ({} arrivals for its {} devices): a device does not reach it, "
           "reaches it twice, or waits at a group before it that never starts", g, d, sync_groups_[g].arrived,
           s_.tasks.sync_groups[g].devices.size());
    }
    for (size_t g = 0; g < sync_groups_.size(); ++g) {
      if (!sync_groups_[g].resolved && !s_.tasks.sync_groups[g].devices.empty()) {
        fail("sync group {} is left waiting: no device of it reaches it", g);
      }
    }
    check_encoder_complete();
    // Every encoder layer pass that ran, ran whole: none of its kernels left out or run twice.
    for (const auto& [key, run] : encoder_kernels_run_) {
      if (run.first != run.second) {
        fail("encoder pipeline {} micro-batch {}: layer {}'s {} pass runs {} of its {} kernels", std::get<1>(key),
             std::get<2>(key), std::get<3>(key), pass_label(static_cast<Pass>(std::get<4>(key))), run.first,
             run.second);
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
    for (const Device& dev : devices_) {
      step_start = std::max({step_start, busiest_cursor(dev), dev.grads_ready});
      for (double done : dev.encoder_done) step_start = std::max(step_start, done);
    }
    double iteration = step_start;
    std::vector<double> step_seconds(pp_, 0);
    for (int r = 0; r < pp_; ++r) {
      if (s_.tasks.present()) {
        step_seconds[r] = device_optimizer_seconds_[r];
      } else {
        for (int chunk = 0; chunk < l.vpp; ++chunk) step_seconds[r] += stages_[chunk * pp_ + r].optimizer_seconds;
      }
      if (s_.encoder.present()) step_seconds[r] += encoder_stages_[s_.encoder.stage_on_rank(l, r)].optimizer_seconds;
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
    const int kept = options_.timeline_replica >= 0 && options_.timeline_replica < replicas_
                         ? options_.timeline_replica
                         : out.critical_replica;
    for (int r = 0; r < pp_; ++r) out.collectives_end_seconds.push_back(devices_[kept * pp_ + r].coll_free);
    if (options_.timeline) {
      out.timeline_replica = kept;
      for (int r = 0; r < pp_; ++r) {
        const int d = kept * pp_ + r;
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

double iteration_lower_bound(const Schedule& schedule, const ModelSpec& model, const ClusterSpec& cluster,
                             const CostModel& cost, const DeviceEfficiency& efficiency, const MicroBatchLoads& loads,
                             const SimOptions& options) {
  Simulator simulator(schedule, model, cluster, cost, efficiency, loads, options);
  simulator.build();
  return simulator.busy_bound();
}

}  // namespace fulcrum

#include "fulcrum/cost/profiled_cost.h"

#include <fmt/format.h>

#include <cmath>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "fulcrum/core/error.h"
#include "fulcrum/core/json_document.h"

namespace fulcrum {

bool ProfileEntry::matches(const LayerSpec& l, const LayerWork& work) const {
  // Profiles are measured without context parallelism, each in one dtype; other work keeps the fallback's time.
  // Profiles are measured inside a node: a group across nodes is the analytic model's.
  if (std::max(1, work.sharding.cp) != 1 || work.dtype != dtype || work.sharding.across_nodes) return false;
  if (kind != l.kind || hidden != l.hidden || pass != work.pass || tp != std::max(1, work.sharding.tp) ||
      sequence_parallel != (work.sharding.sequence_parallel && tp > 1)) {
    return false;
  }
  switch (kind) {
    case LayerKind::kTransformerBlock:
      return ffn == l.ffn && heads == l.heads && kv_heads == l.kv_heads && head_dim == l.head_dim && mlp == l.mlp &&
             window_tokens == l.window_tokens;
    case LayerKind::kTokenEmbedding:
    case LayerKind::kLmHead:
      return vocab == l.vocab;
    case LayerKind::kPatchEmbedding:
    case LayerKind::kProjector:
      return in_features == l.in_features && ffn == l.ffn;
    case LayerKind::kFinalNorm:
      return true;
  }
  return false;
}

namespace {

using json = nlohmann::json;

LayerKind kind_named(const std::string& name, const std::string& where) {
  for (LayerKind k : {LayerKind::kPatchEmbedding, LayerKind::kTokenEmbedding, LayerKind::kTransformerBlock,
                      LayerKind::kProjector, LayerKind::kFinalNorm, LayerKind::kLmHead}) {
    if (layer_kind_name(k) == name) return k;
  }
  throw InputError(fmt::format("{}: unknown layer '{}'", where, name));
}

Pass pass_named(const std::string& name, const std::string& where) {
  if (name == "forward") return Pass::kForward;
  if (name == "backward_input") return Pass::kBackwardInput;
  if (name == "backward_weight") return Pass::kBackwardWeight;
  if (name == "recompute") return Pass::kRecompute;
  if (name == "backward") return Pass::kBackward;
  throw InputError(fmt::format("{}: unknown pass '{}'", where, name));
}

int64_t size_or_zero(const json& e, const char* key, const std::string& where) {
  if (!e.contains(key)) return 0;
  if (!e[key].is_number_integer() || e[key].get<int64_t>() < 0 || e[key].get<int64_t>() > (int64_t{1} << 32)) {
    throw InputError(fmt::format("{}: {} must be a non-negative integer", where, key));
  }
  return e[key].get<int64_t>();
}

// Positive numbers up to `most` (past it, a pass's time or size has no meaning and sums of them overflow).
std::vector<double> positive_numbers(const json& e, const char* key, const std::string& where, double most) {
  if (!e.contains(key) || !e[key].is_array() || e[key].empty()) {
    throw InputError(fmt::format("{}: {} must be a non-empty array of numbers", where, key));
  }
  std::vector<double> out;
  for (const json& v : e[key]) {
    if (!v.is_number() || !(v.get<double>() > 0) || !(v.get<double>() <= most)) {
      throw InputError(fmt::format("{}: {} must hold positive numbers up to {:g}", where, key, most));
    }
    out.push_back(v.get<double>());
  }
  return out;
}

// Whether two entries measure the same pass of the same layer shape, sharding, number format and sequences.
bool same_measurement(const ProfileEntry& a, const ProfileEntry& b) {
  return std::tie(a.kind, a.hidden, a.ffn, a.heads, a.kv_heads, a.head_dim, a.vocab, a.in_features, a.mlp,
                  a.window_tokens, a.tp, a.sequence_parallel, a.dtype, a.pass, a.sequence_tokens) ==
         std::tie(b.kind, b.hidden, b.ffn, b.heads, b.kv_heads, b.head_dim, b.vocab, b.in_features, b.mlp,
                  b.window_tokens, b.tp, b.sequence_parallel, b.dtype, b.pass, b.sequence_tokens);
}

}  // namespace

ProfileTable parse_profile_table(std::string_view text, const std::string& file) {
  const json doc = parse_json_document(text, file);
  if (!doc.is_object() || !doc.contains("fulcrum_profile")) {
    throw InputError(fmt::format("{}: not a Fulcrum profile (no \"fulcrum_profile\" key)", file));
  }
  if (doc["fulcrum_profile"] != 1) {
    throw InputError(fmt::format("{}: unsupported profile version {}", file, doc["fulcrum_profile"].dump()));
  }
  if (!doc.contains("entries") || !doc["entries"].is_array()) {
    throw InputError(fmt::format("{}: entries must be an array", file));
  }
  ProfileTable table;
  if (doc.contains("device")) {
    if (!doc["device"].is_string()) throw InputError(fmt::format("{}: device must be a string", file));
    table.device = doc["device"].get<std::string>();
  }
  size_t index = 0;
  for (const json& e : doc["entries"]) {
    const std::string where = fmt::format("{}: entry {}", file, index++);
    if (!e.is_object()) throw InputError(fmt::format("{}: must be an object", where));
    for (const char* key : {"layer", "pass"}) {
      if (!e.contains(key) || !e[key].is_string()) throw InputError(fmt::format("{}: {} must be a string", where, key));
    }
    // A misspelt key would otherwise be dropped and its entry match other layers than the ones measured.
    static const std::set<std::string> kKeys = {
        "layer", "pass", "hidden", "ffn", "heads", "kv_heads", "head_dim", "vocab", "in_features", "window_tokens",
        "sequence_tokens", "tp", "sequence_parallel", "dtype", "mlp", "tokens", "seconds"};
    for (const auto& [key, value] : e.items()) {
      if (!kKeys.count(key)) throw InputError(fmt::format("{}: unknown key \"{}\"", where, key));
    }
    ProfileEntry entry;
    entry.kind = kind_named(e["layer"].get<std::string>(), where);
    // A shape key of another layer kind would never be compared, so two entries differing only there would both
    // load and the second never be read.
    static const std::set<std::string> kShapeKeys = {"hidden", "ffn",   "heads",       "kv_heads",     "head_dim",
                                                     "vocab",  "mlp",   "in_features", "window_tokens"};
    std::set<std::string> applies = {"hidden"};
    switch (entry.kind) {
      case LayerKind::kTransformerBlock: applies.insert({"ffn", "heads", "kv_heads", "head_dim", "mlp", "window_tokens"}); break;
      case LayerKind::kTokenEmbedding:
      case LayerKind::kLmHead: applies.insert("vocab"); break;
      case LayerKind::kPatchEmbedding:
      case LayerKind::kProjector: applies.insert({"in_features", "ffn"}); break;
      case LayerKind::kFinalNorm: break;
    }
    for (const auto& [key, value] : e.items()) {
      if (kShapeKeys.count(key) && !applies.count(key)) {
        throw InputError(fmt::format("{}: key \"{}\" does not apply to a {} layer", where, key,
                                     layer_kind_name(entry.kind)));
      }
    }
    entry.pass = pass_named(e["pass"].get<std::string>(), where);
    entry.hidden = size_or_zero(e, "hidden", where);
    entry.ffn = size_or_zero(e, "ffn", where);
    entry.heads = size_or_zero(e, "heads", where);
    entry.kv_heads = size_or_zero(e, "kv_heads", where);
    entry.head_dim = size_or_zero(e, "head_dim", where);
    entry.vocab = size_or_zero(e, "vocab", where);
    entry.in_features = size_or_zero(e, "in_features", where);
    entry.window_tokens = size_or_zero(e, "window_tokens", where);
    entry.sequence_tokens = size_or_zero(e, "sequence_tokens", where);
    const int64_t tp = size_or_zero(e, "tp", where);
    if (e.contains("tp") && (tp < 1 || tp > (1 << 20))) {
      throw InputError(fmt::format("{}: tp must be a positive integer up to 1048576", where));
    }
    entry.tp = e.contains("tp") ? static_cast<int>(tp) : 1;
    if (e.contains("sequence_parallel")) {
      if (!e["sequence_parallel"].is_boolean()) {
        throw InputError(fmt::format("{}: sequence_parallel must be true or false", where));
      }
      entry.sequence_parallel = e["sequence_parallel"].get<bool>() && entry.tp > 1;
    }
    if (e.contains("dtype")) {
      if (!e["dtype"].is_string()) throw InputError(fmt::format("{}: dtype must be a string", where));
      try {
        entry.dtype = parse_dtype(e["dtype"].get<std::string>());
      } catch (const InputError& error) {
        throw InputError(fmt::format("{}: {}", where, error.what()));
      }
    }
    if (e.contains("mlp")) {
      if (e["mlp"] == "gelu") {
        entry.mlp = MlpKind::kGelu;
      } else if (e["mlp"] == "swiglu") {
        entry.mlp = MlpKind::kSwiGlu;
      } else {
        throw InputError(fmt::format("{}: mlp must be \"gelu\" or \"swiglu\"", where));
      }
    }
    // The keys that shape the layer kind must be there: without them the entry prices a layer of zero width.
    auto require = [&](std::initializer_list<std::pair<const char*, int64_t>> keys) {
      for (const auto& [key, value] : keys) {
        if (value == 0) throw InputError(fmt::format("{}: {} must be a positive integer", where, key));
      }
    };
    switch (entry.kind) {
      case LayerKind::kTransformerBlock:
        require({{"hidden", entry.hidden}, {"ffn", entry.ffn}, {"heads", entry.heads}, {"kv_heads", entry.kv_heads},
                 {"head_dim", entry.head_dim}});
        if (entry.heads % entry.kv_heads != 0) {
          throw InputError(fmt::format("{}: kv_heads ({}) must divide heads ({})", where, entry.kv_heads, entry.heads));
        }
        break;
      case LayerKind::kTokenEmbedding:
      case LayerKind::kLmHead:
        require({{"hidden", entry.hidden}, {"vocab", entry.vocab}});
        break;
      case LayerKind::kPatchEmbedding:
      case LayerKind::kProjector:
        require({{"hidden", entry.hidden}, {"in_features", entry.in_features}});
        break;
      case LayerKind::kFinalNorm:
        require({{"hidden", entry.hidden}});
        break;
    }
    entry.tokens = positive_numbers(e, "tokens", where, 1e12);
    entry.seconds = positive_numbers(e, "seconds", where, 1e6);
    if (entry.tokens.size() != entry.seconds.size()) {
      throw InputError(fmt::format("{}: tokens and seconds must have the same length", where));
    }
    for (size_t i = 1; i < entry.tokens.size(); ++i) {
      if (!(entry.tokens[i] > entry.tokens[i - 1])) {
        throw InputError(fmt::format("{}: tokens must increase", where));
      }
    }
    // A second entry for the same pass of the same layer would never be read (the first prices it).
    for (size_t k = 0; k < table.entries.size(); ++k) {
      if (same_measurement(table.entries[k], entry)) {
        throw InputError(fmt::format("{}: measures the same pass of the same layer as entry {}", where, k));
      }
    }
    table.entries.push_back(std::move(entry));
  }
  for (const ProfileEntry& e : table.entries) table.has_whole_backward |= e.pass == Pass::kBackward;
  return table;
}

ProfiledCost::ProfiledCost(const CostModel& fallback, ProfileTable table)
    : fallback_(fallback), table_(std::move(table)) {}

int ProfileTable::entry_for(const LayerWork& work) const {
  // Entries of one layer pass may differ in the sequences they ran (an LLM's long sequences, an encoder's tiles
  // of the same width): the one whose sequences are nearest the work's in length prices it, the first on a tie.
  const double work_sequence =
      work.batch.sequences > 0 ? static_cast<double>(work.batch.tokens) / static_cast<double>(work.batch.sequences) : 0;
  int best = -1;
  double best_distance = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!entries[i].matches(*work.layer, work)) continue;
    double distance = 0;
    if (work_sequence > 0) {
      const double tokens = static_cast<double>(work.batch.tokens);
      const double measured = entries[i].sequence_tokens > 0
                                  ? std::min(static_cast<double>(entries[i].sequence_tokens), tokens)
                                  : tokens;
      distance = std::abs(std::log(measured / work_sequence));
    }
    if (best < 0 || distance < best_distance) {
      best = static_cast<int>(i);
      best_distance = distance;
    }
  }
  return best;
}

LayerCost ProfiledCost::layer_cost(const LayerWork& work) const {
  const int index = table_.entry_for(work);
  // An unmeasured whole backward costs its halves, each priced by its own measurements.
  if (index < 0 && work.pass == Pass::kBackward) return joined_backward(*this, work);
  LayerCost cost = fallback_.layer_cost(work);
  if (index < 0 || cost.seconds <= 0) return cost;
  const ProfileEntry* entry = &table_.entries[static_cast<size_t>(index)];

  // measured / fallback at each profiled token count, for the work as it was measured: one sequence of that
  // length, or sequences of sequence_tokens each.
  auto ratio_at = [&](size_t i) {
    const int64_t t = std::max<int64_t>(1, std::llround(entry->tokens[i]));
    const int64_t per_sequence = entry->sequence_tokens > 0 ? std::min(entry->sequence_tokens, t) : t;
    LayerWork probe = work;
    probe.batch = {(t + per_sequence - 1) / per_sequence, t, t * per_sequence};
    // A profile's recompute pass reruns the whole forward: selective recomputation takes that pass's ratio,
    // measured against the model's whole rerun, on the model's time for its own smaller rerun.
    if (probe.pass == Pass::kRecompute) probe.recompute = Recompute::kFull;
    const double modelled = fallback_.layer_cost(probe).seconds;
    return modelled > 0 ? entry->seconds[i] / modelled : 1.0;
  };
  const double tokens = static_cast<double>(work.batch.tokens);
  double ratio;
  if (entry->tokens.size() == 1 || tokens <= entry->tokens.front()) {
    ratio = ratio_at(0);
  } else if (tokens >= entry->tokens.back()) {
    ratio = ratio_at(entry->tokens.size() - 1);
  } else {
    size_t hi = 1;
    while (entry->tokens[hi] < tokens) ++hi;
    const double lo_t = entry->tokens[hi - 1], hi_t = entry->tokens[hi];
    const double w = (tokens - lo_t) / (hi_t - lo_t);
    ratio = (1 - w) * ratio_at(hi - 1) + w * ratio_at(hi);
  }
  cost.seconds = 0;
  for (Kernel& k : cost.kernels) {
    k.seconds *= ratio;
    cost.seconds += k.seconds;
  }
  return cost;
}

}  // namespace fulcrum

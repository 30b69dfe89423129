#ifndef FULCRUM_CLI_COST_INPUTS_H_
#define FULCRUM_CLI_COST_INPUTS_H_

#include <string>
#include <vector>

#include "fulcrum/core/dataset.h"
#include "fulcrum/core/error.h"
#include "fulcrum/core/text_file.h"
#include "fulcrum/cost/dtype.h"
#include "fulcrum/cost/profiled_cost.h"
#include "fulcrum/model/cluster_spec.h"
#include "fulcrum/model/model_spec.h"
#include "fulcrum/sched/schedule.h"

namespace fulcrum {

// What sets the cost of training, read the same way by every command: the devices (--cluster), the number
// format (--dtype) and measured layer times (--profile). Each throws InputError naming the file and, for a
// profile, the entry.

// A preset ("h100:3072", "cpu:2") or a cluster JSON file (cluster_from_json): a name ending in ".json" or naming
// an existing file is a file.
ClusterSpec load_cluster(const std::string& preset_or_file);

// A profile table (parse_profile_table).
ProfileTable load_profile(const std::string& path);

// --image-tokens: encoders whose items are fixed sequences take `tokens` patch tokens per item instead; 0 leaves
// the model as it is; a count outside 0 to kMostImageTokens (model_spec.h) is an InputError.
// --images-per-sample takes at most kMostImagesPerSample.
inline constexpr int64_t kMostImagesPerSample = 4096;
void set_image_tokens(ModelSpec& model, int64_t tokens);

// --image-tokens where it would change nothing, an InputError: a model without an encoder, or (`data_given`) one
// whose encoders take each sample's own patch tokens from the data (a dynamic-resolution encoder, whose
// --image-tokens only shapes synthetic samples).
void check_image_tokens_apply(const ModelSpec& model, int64_t tokens, bool data_given);

// Data the model cannot take, in a plan, simulation or report, refused with one line naming `data_name`: images
// for a model with no encoder (the encoder's work on their tiles would be left out without a word; a batcher may
// price them as the LLM tokens they also are), or vision counted in another unit than the model's encoders take
// (tiles against patch tokens, vision_unit_of).
void check_data_fits_the_model(const Dataset& data, const std::string& data_name, const ModelSpec& model,
                               const std::string& model_name);

// Runs `batch` (a batcher's plan, a cap search), naming `data_name` in an InputError about the data as a whole
// (a step it cannot fill, caps no search finds); a SampleError already names its sample's file and record.
template <typename Batch>
auto naming_the_data(const std::string& data_name, Batch&& batch) -> decltype(batch()) {
  try {
    return batch();
  } catch (const SampleError&) {
    throw;
  } catch (const InputError& e) {
    throw InputError(data_name + ": " + e.what());
  }
}

// --gbs, at least 1 and at most 65,536 samples a device: far past any training run, and short of a count whose
// iterations no plan could be simulated for in reasonable time.
void check_global_batch(int64_t gbs, int64_t devices);

// The dtype named by --dtype, which the cluster's devices must run (fp8 needs fp8 tensor cores).
Dtype training_dtype(const std::string& name, const ClusterSpec& cluster);

// How many of the table's entries match at least one layer pass of `model` trained under `layout` with
// per-layer `recompute` (flattened layers; empty: none) in `dtype`: the ones ProfiledCost may use. Token counts
// do not matter, every entry covers all of them; of entries of one pass that ran other sequences, each
// micro-batch takes the nearest.
int profile_entries_applied(const ProfileTable& table, const ModelSpec& model, const ParallelLayout& layout,
                            const std::vector<Recompute>& recompute, Dtype dtype);

// A line for stderr when a profile prices nothing in this run, so a table for another shape, degree or dtype
// does not go unnoticed; empty when some entry applies (or the table is empty).
std::string profile_unused_warning(const std::string& path, const ProfileTable& table, int applied, Dtype dtype);

}  // namespace fulcrum

#endif  // FULCRUM_CLI_COST_INPUTS_H_

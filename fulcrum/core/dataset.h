#ifndef FULCRUM_CORE_DATASET_H_
#define FULCRUM_CORE_DATASET_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fulcrum {

// What a sample's vision load counts: 448-px tiles (InternVL's `vit_num`) or encoder patch tokens
// (Qwen2-VL's `vision_tokens`). One dataset uses one unit.
enum class VisionUnit { kTiles, kPatchTokens };
std::string_view vision_unit_name(VisionUnit unit);
// The unit as a message names it, with its field in a length file: "tiles (vit_num)", "patch tokens
// (vision_tokens)".
std::string_view vision_unit_text(VisionUnit unit);

// One training sample as the balancers see it.
struct Sample {
  uint32_t id = 0;          // position in the dataset's concatenation
  uint32_t vision = 0;      // tiles or patch tokens fed to the vision encoder (0 for text-only)
  uint32_t tokens = 0;      // LLM tokens, image tokens included
  int32_t images = 0;       // real image tiles (`image_flags`); 0 for text-only
  uint16_t task = 0;        // index into Dataset::task_names(); 0 is "no task"
};

// Where a run of consecutive sample ids came from: one length file of a meta index, possibly repeated.
struct DatasetSource {
  std::string name;          // the index's dataset name, or the file name
  std::string path;          // the file as it was opened
  uint32_t first_id = 0;     // id of the source's first sample
  uint32_t samples = 0;      // samples it contributes, after repeat_time
  uint32_t records = 0;      // records in the file
  double repeat_time = 1.0;  // as given by the index
};

// Per-sample lengths of a whole training set, stored column by column (millions of rows).
class Dataset {
 public:
  explicit Dataset(VisionUnit unit = VisionUnit::kTiles) : vision_unit_(unit) {}

  size_t size() const { return tokens_.size(); }
  bool empty() const { return tokens_.empty(); }
  VisionUnit vision_unit() const { return vision_unit_; }

  uint32_t vision(uint32_t id) const { return vision_[id]; }
  uint32_t tokens(uint32_t id) const { return tokens_[id]; }
  int32_t images(uint32_t id) const { return images_[id]; }
  uint16_t task(uint32_t id) const { return task_[id]; }
  Sample sample(uint32_t id) const { return {id, vision_[id], tokens_[id], images_[id], task_[id]}; }

  const std::vector<uint32_t>& vision_column() const { return vision_; }
  const std::vector<uint32_t>& tokens_column() const { return tokens_; }
  const std::vector<std::string>& task_names() const { return task_names_; }
  const std::vector<DatasetSource>& sources() const { return sources_; }

  // Where a sample came from, for messages: "file: record 12: sample 40" (or "sample 40" without sources).
  std::string describe_sample(uint32_t id) const;

  void reserve(size_t samples);
  // The unit may be chosen until the first sample is added.
  void set_vision_unit(VisionUnit unit);
  // Appends one sample; its id is the current size.
  void add(uint32_t vision, uint32_t tokens, int32_t images, std::string_view task = {});
  // Appends `count` copies of samples [first, first + count) read earlier (repeat_time > 1).
  void repeat_range(uint32_t first, uint32_t count);
  // Drops samples from `size` on (undoes a partly read file).
  void truncate(size_t size);
  // The samples `ids`, in that order, as a dataset of their own: ids renumbered from 0, while describe_sample
  // still names each one's file, record and id in this dataset (a re-planned rest of an epoch names the sample a
  // user's file holds, not its place in the rest).
  Dataset subset(std::span<const uint32_t> ids) const;
  void add_source(DatasetSource source) { sources_.push_back(std::move(source)); }
  // Index of a task name, added on first use; "" is 0.
  uint16_t intern_task(std::string_view name);

 private:
  VisionUnit vision_unit_;
  std::vector<uint32_t> vision_;
  std::vector<uint32_t> tokens_;
  std::vector<int32_t> images_;
  std::vector<uint16_t> task_;
  std::vector<std::string> task_names_{""};
  std::vector<DatasetSource> sources_;
  std::vector<uint32_t> original_ids_;  // a subset's samples' ids in the dataset its sources describe; else empty
};

}  // namespace fulcrum

#endif  // FULCRUM_CORE_DATASET_H_

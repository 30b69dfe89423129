#include "fulcrum/core/dataset.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "fulcrum/core/error.h"

namespace fulcrum {

std::string_view vision_unit_name(VisionUnit unit) {
  return unit == VisionUnit::kTiles ? "tiles" : "patch_tokens";
}

std::string_view vision_unit_text(VisionUnit unit) {
  return unit == VisionUnit::kTiles ? "tiles (vit_num)" : "patch tokens (vision_tokens)";
}

std::string Dataset::describe_sample(uint32_t id) const {
  if (id < original_ids_.size()) id = original_ids_[id];
  for (const DatasetSource& source : sources_) {
    if (id >= source.first_id && id - source.first_id < source.samples && source.records > 0) {
      return std::string(source.path) + ": record " + std::to_string((id - source.first_id) % source.records) +
             ": sample " + std::to_string(id);
    }
  }
  return "sample " + std::to_string(id);
}

void Dataset::reserve(size_t samples) {
  vision_.reserve(samples);
  tokens_.reserve(samples);
  images_.reserve(samples);
  task_.reserve(samples);
}

void Dataset::set_vision_unit(VisionUnit unit) {
  if (!empty() && unit != vision_unit_) throw InputError("vision unit changed after samples were added");
  vision_unit_ = unit;
}

void Dataset::add(uint32_t vision, uint32_t tokens, int32_t images, std::string_view task) {
  if (tokens_.size() >= std::numeric_limits<uint32_t>::max()) {
    throw InputError("more than 4,294,967,295 samples: sample ids are 32-bit");
  }
  vision_.push_back(vision);
  tokens_.push_back(tokens);
  images_.push_back(images);
  task_.push_back(task.empty() ? 0 : intern_task(task));
}

void Dataset::repeat_range(uint32_t first, uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t id = first + i;
    if (tokens_.size() >= std::numeric_limits<uint32_t>::max()) {
      throw InputError("more than 4,294,967,295 samples: sample ids are 32-bit");
    }
    vision_.push_back(vision_[id]);
    tokens_.push_back(tokens_[id]);
    images_.push_back(images_[id]);
    task_.push_back(task_[id]);
  }
}

Dataset Dataset::subset(std::span<const uint32_t> ids) const {
  Dataset out(vision_unit_);
  out.task_names_ = task_names_;
  out.sources_ = sources_;
  out.reserve(ids.size());
  out.original_ids_.reserve(ids.size());
  for (uint32_t id : ids) {
    if (id >= tokens_.size()) throw InputError(fmt::format("subset: sample {} is not in a dataset of {}", id, size()));
    out.original_ids_.push_back(id < original_ids_.size() ? original_ids_[id] : id);
    out.vision_.push_back(vision_[id]);
    out.tokens_.push_back(tokens_[id]);
    out.images_.push_back(images_[id]);
    out.task_.push_back(task_[id]);
  }
  return out;
}

void Dataset::truncate(size_t size) {
  if (size >= tokens_.size()) return;
  if (original_ids_.size() > size) original_ids_.resize(size);
  vision_.resize(size);
  tokens_.resize(size);
  images_.resize(size);
  task_.resize(size);
}

uint16_t Dataset::intern_task(std::string_view name) {
  if (name.empty()) return 0;
  auto it = std::find(task_names_.begin(), task_names_.end(), name);
  if (it != task_names_.end()) return static_cast<uint16_t>(it - task_names_.begin());
  if (task_names_.size() > std::numeric_limits<uint16_t>::max()) {
    throw InputError("more than 65,535 distinct task names");
  }
  task_names_.emplace_back(name);
  return static_cast<uint16_t>(task_names_.size() - 1);
}

}  // namespace fulcrum

#ifndef FULCRUM_CORE_SORTED_IDS_H_
#define FULCRUM_CORE_SORTED_IDS_H_

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

namespace fulcrum {

// Adds `more` to `ids`, both sorted without repeats, keeping them so: the devices holding a layer, gathered slice by
// slice. Linear in both, and no copy when `more` adds nothing new to an empty or equal set.
template <typename T>
void merge_sorted_ids(std::vector<T>& ids, const std::vector<T>& more) {
  if (ids.empty()) {
    ids = more;
    return;
  }
  if (ids == more) return;
  std::vector<T> merged;
  merged.reserve(ids.size() + more.size());
  std::set_union(ids.begin(), ids.end(), more.begin(), more.end(), std::back_inserter(merged));
  ids = std::move(merged);
}

}  // namespace fulcrum

#endif  // FULCRUM_CORE_SORTED_IDS_H_

#include "fulcrum/cost/reshard_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <tuple>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/collective_cost.h"

namespace fulcrum {

namespace {

// Bytes a device moves over each of its links.
struct LinkBytes {
  double nvlink = 0;
  double network = 0;
};

double link_seconds(const LinkBytes& b, const ClusterSpec& cluster, const DeviceEfficiency& efficiency) {
  if (b.nvlink <= 0 && b.network <= 0) return 0;
  return efficiency.collective_latency_seconds +
         std::max(b.nvlink / link_bytes_per_second(cluster, efficiency, true),
                  b.network / link_bytes_per_second(cluster, efficiency, false));
}

}  // namespace

double ReshardSeconds::seconds() const {
  double out = receive;
  for (double s : send) out = std::max(out, s);
  return out;
}

ReshardSeconds reshard_seconds(const RowLayout& from, const RowLayout& to, double bytes, const ClusterSpec& cluster,
                               const DeviceEfficiency& efficiency) {
  const int per_node = std::max(1, cluster.device.devices_per_node);
  const int64_t dp_from = std::max(1, from.dp), dp_to = std::max(1, to.dp);
  const int tp_from = std::max(1, from.tp), tp_to = std::max(1, to.tp);
  for (const auto& [layout, dp, tp] : {std::tuple{&from, dp_from, tp_from}, std::tuple{&to, dp_to, tp_to}}) {
    if (static_cast<int64_t>(layout->devices.size()) != dp * tp) {
      throw InputError(fmt::format("a slice of {} devices cannot hold dp {} × tp {}", layout->devices.size(), dp, tp));
    }
  }
  std::vector<LinkBytes> sent(from.devices.size());
  std::vector<LinkBytes> received(to.devices.size());
  // Rows in units of 1 / (dp_from · dp_to) of the batch: group i of `from` holds [i · dp_to, (i + 1) · dp_to),
  // group j of `to` [j · dp_from, (j + 1) · dp_from); a group's tokens likewise in units of 1 / (tp_from · tp_to).
  // Each side's parts meet only consecutive parts of the other.
  auto meet = [](int64_t i, int64_t n_i, int64_t n_j, auto&& each) {
    const int64_t first = i * n_j, end = first + n_j;
    for (int64_t j = first / n_i; j < n_j && j * n_i < end; ++j) {
      const int64_t shared = std::min(end, (j + 1) * n_i) - std::max(first, j * n_i);
      if (shared > 0) each(j, shared);
    }
  };
  const double unit_bytes = bytes / static_cast<double>(dp_from * dp_to) / static_cast<double>(tp_from * tp_to);
  for (int64_t i = 0; i < dp_from; ++i) {
    meet(i, dp_from, dp_to, [&](int64_t j, int64_t rows) {
      for (int64_t a = 0; a < tp_from; ++a) {
        const size_t sender = static_cast<size_t>(i * tp_from + a);
        const int source = from.devices[sender];
        meet(a, tp_from, tp_to, [&](int64_t b, int64_t tokens) {
          const size_t receiver = static_cast<size_t>(j * tp_to + b);
          const int target = to.devices[receiver];
          if (target == source) return;  // a part it holds already
          const double part = unit_bytes * static_cast<double>(rows * tokens);
          const bool nvlink = source / per_node == target / per_node;
          (nvlink ? sent[sender].nvlink : sent[sender].network) += part;
          LinkBytes& in = received[receiver];
          (nvlink ? in.nvlink : in.network) += part;
        });
      }
    });
  }
  ReshardSeconds out;
  out.send.reserve(sent.size());
  for (const LinkBytes& b : sent) out.send.push_back(link_seconds(b, cluster, efficiency));
  for (const LinkBytes& b : received) out.receive = std::max(out.receive, link_seconds(b, cluster, efficiency));
  return out;
}

}  // namespace fulcrum

#include "fulcrum/model/cluster_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "fulcrum/core/error.h"
#include "fulcrum/core/json_document.h"

namespace fulcrum {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

DeviceSpec h100() {
  // fp8: twice the bf16 rate, as NVIDIA quotes both dense.
  return {"h100", 989e12, 80 * kGiB, 3.35e12, 900e9, 400e9 / 8, 8, false, 2 * 989e12};
}
DeviceSpec a100() {
  return {"a100", 312e12, 80 * kGiB, 2.0e12, 600e9, 200e9 / 8, 8, false};
}

// One core of a small CPU machine per device (a gloo process): AVX2 FMA at ~2.5 GHz, 2 FMA units × 8 fp32
// lanes × 2 FLOPs = 80 GFLOP/s (no bf16 units: bf16 runs at fp32 speed); half of 24 GiB and of ~20 GB/s
// memory bandwidth; loopback "links" of a few GB/s that use the same cores.
DeviceSpec cpu_core() {
  return {"cpu", 80e9, 12 * kGiB, 10e9, 5e9, 1.25e9, 2, true};
}

DeviceSpec device_of(std::string_view kind) {
  if (kind == "h100") return h100();
  if (kind == "h200") {
    DeviceSpec d = h100();
    d.kind = "h200";
    d.memory_bytes = 141e9;
    d.memory_bytes_per_second = 4.8e12;
    return d;
  }
  if (kind == "a100") return a100();
  if (kind == "a800") {
    DeviceSpec d = a100();
    d.kind = "a800";
    d.intra_node_bytes_per_second = 400e9;
    d.inter_node_bytes_per_second = 400e9 / 8 / 8;  // 400 Gb/s InfiniBand a node (Spindle's testbed), 8 sharing it
    return d;
  }
  if (kind == "cpu") return cpu_core();
  throw InputError(fmt::format("unknown device kind '{}'; known: {}", kind, fmt::join(cluster_kinds(), ", ")));
}

}  // namespace

int64_t ClusterSpec::nodes() const {
  const int64_t per_node = std::max(1, device.devices_per_node);
  return (devices + per_node - 1) / per_node;
}

double ClusterSpec::usable_memory_bytes() const {
  return std::max(0.0, device.memory_bytes * (1.0 - reserve_fraction) - reserve_bytes);
}

const std::vector<std::string>& cluster_kinds() {
  static const std::vector<std::string> kinds{"a100", "a800", "cpu", "h100", "h200"};
  return kinds;
}

ClusterSpec cluster_preset(std::string_view spec) {
  const size_t colon = spec.find(':');
  ClusterSpec cluster;
  cluster.device = device_of(spec.substr(0, colon));
  if (colon == std::string_view::npos) {
    cluster.devices = cluster.device.devices_per_node;
    return cluster;
  }
  const std::string_view count = spec.substr(colon + 1);
  int64_t devices = 0;
  const auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), devices);
  if (ec != std::errc() || end != count.data() + count.size() || devices < 1 || devices > kMostDevices) {
    throw InputError(fmt::format("cluster '{}': the device count must be an integer from 1 to {}", spec, kMostDevices));
  }
  cluster.devices = devices;
  return cluster;
}

namespace {

using json = nlohmann::json;

// A rate, size or time in the range a device can have: outside it the simulator's figures lose their meaning
// (a device of 1e-308 FLOP/s makes every iteration infinite).
double in_range(const json& object, const std::string& key, const std::string& where, double low, double high) {
  const json& v = object.at(key);
  if (!v.is_number() || !(v.get<double>() >= low && v.get<double>() <= high)) {
    throw InputError(fmt::format("{}: {} must be a number from {:g} to {:g}", where, key, low, high));
  }
  return v.get<double>();
}

void read_device(const json& d, DeviceSpec& device, const std::string& where) {
  if (!d.is_object()) throw InputError(fmt::format("{}: must be a JSON object", where));
  for (const auto& [key, value] : d.items()) {
    if (key == "kind") {
      if (!value.is_string()) throw InputError(fmt::format("{}: kind must be a string", where));
      device.kind = value.get<std::string>();
    } else if (key == "bf16_flops_per_second") {
      device.bf16_flops_per_second = in_range(d, key, where, 1e6, 1e18);
    } else if (key == "fp8_flops_per_second") {
      device.fp8_flops_per_second = in_range(d, key, where, 1e6, 1e18);
    } else if (key == "memory_bytes") {
      device.memory_bytes = in_range(d, key, where, 1e6, 1e15);
    } else if (key == "memory_bytes_per_second") {
      device.memory_bytes_per_second = in_range(d, key, where, 1e3, 1e16);
    } else if (key == "intra_node_bytes_per_second") {
      device.intra_node_bytes_per_second = in_range(d, key, where, 1e3, 1e16);
    } else if (key == "inter_node_bytes_per_second") {
      device.inter_node_bytes_per_second = in_range(d, key, where, 1e3, 1e16);
    } else if (key == "devices_per_node") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 1 << 20) {
        throw InputError(fmt::format("{}: devices_per_node must be a positive integer", where));
      }
      device.devices_per_node = value.get<int>();
    } else if (key == "communication_shares_compute") {
      if (!value.is_boolean()) throw InputError(fmt::format("{}: {} must be true or false", where, key));
      device.communication_shares_compute = value.get<bool>();
    } else if (key == "communication_compute_slowdown") {
      device.communication_compute_slowdown = in_range(d, key, where, 0, 100);
    } else if (key == "collective_compute_seconds") {
      device.collective_compute_seconds = in_range(d, key, where, 0, 10);
    } else if (key == "collective_latency_seconds") {
      device.collective_latency_seconds = in_range(d, key, where, 1e-9, 10);
    } else if (key == "kernel_launch_seconds") {
      device.kernel_launch_seconds = in_range(d, key, where, 0, 0.1);
    } else {
      throw InputError(fmt::format("{}: unknown key '{}'", where, key));
    }
  }
  for (const auto& [name, rate] : {std::pair<const char*, double>{"bf16_flops_per_second", device.bf16_flops_per_second},
                                   {"memory_bytes", device.memory_bytes},
                                   {"memory_bytes_per_second", device.memory_bytes_per_second},
                                   {"intra_node_bytes_per_second", device.intra_node_bytes_per_second},
                                   {"inter_node_bytes_per_second", device.inter_node_bytes_per_second}}) {
    if (!(rate > 0)) throw InputError(fmt::format("{}: {} is missing", where, name));
  }
}

}  // namespace

namespace {

// A kind names the efficiencies and launch bound the cost model takes (analytic_cost.h); another kind gets generic
// ones. A preset's device keeps a known kind (its measured rates are that kind's), and a kind that differs from a
// known one only in case is a typo either way: "H100" would silently cost as an unknown device.
void check_kind(const std::string& kind, bool preset, const std::string& where) {
  const std::vector<std::string>& kinds = cluster_kinds();
  if (std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) return;
  auto lower = [](std::string text) {
    for (char& ch : text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return text;
  };
  for (const std::string& known : kinds) {
    if (lower(kind) == known) {
      throw InputError(fmt::format("{}: kind '{}' is not a kind; kinds are lower case: '{}'", where, kind, known));
    }
  }
  if (preset) {
    throw InputError(fmt::format("{}: kind '{}' is not one of {}: a preset's device keeps a known kind (a whole "
                                 "device without a preset may name its own)", where, kind, fmt::join(kinds, ", ")));
  }
}

}  // namespace

ClusterSpec cluster_from_json(std::string_view text, const std::string& file) {
  const json doc = parse_json_document(text, file);
  if (!doc.is_object()) throw InputError(fmt::format("{}: a cluster is a JSON object", file));
  try {
    ClusterSpec cluster;
    if (doc.contains("preset")) {
      if (!doc["preset"].is_string()) throw InputError(fmt::format("{}: preset must be a string", file));
      try {
        cluster = cluster_preset(doc["preset"].get<std::string>());
      } catch (const InputError& e) {
        throw InputError(fmt::format("{}: preset: {}", file, e.what()));
      }
    }
    bool has_devices = doc.contains("preset");
    for (const auto& [key, value] : doc.items()) {
      if (key == "fulcrum") {
        if (value != 1) throw InputError(fmt::format("{}: unsupported format version {}", file, value.dump()));
      } else if (key == "preset") {
      } else if (key == "device") {
        read_device(value, cluster.device, file + ": device");
        check_kind(cluster.device.kind, doc.contains("preset"), file + ": device");
      } else if (key == "devices") {
        if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > kMostDevices) {
          throw InputError(fmt::format("{}: devices must be an integer from 1 to {}", file, kMostDevices));
        }
        cluster.devices = value.get<int64_t>();
        has_devices = true;
      } else if (key == "reserve_fraction") {
        if (!value.is_number() || value.get<double>() < 0 || value.get<double>() >= 1) {
          throw InputError(fmt::format("{}: reserve_fraction must be in [0, 1)", file));
        }
        cluster.reserve_fraction = value.get<double>();
      } else if (key == "reserve_bytes") {
        if (!value.is_number() || value.get<double>() < 0) {
          throw InputError(fmt::format("{}: reserve_bytes must not be negative", file));
        }
        cluster.reserve_bytes = value.get<double>();
      } else {
        throw InputError(fmt::format("{}: unknown key '{}'", file, key));
      }
    }
    if (!doc.contains("preset") && !doc.contains("device")) {
      throw InputError(fmt::format("{}: needs a preset or a device", file));
    }
    if (!has_devices) throw InputError(fmt::format("{}: devices is missing", file));
    if (cluster.usable_memory_bytes() <= 0) {
      throw InputError(fmt::format("{}: the memory reserve leaves nothing for training", file));
    }
    return cluster;
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: {}", file, e.what()));
  }
}

}  // namespace fulcrum

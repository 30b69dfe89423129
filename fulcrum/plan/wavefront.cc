#include "fulcrum/plan/wavefront.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "fulcrum/core/error.h"

namespace fulcrum {

std::vector<Wave> wavefront(const std::vector<LevelOp>& ops, const std::vector<LevelPart>& parts, int devices,
                            double start_seconds, PartThatFitsNone fits_none, WaveLength length) {
  struct Remaining {
    LevelPart part;
    int64_t left = 0;
  };
  std::vector<Remaining> remaining;
  std::vector<int64_t> done(ops.size(), 0);  // operators of each op already in waves
  for (const LevelPart& p : parts) {
    if (p.op < 0 || p.op >= static_cast<int>(ops.size()) || p.layers < 1 || p.devices < 1 || p.devices > devices ||
        !ops[p.op].curve->at(p.devices)) {
      throw InputError(fmt::format("a part of op {} on {} devices is not a valid allocation of {} devices", p.op,
                                   p.devices, devices));
    }
    remaining.push_back({p, p.layers});
  }
  auto seconds_per_layer = [&](int op, int n) { return ops[op].curve->at(n)->seconds; };
  // Time an op still needs, over its parts left, at their own counts.
  auto op_time_left = [&](int op) {
    double t = 0;
    for (const Remaining& r : remaining) {
      if (r.part.op == op) t += static_cast<double>(r.left) * seconds_per_layer(op, r.part.devices);
    }
    return t;
  };
  std::vector<Wave> waves;
  double now = start_seconds;
  while (std::any_of(remaining.begin(), remaining.end(), [](const Remaining& r) { return r.left > 0; })) {
    // Propose: largest device count first (ties: the op with more time left, then the earlier part).
    std::vector<int> order;
    for (int i = 0; i < static_cast<int>(remaining.size()); ++i) {
      if (remaining[i].left > 0) order.push_back(i);
    }
    std::vector<double> time_left(ops.size(), 0);
    for (int op = 0; op < static_cast<int>(ops.size()); ++op) time_left[op] = op_time_left(op);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      const LevelPart& x = remaining[a].part;
      const LevelPart& y = remaining[b].part;
      if (x.devices != y.devices) return x.devices > y.devices;
      return time_left[x.op] > time_left[y.op];
    });
    struct Chosen {
      int index = 0;
      int devices = 0;
    };
    std::vector<Chosen> chosen;
    std::vector<bool> op_in_wave(ops.size(), false);
    int used = 0;
    for (int i : order) {
      const LevelPart& p = remaining[i].part;
      if (op_in_wave[p.op] || used + p.devices > devices) continue;
      op_in_wave[p.op] = true;
      used += p.devices;
      chosen.push_back({i, p.devices});
    }
    // Extend: idle devices to the op with the most time left that can take its next valid count.
    while (used < devices) {
      int best = -1;
      for (int c = 0; c < static_cast<int>(chosen.size()); ++c) {
        const int op = remaining[chosen[c].index].part.op;
        const CurvePoint* next = ops[op].curve->next_after(chosen[c].devices);
        if (!next || used - chosen[c].devices + next->devices > devices) continue;
        if (best < 0 || time_left[op] > time_left[remaining[chosen[best].index].part.op]) best = c;
      }
      if (best < 0) break;
      const int op = remaining[chosen[best].index].part.op;
      const int next = ops[op].curve->next_after(chosen[best].devices)->devices;
      used += next - chosen[best].devices;
      chosen[best].devices = next;
    }
    // Align: one part's time to finish sets the length; the others run the whole operators that fit in it.
    auto time_to_finish = [&](const Chosen& c) {
      const Remaining& r = remaining[c.index];
      return static_cast<double>(r.left) * seconds_per_layer(r.part.op, c.devices);
    };
    // The operators a chosen part runs in a wave of `seconds`; 0 when it leaves the wave.
    auto fitting = [&](const Chosen& c, double seconds) -> int64_t {
      const Remaining& r = remaining[c.index];
      const int64_t fit = std::min<int64_t>(std::llround(seconds / seconds_per_layer(r.part.op, c.devices)), r.left);
      if (fit >= 1) return fit;
      return fits_none == PartThatFitsNone::kLeave ? 0 : 1;  // the part that sets the length always fits
    };
    double wave_length = std::numeric_limits<double>::infinity();
    for (const Chosen& c : chosen) wave_length = std::min(wave_length, time_to_finish(c));
    if (length == WaveLength::kBusiestWave) {
      double busiest = -1;
      for (const Chosen& candidate : chosen) {
        const double seconds = time_to_finish(candidate);
        double busy = 0, longest = 0;
        for (const Chosen& c : chosen) {
          const double run = static_cast<double>(fitting(c, seconds)) *
                             seconds_per_layer(remaining[c.index].part.op, c.devices);
          busy += run * c.devices;
          longest = std::max(longest, run);
        }
        const double share = busy / (static_cast<double>(devices) * longest);
        if (share > busiest * (1 + 1e-12) || (share >= busiest * (1 - 1e-12) && seconds < wave_length)) {
          busiest = share;
          wave_length = seconds;
        }
      }
    }
    Wave wave;
    wave.start_seconds = now;
    for (const Chosen& c : chosen) {
      Remaining& r = remaining[c.index];
      const double per_layer = seconds_per_layer(r.part.op, c.devices);
      const int64_t fit = fitting(c, wave_length);
      if (fit == 0) continue;
      WaveSlice s;
      s.op = r.part.op;
      s.devices = c.devices;
      s.first_layer = done[s.op];
      s.layers = fit;
      s.seconds = static_cast<double>(fit) * per_layer;
      done[s.op] += fit;
      r.left -= fit;
      wave.seconds = std::max(wave.seconds, s.seconds);
      wave.slices.push_back(s);
    }
    now += wave.seconds;
    waves.push_back(std::move(wave));
  }
  return waves;
}

}  // namespace fulcrum

#include "fulcrum/plan/recompute.h"

#include <algorithm>
#include <limits>

namespace fulcrum {
namespace {

// One point of a frontier: bytes, seconds, and how it was reached (this class's counts, the previous point).
struct Point {
  double bytes = 0;
  double seconds = 0;
  std::array<int64_t, 3> counts{};
  int32_t parent = -1;
};

// Keeps the points no other point beats on both bytes and seconds; sorted by bytes.
std::vector<Point> pareto(std::vector<Point> points) {
  std::sort(points.begin(), points.end(), [](const Point& a, const Point& b) {
    if (a.bytes != b.bytes) return a.bytes < b.bytes;
    if (a.seconds != b.seconds) return a.seconds < b.seconds;
    if (a.parent != b.parent) return a.parent < b.parent;
    return a.counts < b.counts;
  });
  std::vector<Point> out;
  double best = std::numeric_limits<double>::infinity();
  for (const Point& p : points) {
    if (p.seconds < best) {
      out.push_back(p);
      best = p.seconds;
    }
  }
  return out;
}

}  // namespace

RecomputeChoice choose_recompute(const std::vector<RecomputeClass>& classes, double budget_bytes) {
  // frontiers[k]: the frontier after classes 0..k; each point's parent indexes frontiers[k − 1].
  std::vector<std::vector<Point>> frontiers;
  std::vector<Point> previous{Point{}};
  for (const RecomputeClass& c : classes) {
    std::vector<Point> own;
    for (int64_t none = 0; none <= c.layers; ++none) {
      for (int64_t selective = 0; none + selective <= c.layers; ++selective) {
        const int64_t full = c.layers - none - selective;
        Point p;
        p.counts = {none, selective, full};
        p.bytes = none * c.kept_bytes[0] + selective * c.kept_bytes[1] + full * c.kept_bytes[2];
        p.seconds = none * c.recompute_seconds[0] + selective * c.recompute_seconds[1] + full * c.recompute_seconds[2];
        own.push_back(p);
      }
    }
    own = pareto(std::move(own));
    std::vector<Point> merged;
    merged.reserve(previous.size() * own.size());
    for (size_t i = 0; i < previous.size(); ++i) {
      for (const Point& o : own) {
        Point p = o;
        p.bytes += previous[i].bytes;
        p.seconds += previous[i].seconds;
        p.parent = static_cast<int32_t>(i);
        merged.push_back(p);
      }
    }
    previous = pareto(std::move(merged));
    frontiers.push_back(previous);
  }
  RecomputeChoice out;
  out.layers.assign(classes.size(), {0, 0, 0});
  // The frontier is sorted by bytes with seconds falling: the last point within budget is the fastest.
  int64_t pick = -1;
  for (size_t i = 0; i < previous.size(); ++i) {
    if (previous[i].bytes <= budget_bytes) pick = static_cast<int64_t>(i);
  }
  out.fits = pick >= 0;
  if (!out.fits) {
    pick = 0;  // the fewest bytes
    out.shortfall_bytes = previous[0].bytes - budget_bytes;
  }
  out.kept_bytes = previous[pick].bytes;
  out.recompute_seconds = previous[pick].seconds;
  int32_t index = static_cast<int32_t>(pick);
  for (size_t k = classes.size(); k-- > 0;) {
    const Point& p = frontiers[k][index];
    out.layers[k] = p.counts;
    index = p.parent;
  }
  return out;
}

}  // namespace fulcrum

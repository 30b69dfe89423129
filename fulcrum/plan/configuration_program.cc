#include "fulcrum/plan/configuration_program.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

// A column of the program: a configuration (each op's point, -1 where it does not run; its rates, operators per
// second) or the surplus of one op's constraint.
struct Column {
  int surplus_of = -1;      // the op whose surplus this is, or -1 for a configuration
  std::vector<int> points;  // per op, into its points
  std::vector<double> a;    // the constraint coefficients
  double cost() const { return surplus_of < 0 ? 1.0 : 0.0; }
};

// Solves M z = b for the k × k matrix M (row-major) by Gaussian elimination with partial pivoting; nullopt
// when M is singular.
std::optional<std::vector<double>> solve(std::vector<double> m, std::vector<double> b, size_t k) {
  for (size_t col = 0; col < k; ++col) {
    size_t pivot = col;
    for (size_t r = col + 1; r < k; ++r) {
      if (std::abs(m[r * k + col]) > std::abs(m[pivot * k + col])) pivot = r;
    }
    if (std::abs(m[pivot * k + col]) < 1e-300) return std::nullopt;
    if (pivot != col) {
      for (size_t c = 0; c < k; ++c) std::swap(m[pivot * k + c], m[col * k + c]);
      std::swap(b[pivot], b[col]);
    }
    for (size_t r = col + 1; r < k; ++r) {
      const double f = m[r * k + col] / m[col * k + col];
      if (f == 0) continue;
      for (size_t c = col; c < k; ++c) m[r * k + c] -= f * m[col * k + c];
      b[r] -= f * b[col];
    }
  }
  std::vector<double> z(k);
  for (size_t r = k; r-- > 0;) {
    double s = b[r];
    for (size_t c = r + 1; c < k; ++c) s -= m[r * k + c] * z[c];
    z[r] = s / m[r * k + r];
  }
  return z;
}

}  // namespace

ConfigurationProgram configuration_program(const std::vector<LevelOp>& ops, int devices, double start_seconds) {
  if (devices < 1) throw InputError(fmt::format("a level needs at least one device, not {}", devices));
  if (ops.empty()) throw InputError("a level needs at least one MetaOp");
  const size_t k = ops.size();
  // Each op's points on `devices` or fewer.
  std::vector<std::vector<CurvePoint>> points(k);
  for (size_t m = 0; m < k; ++m) {
    if (!ops[m].curve || ops[m].curve->points().empty() || ops[m].layers < 1) {
      throw InputError("every MetaOp of a level needs a scalability curve and at least one operator");
    }
    for (const CurvePoint& p : ops[m].curve->points()) {
      if (p.devices <= devices && p.seconds > 0) points[m].push_back(p);
    }
  }
  ConfigurationProgram out;
  for (const auto& p : points) {
    if (p.empty()) return out;
  }
  // Each pivot solves the dense k × k basis three times: past this many ops a level's program takes seconds (100
  // ops 3 s, 200 more than 30 s) where the wavefront's packings take milliseconds.
  if (k > kMostConfigurationProgramOps) return out;
  auto configuration = [&](std::vector<int> chosen) {
    Column c;
    c.points = std::move(chosen);
    c.a.assign(k, 0.0);
    for (size_t m = 0; m < k; ++m) {
      if (c.points[m] >= 0) c.a[m] = 1.0 / points[m][c.points[m]].seconds;
    }
    return c;
  };
  const std::vector<double> layers = [&] {
    std::vector<double> l(k);
    for (size_t m = 0; m < k; ++m) l[m] = static_cast<double>(ops[m].layers);
    return l;
  }();
  // The first basis: each op alone on its fastest count, one after another (feasible: every op gets through).
  std::vector<Column> basis;
  for (size_t m = 0; m < k; ++m) {
    std::vector<int> chosen(k, -1);
    chosen[m] = static_cast<int>(points[m].size()) - 1;
    basis.push_back(configuration(std::move(chosen)));
  }
  auto basis_matrix = [&](bool transposed) {
    std::vector<double> b(k * k);
    for (size_t r = 0; r < k; ++r) {
      for (size_t c = 0; c < k; ++c) b[r * k + c] = transposed ? basis[r].a[c] : basis[c].a[r];
    }
    return b;
  };
  // The pricing knapsack's tables: the best value on at most c devices over the ops so far, and each op's point
  // at each capacity (-1: it does not run).
  std::vector<double> best(devices + 1), next(devices + 1);
  std::vector<std::vector<int>> take(k, std::vector<int>(devices + 1, -1));
  constexpr double kTolerance = 1e-9;
  const int limit = 50 + 20 * static_cast<int>(k);
  std::vector<double> x;
  for (;; ++out.iterations) {
    if (out.iterations > limit) return {};
    const auto primal = solve(basis_matrix(false), layers, k);
    std::vector<double> costs(k);
    for (size_t j = 0; j < k; ++j) costs[j] = basis[j].cost();
    const auto dual = solve(basis_matrix(true), costs, k);
    if (!primal || !dual) return {};
    x = *primal;
    const std::vector<double>& y = *dual;
    // The configuration of most value Σ y_m / T_m(n_m) on at most `devices` devices.
    std::fill(best.begin(), best.end(), 0.0);
    for (size_t m = 0; m < k; ++m) {
      std::fill(take[m].begin(), take[m].end(), -1);
      if (!(y[m] > 0)) continue;
      next = best;
      for (size_t p = 0; p < points[m].size(); ++p) {
        const int n = points[m][p].devices;
        const double value = y[m] / points[m][p].seconds;
        for (int c = n; c <= devices; ++c) {
          if (best[c - n] + value > next[c]) {
            next[c] = best[c - n] + value;
            take[m][c] = static_cast<int>(p);
          }
        }
      }
      best.swap(next);
    }
    // Entering: that configuration (reduced cost 1 − its value) or a surplus whose dual is negative (reduced cost
    // y_m), whichever has the most negative reduced cost.
    std::optional<Column> entering;
    double reduced = -kTolerance;
    if (1.0 - best[devices] < reduced) {
      std::vector<int> chosen(k, -1);
      int c = devices;
      for (size_t m = k; m-- > 0;) {
        chosen[m] = take[m][c];
        if (chosen[m] >= 0) c -= points[m][chosen[m]].devices;
      }
      reduced = 1.0 - best[devices];
      entering = configuration(std::move(chosen));
    }
    for (size_t m = 0; m < k; ++m) {
      if (y[m] < reduced) {
        reduced = y[m];
        Column s;
        s.surplus_of = static_cast<int>(m);
        s.a.assign(k, 0.0);
        s.a[m] = -1.0;
        entering = std::move(s);
      }
    }
    if (!entering) break;  // optimal
    const auto direction = solve(basis_matrix(false), entering->a, k);
    if (!direction) return {};
    size_t leaving = k;
    double ratio = 0;
    for (size_t i = 0; i < k; ++i) {
      const double d = (*direction)[i];
      if (d <= 1e-12) continue;
      const double r = std::max(0.0, x[i]) / d;
      if (leaving == k || r < ratio) {
        leaving = i;
        ratio = r;
      }
    }
    if (leaving == k) return {};  // unbounded: cannot happen with a cost bounded below, but never loop on it
    basis[leaving] = std::move(*entering);
  }
  // The optimum's configurations, and each op's operators shared among them by what each gets through.
  std::vector<size_t> used;
  for (size_t j = 0; j < k; ++j) {
    if (basis[j].surplus_of < 0 && x[j] > 0) {
      used.push_back(j);
      out.makespan_seconds += x[j];
    }
  }
  // Longer configurations first, ties by their points: the order is deterministic and every order is as short.
  std::sort(used.begin(), used.end(), [&](size_t a, size_t b) {
    if (x[a] != x[b]) return x[a] > x[b];
    return basis[a].points < basis[b].points;
  });
  std::vector<std::vector<int64_t>> share(used.size(), std::vector<int64_t>(k, 0));
  for (size_t m = 0; m < k; ++m) {
    std::vector<double> exact(used.size(), 0.0);
    for (size_t u = 0; u < used.size(); ++u) exact[u] = x[used[u]] * basis[used[u]].a[m];
    const double total = std::accumulate(exact.begin(), exact.end(), 0.0);
    if (!(total > 0)) return {};
    // Scaled to exactly L_m (a basic surplus gets some ops through more than they have), then rounded: floors,
    // and the remainder to the largest fractions (ties: the earlier configuration).
    int64_t given = 0;
    std::vector<std::pair<double, size_t>> fractions;
    for (size_t u = 0; u < used.size(); ++u) {
      const double want = exact[u] * layers[m] / total;
      share[u][m] = static_cast<int64_t>(std::floor(want + 1e-9));
      given += share[u][m];
      if (exact[u] > 0) fractions.push_back({want - static_cast<double>(share[u][m]), u});
    }
    std::stable_sort(fractions.begin(), fractions.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t i = 0; given < ops[m].layers; ++i) {
      ++share[fractions[i % fractions.size()].second][m];
      ++given;
    }
    while (given > ops[m].layers) {  // floors rounded up by the tolerance: take back from the largest share
      size_t most = 0;
      for (size_t u = 1; u < used.size(); ++u) {
        if (share[u][m] > share[most][m]) most = u;
      }
      --share[most][m];
      --given;
    }
  }
  std::vector<int64_t> first(k, 0);
  double at = start_seconds;
  for (size_t u = 0; u < used.size(); ++u) {
    const Column& c = basis[used[u]];
    Wave w;
    w.start_seconds = at;
    for (size_t m = 0; m < k; ++m) {
      if (share[u][m] == 0) continue;
      const CurvePoint& p = points[m][c.points[m]];
      const double seconds = static_cast<double>(share[u][m]) * p.seconds;
      w.slices.push_back({static_cast<int>(m), p.devices, first[m], share[u][m], seconds, -1});
      first[m] += share[u][m];
      w.seconds = std::max(w.seconds, seconds);
    }
    if (w.slices.empty()) continue;
    at += w.seconds;
    out.waves.push_back(std::move(w));
  }
  return out;
}

}  // namespace fulcrum

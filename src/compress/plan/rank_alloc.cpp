// Global rank allocation (include/latentllm/compress.hpp, "Global rank allocation"): the greedy over
// the modules' concave hulls of loss drop against parameters, under the uniform plan's total.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <queue>

#include "compress/plan/rank_plan.hpp"
#include "core/enum_names.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/log.hpp"

namespace latentllm::compress {
namespace {

constexpr auto kAllocNames = core::enum_names<RankAlloc>(core::Named<RankAlloc>{RankAlloc::Uniform, "uniform"},
                                                         core::Named<RankAlloc>{RankAlloc::Global, "global"});
constexpr auto kScoreNames = core::enum_names<AllocScore>(core::Named<AllocScore>{AllocScore::Relative, "relative"},
                                                          core::Named<AllocScore>{AllocScore::Grouped, "grouped"});

// A hull step of one module: from rank `from` to rank `to`, `cost` more weights for `gain`.
struct Chunk {
  std::int64_t to = 0;
  std::int64_t cost = 0;
  double gain = 0;
  double efficiency() const { return gain / static_cast<double>(cost); }
};

// What the greedy tracks of one module.
struct Item {
  std::int64_t out = 0, in = 0, k = 0;  // d', d, min(d, d')
  std::vector<double> gain;             // [k] gain[i]: the normalized loss drop of rank i + 1
  std::vector<Chunk> hull;              // steps of the upper concave hull from its rank, efficiency falling
  std::int64_t rank = 1;
  std::size_t next = 0;                 // the next hull step
};

std::int64_t params_of(const Item& it, std::int64_t r, bool bi) { return eval::factored_params(it.out, it.in, r, bi); }

// The upper concave hull of the points (params(r), Σ_{i<r} gain_i), r = from..to (params increase with r,
// rank_plan.hpp), as steps between consecutive vertices (Andrew's monotone chain, upper half).
std::vector<Chunk> concave_hull(const Item& it, bool bi, std::int64_t from, std::int64_t to) {
  struct Point {
    std::int64_t r, x;
    double y;
  };
  std::vector<Point> h;
  double y = 0;
  for (std::int64_t r = from; r <= to; ++r) {
    if (r > from) y += it.gain[static_cast<std::size_t>(r - 1)];
    const Point p{r, params_of(it, r, bi), y};
    // Pop the last vertex while it lies on or below the segment from the one before it to p.
    while (h.size() >= 2) {
      const Point& a = h[h.size() - 2];
      const Point& b = h.back();
      const double cross = (b.y - a.y) * static_cast<double>(p.x - a.x) - (p.y - a.y) * static_cast<double>(b.x - a.x);
      if (cross > 0) break;
      h.pop_back();
    }
    h.push_back(p);
  }
  std::vector<Chunk> steps;
  for (std::size_t i = 1; i < h.size(); ++i) steps.push_back({h[i].r, h[i].x - h[i - 1].x, h[i].y - h[i - 1].y});
  return steps;
}

// The largest rank `it` can reach from its current one with `budget` more weights.
std::int64_t reachable(const Item& it, std::int64_t budget, bool bi) {
  std::int64_t r = it.rank;
  while (r < it.k && params_of(it, r + 1, bi) - params_of(it, it.rank, bi) <= budget) ++r;
  return r;
}

// Greedy on the items `idx` with `budget` weights on top of their current ranks: hull steps, most
// efficient first (ties: the earlier item). A step that no longer fits replaces its item's hull by the
// hull of the ranks still within budget (the budget only shrinks, so that is all it can still reach).
// Then single steps, the best gain per weight that still fits, until none does.
void greedy(std::vector<Item>& items, const std::vector<std::size_t>& idx, std::int64_t budget, bool bi) {
  using Entry = std::pair<double, std::ptrdiff_t>;  // efficiency, −index (max-heap: earlier index wins ties)
  std::priority_queue<Entry> queue;
  auto push = [&](std::size_t i) {
    const Item& it = items[i];
    if (it.next < it.hull.size() && it.hull[it.next].gain > 0)
      queue.push({it.hull[it.next].efficiency(), -static_cast<std::ptrdiff_t>(i)});
  };
  for (std::size_t i : idx) push(i);
  while (!queue.empty()) {
    const auto i = static_cast<std::size_t>(-queue.top().second);
    queue.pop();
    Item& it = items[i];
    const Chunk& c = it.hull[it.next];
    if (c.cost > budget) {
      it.hull = concave_hull(it, bi, it.rank, reachable(it, budget, bi));
      it.next = 0;
      push(i);
      continue;
    }
    budget -= c.cost;
    it.rank = c.to;
    ++it.next;
    push(i);
  }
  for (;;) {
    std::size_t best = idx.size();
    double best_eff = 0;
    for (std::size_t n = 0; n < idx.size(); ++n) {
      const Item& it = items[idx[n]];
      if (it.rank >= it.k) continue;
      const std::int64_t cost = params_of(it, it.rank + 1, bi) - params_of(it, it.rank, bi);
      const double g = it.gain[static_cast<std::size_t>(it.rank)];
      if (cost > budget || g <= 0) continue;
      const double eff = g / static_cast<double>(cost);
      if (best == idx.size() || eff > best_eff) best = n, best_eff = eff;
    }
    if (best == idx.size()) break;
    Item& it = items[idx[best]];
    budget -= params_of(it, it.rank + 1, bi) - params_of(it, it.rank, bi);
    ++it.rank;
  }
}

Item make_item(const ModuleSpectrum& s, bool bi) {
  Item it;
  it.out = s.out;
  it.in = s.in;
  it.k = std::min(s.out, s.in);
  const double energy = spectrum_energy(s);
  it.gain.resize(s.sigma2.size());
  for (std::size_t i = 0; i < s.sigma2.size(); ++i) it.gain[i] = energy > 0 ? s.sigma2[i] / energy : 0.0;
  it.hull = concave_hull(it, bi, 1, it.k);
  return it;
}

}  // namespace

std::string_view rank_alloc_name(RankAlloc a) { return kAllocNames.name(a); }

RankAlloc parse_rank_alloc(std::string_view name) {
  return kAllocNames.parse(name, "--rank-alloc: unknown allocation (expected {}, got '{}')");
}

std::string_view alloc_score_name(AllocScore s) { return kScoreNames.name(s); }

AllocScore parse_alloc_score(std::string_view name) {
  return kScoreNames.parse(name, "--alloc-score: unknown score (expected {}, got '{}')");
}

RankPlan allocate_ranks(const std::vector<ModuleSpectrum>& spectra, double ratio, Junction j, AllocScore score,
                        std::int64_t n_tok) {
  std::vector<ModuleShape> shapes;
  for (const auto& s : spectra) shapes.push_back({s.name, s.out, s.in});
  RankPlan plan = plan_ranks(shapes, ratio, j, n_tok);  // the uniform plan: its total is the budget
  const bool bi = j == Junction::BlockIdentity;
  std::vector<Item> items;
  items.reserve(spectra.size());
  for (const auto& s : spectra) items.push_back(make_item(s, bi));
  // Groups competing for one budget: everything, or one per role.
  std::map<int, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < spectra.size(); ++i)
    groups[score == AllocScore::Grouped ? static_cast<int>(spectra[i].role) : 0].push_back(i);
  for (const auto& [key, idx] : groups) {
    std::int64_t budget = 0;
    for (std::size_t i : idx) budget += plan.modules[i].params - params_of(items[i], 1, bi);
    if (budget < 0) throw Error(fmt::format("rank allocation: the uniform plan is below rank 1 ({} weights)", budget));
    greedy(items, idx, budget, bi);
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    ModulePlan& p = plan.modules[i];
    p.rank = items[i].rank;
    p.params = eval::factored_params(p.out, p.in, p.rank, bi);
    p.macs = eval::factored_macs(p.out, p.in, p.rank, bi, n_tok);
  }
  return plan;
}

}  // namespace latentllm::compress

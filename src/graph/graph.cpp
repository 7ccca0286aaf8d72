#include "graph/graph.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/parallel.hpp"
#include "dist/comm.hpp"
#include "latentllm/error.hpp"
#include "latentllm/threads.hpp"

namespace latentllm::graph {

void Bytes::get_raw(void* dst, std::size_t n) {
  if (at_ + n > data_.size()) {
    throw Error(fmt::format("task result: bytes (expected {} more, got {})", n, data_.size() - at_));
  }
  if (n > 0) std::memcpy(dst, data_.data() + at_, n);
  at_ += n;
}

namespace {

class Processes final : public Exchange {
 public:
  int size() const override { return dist::size(); }
  int rank() const override { return dist::rank(); }
  void broadcast(std::vector<char>& bytes, int root) override {
    // The size first (a small broadcast waits without spinning), then the bytes.
    auto n = static_cast<std::int64_t>(bytes.size());
    dist::broadcast_bytes(&n, sizeof n, root);
    bytes.resize(static_cast<std::size_t>(n));
    dist::broadcast_bytes(bytes.data(), n, root);
  }
  void barrier() override { dist::barrier(); }
  int threads() const override { return core::num_threads(); }
};

class ThisProcess final : public Exchange {
 public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  void broadcast(std::vector<char>&, int) override {}
  void barrier() override {}
  int threads() const override { return core::num_threads(); }
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

std::vector<int> Exchange::owners_by_cost(const std::vector<double>& costs) const {
  return size() > 1 ? dist::owners_by_cost(costs, size()) : std::vector<int>(costs.size(), 0);
}

void set_stop_advice(const std::string& advice) { dist::set_stop_advice(advice); }

Exchange& processes() {
  static Processes p;
  return p;
}

Exchange& this_process() {
  static ThisProcess p;
  return p;
}

struct Graph::Node {
  std::string what, group;
  double cost = 0;
  bool finishing = false;
  std::vector<int> deps;     // earlier tasks
  int decl = -1;             // the declaration (index into decls_) of a site task
  std::function<void(Bytes&)> run;   // on the owner: computes and writes the result
  std::function<void(Bytes&)> take;  // on every rank: reads it back
  bool done = false;         // its result taken on this rank
  std::vector<char> out;     // on the owner, until exchanged
  std::vector<char> notes;   // what it recorded (every rank, after the exchange)
  double seconds = 0;
  bool replayed = false;
  int after = -1;            // finishing work run right after that task on its owner
};

struct Graph::Effect {
  std::string group;
  bool layer_end = false;
  std::vector<int> deps;
  std::function<void()> fn;
};

struct Graph::Decl {
  std::string group;
  std::vector<char> notes;  // what declaring recorded
  std::vector<int> tasks, effects;  // its site tasks and site-end effects
};

Graph::Graph(Exchange& ex, Hooks hooks) : ex_(ex), hooks_(std::move(hooks)) {}
Graph::~Graph() = default;

std::size_t Graph::pending() const { return nodes_.size() + effects_.size(); }

void Graph::observe(const std::string& group, bool begin) const {
  if (hooks_.observe) hooks_.observe(group, begin);
}

void Graph::time(const std::string& group, const std::string& task, int owner, int thread, double seconds,
                 const std::string& after) const {
  if (hooks_.timed) hooks_.timed({layer_, group, task, owner, thread, seconds, after});
}

void Graph::declare(std::string group, const std::function<void(Graph&)>& build) {
  decls_.push_back(Decl{group, {}, {}, {}});
  const int at = static_cast<int>(decls_.size()) - 1;
  current_ = at;
  observe(group, true);
  const auto t0 = Clock::now();
  try {
    if (hooks_.journal) {
      std::vector<char> notes = hooks_.journal->capture([&] { build(*this); });
      decls_[static_cast<std::size_t>(at)].notes = std::move(notes);
    } else {
      build(*this);
    }
  } catch (...) {
    current_ = -1;
    throw;
  }
  current_ = -1;
  time(group, {}, ex_.rank(), 0, seconds_since(t0));
  observe(group, false);
}

int Graph::add_node(Spec spec, bool finishing, std::function<void(Bytes&)> run, std::function<void(Bytes&)> take,
                    std::vector<int> deps) {
  if (current_ < 0) throw std::logic_error("task graph: a task declared outside Graph::declare");
  auto n = std::make_unique<Node>();
  n->what = std::move(spec.what);
  n->cost = spec.cost;
  n->finishing = finishing;
  n->group = decls_[static_cast<std::size_t>(current_)].group;
  n->run = std::move(run);
  n->take = std::move(take);
  for (const int d : deps) {
    if (d < 0 || d >= static_cast<int>(nodes_.size())) throw std::logic_error("task graph: a dependency on no task");
  }
  n->deps = std::move(deps);
  const int id = static_cast<int>(nodes_.size());
  if (!finishing) {
    n->decl = current_;
    decls_[static_cast<std::size_t>(current_)].tasks.push_back(id);
  }
  nodes_.push_back(std::move(n));
  return id;
}

void Graph::add_effect(bool layer_end, std::function<void()> fn, std::vector<int> deps) {
  if (current_ < 0) throw std::logic_error("task graph: an effect declared outside Graph::declare");
  Decl& d = decls_[static_cast<std::size_t>(current_)];
  effects_.push_back(Effect{d.group, layer_end, std::move(deps), std::move(fn)});
  if (!layer_end) d.effects.push_back(static_cast<int>(effects_.size()) - 1);
}

// The site's tasks by round. A task with dependencies among them runs in the round after its last one;
// a task without runs in round 0 when a dependent needs it in round 1, else it floats: it joins, within
// the rounds its dependents allow, the round whose fixed tasks cost most (the first of equal ones), where
// the other ranks would wait longest.
std::vector<std::vector<int>> Graph::rounds_of(const std::vector<int>& site) const {
  const std::size_t n = site.size();
  std::vector<int> level(n, 0), latest(n, std::numeric_limits<int>::max());
  std::vector<char> has_deps(n, 0);
  auto pos = [&](int id) -> std::ptrdiff_t {
    const auto it = std::find(site.begin(), site.end(), id);
    return it == site.end() ? -1 : it - site.begin();
  };
  int depth = 0;
  for (std::size_t k = 0; k < n; ++k) {
    for (const int d : nodes_[static_cast<std::size_t>(site[k])]->deps) {
      const std::ptrdiff_t p = pos(d);
      if (p < 0) continue;  // done in an earlier site
      has_deps[k] = 1;
      level[k] = std::max(level[k], level[static_cast<std::size_t>(p)] + 1);
    }
    for (const int d : nodes_[static_cast<std::size_t>(site[k])]->deps) {
      const std::ptrdiff_t p = pos(d);
      if (p >= 0) latest[static_cast<std::size_t>(p)] = std::min(latest[static_cast<std::size_t>(p)], level[k] - 1);
    }
    depth = std::max(depth, level[k] + 1);
  }
  std::vector<double> cost(static_cast<std::size_t>(depth), 0.0);
  std::vector<char> floating(n, 0);
  for (std::size_t k = 0; k < n; ++k) {
    if (!has_deps[k]) latest[k] = std::min(latest[k], depth - 1);
    floating[k] = !has_deps[k] && latest[k] > 0;
    if (!floating[k]) cost[static_cast<std::size_t>(level[k])] += nodes_[static_cast<std::size_t>(site[k])]->cost;
  }
  for (std::size_t k = 0; k < n; ++k) {
    if (!floating[k]) continue;
    const auto end = cost.begin() + latest[k] + 1;
    level[k] = static_cast<int>(std::max_element(cost.begin(), end) - cost.begin());
  }
  std::vector<std::vector<int>> rounds(static_cast<std::size_t>(depth));
  for (std::size_t k = 0; k < n; ++k) rounds[static_cast<std::size_t>(level[k])].push_back(site[k]);
  return rounds;
}

// Slot s of a round is rank s mod K, thread s / K: with one thread per rank the slots are the ranks.
int Graph::agree_slots() {
  int t = std::max(1, ex_.threads());
  ex_.broadcast_value(t, 0);  // rank 0's count on every rank, so that every rank places the same
  threads_ = std::max(1, t);
  return ex_.size() * threads_;
}

// This rank's share of the tasks (slots[j] owns ids[j]): each of its threads' tasks in order, the threads
// at once when more than one has work.
void Graph::run_tasks(const std::vector<int>& ids, const std::vector<int>& slots) {
  const int k = ex_.size();
  std::vector<std::vector<std::size_t>> by_thread(static_cast<std::size_t>(threads_));
  for (std::size_t j = 0; j < ids.size(); ++j)
    if (slots[j] % k == ex_.rank()) by_thread[static_cast<std::size_t>(slots[j] / k)].push_back(j);
  const auto busy = std::count_if(by_thread.begin(), by_thread.end(), [](const auto& l) { return !l.empty(); });
  if (busy > 1) return run_at_once(ids, by_thread);
  for (const auto& list : by_thread) {
    for (const std::size_t j : list) {
      Node& n = *nodes_[static_cast<std::size_t>(ids[j])];
      observe(n.group, true);
      run_task(n);
      observe(n.group, false);
    }
  }
}

// One task on the calling thread: its result and notes, read back at once (finishing work right after
// it on the same thread reads it).
void Graph::run_task(Node& n) {
  const int now = at_once_.fetch_add(1) + 1;
  for (int most = most_at_once_.load(); now > most && !most_at_once_.compare_exchange_weak(most, now);) {
  }
  struct Leave {
    std::atomic<int>& c;
    ~Leave() { c.fetch_sub(1); }
  } leave{at_once_};
  const auto t0 = Clock::now();
  Bytes b;
  if (hooks_.journal) {
    n.notes = hooks_.journal->capture([&] { n.run(b); });
  } else {
    n.run(b);
  }
  n.seconds = seconds_since(t0);
  n.out = std::move(b.data());
  n.run = nullptr;  // what it held (its inputs) is freed now
  take(n);
}

// The threads' task lists at once on the pool: chunk t is thread t's list, run in order. A task touches
// only its own node (and the values it reads, all from earlier rounds), its notes go to a capture on the
// thread that runs it, and a parallel_for inside it runs inline (core::parallel_for in a region). A
// failing task ends its list; the failure first in task order is rethrown, the one a single thread
// would have met first.
void Graph::run_at_once(const std::vector<int>& ids, const std::vector<std::vector<std::size_t>>& by_thread) {
  std::vector<std::size_t> mine;
  for (const auto& list : by_thread) mine.insert(mine.end(), list.begin(), list.end());
  std::sort(mine.begin(), mine.end());
  std::vector<std::string> groups;  // the groups at work on this rank, in task order, for the observer
  for (const std::size_t j : mine) {
    const std::string& g = nodes_[static_cast<std::size_t>(ids[j])]->group;
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  }
  const std::string part = fmt::format("{}", fmt::join(groups, "+"));
  std::vector<std::exception_ptr> failed(ids.size());
  observe(part, true);
  core::parallel_for(static_cast<std::int64_t>(by_thread.size()), 1, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      for (const std::size_t j : by_thread[static_cast<std::size_t>(t)]) {
        try {
          run_task(*nodes_[static_cast<std::size_t>(ids[j])]);
        } catch (...) {
          failed[j] = std::current_exception();
          break;
        }
      }
    }
  });
  observe(part, false);
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
}

// The result from its bytes into its value, as every rank reads it.
void Graph::take(Node& n) {
  Bytes result(n.out);
  n.take(result);
  if (!result.consumed()) throw std::logic_error("task graph: " + n.what + ": result bytes left unread");
  n.take = nullptr;
}

// Every rank reads the tasks' results in order, from their owners.
void Graph::exchange_results(const std::vector<int>& ids, const std::vector<int>& slots) {
  const int k = ex_.size();
  for (std::size_t j = 0; j < ids.size(); ++j) {
    Node& n = *nodes_[static_cast<std::size_t>(ids[j])];
    const int owner = slots[j] % k, thread = slots[j] / k;
    if (k > 1) {
      const bool mine = owner == ex_.rank();
      Bytes msg;
      if (mine) msg.put(n.out), msg.put(n.notes), msg.put(n.seconds);
      ex_.broadcast(msg.data(), owner);
      if (!mine) {
        msg.get(n.out), msg.get(n.notes), msg.get(n.seconds);
        take(n);
      }
    }
    n.out = {};
    n.run = nullptr;
    n.done = true;
    time(n.group, n.what, owner, thread, n.seconds,
         n.after >= 0 ? nodes_[static_cast<std::size_t>(n.after)]->what : "");
  }
}

void Graph::run_round(const std::vector<int>& jobs, int round) {
  const int k = ex_.size(), n_slots = agree_slots();
  std::vector<double> costs;
  for (const int id : jobs) costs.push_back(nodes_[static_cast<std::size_t>(id)]->cost);
  std::vector<int> owners = dist::owners_by_cost(costs, n_slots);  // slots
  // Finishing work in the round's idle time (by modelled cost, so every rank decides the same): first
  // what reads one of the round's tasks, on that task's slot, in task order; then pending work whose
  // inputs are ready, each to the least loaded slot; both only while within the busiest slot's load.
  std::vector<int> order = jobs, order_owners = owners;
  std::vector<int> fill, fill_owners;
  if (n_slots > 1 && !jobs.empty()) {
    std::vector<double> load(static_cast<std::size_t>(n_slots), 0.0);
    for (std::size_t j = 0; j < jobs.size(); ++j) load[static_cast<std::size_t>(owners[j])] += costs[j];
    const double busiest = *std::max_element(load.begin(), load.end());
    std::vector<char> taken(nodes_.size(), 0);
    order.clear(), order_owners.clear();
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      order.push_back(jobs[j]), order_owners.push_back(owners[j]);
      double& l = load[static_cast<std::size_t>(owners[j])];
      for (std::size_t f = 0; f < nodes_.size(); ++f) {
        const Node& n = *nodes_[f];
        if (!n.finishing || n.done || taken[f]) continue;
        const bool reads_it = std::find(n.deps.begin(), n.deps.end(), jobs[j]) != n.deps.end();
        const bool rest_ready = std::all_of(n.deps.begin(), n.deps.end(), [&](int d) {
          return d == jobs[j] || nodes_[static_cast<std::size_t>(d)]->done;
        });
        if (!reads_it || !rest_ready || l + n.cost > busiest) continue;
        l += n.cost;
        taken[f] = 1;
        nodes_[f]->after = jobs[j];
        order.push_back(static_cast<int>(f)), order_owners.push_back(owners[j]);
        placed_.push_back({n.what, round, owners[j] % k, true, owners[j] / k});
      }
    }
    for (std::size_t f = 0; f < nodes_.size(); ++f) {
      const Node& n = *nodes_[f];
      if (!n.finishing || n.done || taken[f]) continue;
      if (!std::all_of(n.deps.begin(), n.deps.end(), [&](int d) { return nodes_[static_cast<std::size_t>(d)]->done; }))
        continue;
      const auto least = std::min_element(load.begin(), load.end());  // the first of equal loads
      if (*least + n.cost > busiest) continue;
      *least += n.cost;
      taken[f] = 1;
      fill.push_back(static_cast<int>(f));
      fill_owners.push_back(static_cast<int>(least - load.begin()));
      placed_.push_back({n.what, round, fill_owners.back() % k, true, fill_owners.back() / k});
    }
  }
  for (std::size_t j = 0; j < jobs.size(); ++j)
    placed_.push_back({nodes_[static_cast<std::size_t>(jobs[j])]->what, round, owners[j] % k, false, owners[j] / k});
  order.insert(order.end(), fill.begin(), fill.end());
  order_owners.insert(order_owners.end(), fill_owners.begin(), fill_owners.end());
  run_tasks(order, order_owners);
  exchange_results(order, order_owners);
}

void Graph::record(const std::vector<const std::vector<char>*>& notes, const std::function<void()>& then) {
  if (hooks_.journal) {
    hooks_.journal->record(notes, then);
  } else {
    then();
  }
}

void Graph::run_site() {
  std::vector<int> site;
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (!nodes_[i]->finishing && !nodes_[i]->done) site.push_back(static_cast<int>(i));
  placed_.clear();
  const std::vector<std::vector<int>> rounds = rounds_of(site);
  for (std::size_t r = 0; r < rounds.size(); ++r) run_round(rounds[r], static_cast<int>(r));
  // Each declaration's notes (its own, then its tasks' in declaration order) and site-end effects.
  for (Decl& d : decls_) {
    std::vector<const std::vector<char>*> notes{&d.notes};
    for (const int t : d.tasks) notes.push_back(&nodes_[static_cast<std::size_t>(t)]->notes);
    observe(d.group, true);
    const auto t0 = Clock::now();
    record(notes, [&] {
      for (const int e : d.effects) {
        Effect& eff = effects_[static_cast<std::size_t>(e)];
        eff.fn();
        eff.fn = nullptr;
      }
    });
    time(d.group, {}, ex_.rank(), 0, seconds_since(t0));
    observe(d.group, false);
    for (const int t : d.tasks) nodes_[static_cast<std::size_t>(t)]->notes = {};
  }
  decls_.clear();
}

void Graph::end_layer() {
  if (!decls_.empty()) throw std::logic_error("task graph: declarations left without run_site");
  std::vector<int> rest;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = *nodes_[i];
    if (n.done) continue;
    if (!n.finishing) throw std::logic_error("task graph: " + n.what + ": a site task left at the layer's end");
    for (const int d : n.deps)
      if (!nodes_[static_cast<std::size_t>(d)]->done && !nodes_[static_cast<std::size_t>(d)]->finishing)
        throw std::logic_error("task graph: " + n.what + ": reads a task that never ran");
    rest.push_back(static_cast<int>(i));
  }
  // Costliest first (ties in declaration order), for the owners' balance; in waves, each of the work
  // whose inputs are ready, since the tasks of a wave run at once.
  std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) {
    return nodes_[static_cast<std::size_t>(a)]->cost > nodes_[static_cast<std::size_t>(b)]->cost;
  });
  while (!rest.empty()) {
    std::vector<int> wave, later;
    for (const int id : rest) {
      const auto& deps = nodes_[static_cast<std::size_t>(id)]->deps;
      const bool ready = std::all_of(deps.begin(), deps.end(), [&](int d) { return nodes_[static_cast<std::size_t>(d)]->done; });
      (ready ? wave : later).push_back(id);
    }
    std::vector<double> costs;
    for (const int id : wave) costs.push_back(nodes_[static_cast<std::size_t>(id)]->cost);
    const std::vector<int> owners = dist::owners_by_cost(costs, agree_slots());  // slots
    run_tasks(wave, owners);
    exchange_results(wave, owners);
    rest = std::move(later);
  }
  // The layer-end effects in declaration order, each after the notes of the finishing work it reads.
  for (Effect& e : effects_) {
    if (!e.layer_end) continue;
    std::vector<int> deps = e.deps;
    std::sort(deps.begin(), deps.end());
    std::vector<const std::vector<char>*> notes;
    for (const int d : deps) {
      Node& n = *nodes_[static_cast<std::size_t>(d)];
      if (!n.finishing || n.replayed) continue;
      n.replayed = true;
      notes.push_back(&n.notes);
    }
    const auto t0 = Clock::now();
    record(notes, e.fn);
    time(e.group, {}, ex_.rank(), 0, seconds_since(t0));
  }
  std::vector<const std::vector<char>*> unread;  // finishing work no effect reads: its notes still count
  for (const auto& n : nodes_)
    if (n->finishing && !n->replayed) unread.push_back(&n->notes);
  if (!unread.empty()) record(unread, [] {});
  nodes_.clear();
  effects_.clear();
}

void Graph::run_now(int owner, const std::string& what, const std::function<void(Bytes&)>& run,
                    const std::function<void(Bytes&)>& take) {
  Bytes msg;
  if (owner == ex_.rank() || ex_.size() == 1) {
    Bytes b;
    std::vector<char> notes;
    if (hooks_.journal) {
      notes = hooks_.journal->capture([&] { run(b); });
    } else {
      run(b);
    }
    msg.put(b.data()), msg.put(notes);
  }
  if (ex_.size() > 1) ex_.broadcast(msg.data(), owner);
  std::vector<char> result, notes;
  msg.get(result), msg.get(notes);
  Bytes r(std::move(result));
  take(r);
  if (!r.consumed()) throw std::logic_error("task graph: " + what + ": result bytes left unread");
  if (hooks_.journal) hooks_.journal->replay({&notes});
}

}  // namespace latentllm::graph

// A layer's decompositions as a typed task graph, and the runtime that runs it on the ranks of a run.
//
// The compressor's stages declare, per site of a layer, tasks (a name, a modelled cost, a function of the
// typed results of the tasks it depends on, returning a typed result) and effects (functions that run on
// every rank, in declaration order, at the site's end or at the layer's end). The runtime decides
// everything about distribution, in one place:
//   - rounds: a task runs in the round after its dependencies; a task without dependencies runs in the
//     round its dependents allow where the site's chains cost most (there the other ranks idle longest);
//   - owners: each round's tasks get owner slots by modelled cost (dist::owners_by_cost over the slots):
//     a slot is a (rank, thread) pair, and a rank runs its slots' tasks at once on the threads of its
//     pool (core::parallel_for), each task single-threaded inside (a parallel_for it calls runs inline);
//   - results: the owner serializes its result (bytes.hpp, one Codec per type), every rank reads it back
//     in task order, with what the task recorded beside it (a Journal: the numerical notes), replayed in
//     a fixed order: a site task's with its group (stage) at the site's end, a finishing task's with the
//     layer-end effect that reads it;
//   - finishing work (tasks marked finishing: a fit's junction form and output error, nothing later
//     decompositions read) fills the time a round leaves a slot idle (first right after the task it
//     reads, on that task's slot; then pending ones on the least loaded slot), and the rest runs at the
//     layer's end, costliest first, at once on the slots;
//   - timing: every task's seconds and owner, and every group's seconds of declaration and effects.
// Where or when a task runs changes no bit of any result: every rank installs the same bytes for any
// number of ranks and threads. With one rank the same graph runs in process, each task once, in round
// order, a round's tasks on the process's threads.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "graph/bytes.hpp"

namespace latentllm::graph {

// The ranks a graph runs on and how one rank's bytes reach the others.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // root's bytes to every rank (resized on the others); every rank calls it in the same order.
  virtual void broadcast(std::vector<char>& bytes, int root) = 0;
  // Every rank waits for the others.
  virtual void barrier() = 0;
  // The threads of this rank a round's tasks may run on at once (slots per rank; the graph takes rank
  // 0's count on every rank, so that every rank places the same).
  virtual int threads() const { return 1; }
  // root's value to every rank, through its Codec.
  template <typename T>
  void broadcast_value(T& v, int root) {
    if (size() == 1) return;
    Bytes b;
    if (rank() == root) b.put(v);
    broadcast(b.data(), root);
    if (rank() != root) b.get(v);
  }
  // The owner of each of n independent pieces of work of these modelled costs: in order, each to the
  // least loaded rank so far (the lowest of equal ones); the same on every rank.
  std::vector<int> owners_by_cost(const std::vector<double>& costs) const;
};
// The run's processes (MPI ranks; one without MPI), each with its --threads.
Exchange& processes();
// This process alone (one rank, its --threads), whatever the run's size: a graph that is not distributed.
Exchange& this_process();
// What a rank that the launcher stops (another rank failed or was killed) tells the user.
void set_stop_advice(const std::string& advice);

// What a task records beside its result (the numerical notes): captured on the task's owner, replayed on
// every rank.
class Journal {
 public:
  virtual ~Journal() = default;
  // Runs `work`, returning what it recorded (and recording it nowhere else).
  virtual std::vector<char> capture(const std::function<void()>& work) = 0;
  // Replays `recorded` in order into the record open on this thread (a capture's, or the run's).
  virtual void replay(const std::vector<const std::vector<char>*>& recorded) = 0;
  // Replays `recorded` in order, then runs `then`, both into the run's own record.
  virtual void record(const std::vector<const std::vector<char>*>& recorded, const std::function<void()>& then) = 0;
};

struct Spec {
  std::string what;  // the module(s) and part ("...q_proj, k_proj: start U_q")
  double cost = 0;   // modelled, in any unit common to the graph (owners are chosen by it)
};

// A task's seconds where it ran (task non-empty), or a group's own seconds on this rank (declaring,
// effects; task empty, owner = this rank).
struct Timing {
  int layer = 0;
  std::string group, task;
  int owner = 0;   // the rank
  int thread = 0;  // the owner slot's thread on that rank (0 for a group's own work)
  double seconds = 0;
  std::string after;  // finishing work run right after another task on its owner: that task
};

struct Hooks {
  Journal* journal = nullptr;
  // Around this rank's work for a group (begin = true, then false), on the calling thread, never nested:
  // progress and ETA. Tasks of several groups that run at once are one part, their groups joined by '+'.
  std::function<void(std::string_view group, bool begin)> observe;
  // Every task on every rank in a fixed order, every group's own work on each rank.
  std::function<void(const Timing&)> timed;
};

class Graph;

// A task's typed result: every rank holds it once its task's round (or the layer's end) has passed.
template <typename T>
class Value {
 public:
  Value() = default;
  const T& get() const {
    if (!slot_ || !slot_->has_value()) throw std::logic_error("task graph: a result read before its task ran");
    return **slot_;
  }
  bool ready() const { return slot_ && slot_->has_value(); }

 private:
  friend class Graph;
  Value(std::shared_ptr<std::optional<T>> slot, int task) : slot_(std::move(slot)), task_(task) {}
  std::shared_ptr<std::optional<T>> slot_;
  int task_ = -1;
};

class Graph {
 public:
  explicit Graph(Exchange& ex, Hooks hooks = {});
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  Exchange& exchange() const { return ex_; }
  // The layer the following declarations belong to (timing rows).
  void set_layer(int layer) { layer_ = layer; }

  // Runs `build(*this)` on every rank as group `group` (a stage): the tasks and effects it declares are
  // the group's, what it records is replayed with the group's at the site's end.
  void declare(std::string group, const std::function<void(Graph&)>& build);

  // A decomposition: fn(the dependencies' results...) on one owner rank, its result on every rank.
  template <typename F, typename... D>
  auto task(Spec spec, F fn, const Value<D>&... deps) {
    return add_task<F, D...>(std::move(spec), false, std::move(fn), deps...);
  }
  // Finishing work: a task that may run in a later round's idle time or at the layer's end.
  template <typename F, typename... D>
  auto finishing(Spec spec, F fn, const Value<D>&... deps) {
    return add_task<F, D...>(std::move(spec), true, std::move(fn), deps...);
  }
  // fn(the dependencies' results...) on every rank, in declaration order, after the site's tasks (with
  // its group, after the group's notes) or at the layer's end (after its finishing dependencies' notes).
  template <typename F, typename... D>
  void at_site_end(F fn, const Value<D>&... deps) {
    add_effect(false, bind(std::move(fn), deps...), {deps.task_...});
  }
  template <typename F, typename... D>
  void at_layer_end(F fn, const Value<D>&... deps) {
    add_effect(true, bind(std::move(fn), deps...), {deps.task_...});
  }

  // One task at once on `owner` (a solve between the collective passes of a declaration): its result on
  // every rank, what it recorded replayed at once into the current record. Every rank calls it.
  template <typename F>
  auto on(int owner, const std::string& what, F fn) {
    using R = std::decay_t<std::invoke_result_t<F&>>;
    R out{};
    run_now(owner, what, [&](Bytes& b) { b.put(fn()); }, [&](Bytes& b) { b.get(out); });
    return out;
  }

  // Runs the site's tasks (rounds, owners, results, finishing work in idle time), then every group's
  // notes and site-end effects in order.
  void run_site();
  // Runs the finishing tasks left, then the layer-end effects in order; the graph is empty after it.
  void end_layer();

  // The tasks and effects declared and not yet run (none after end_layer).
  std::size_t pending() const;

  // The round and owner each task of the last run_site took (task order), for tests and timing.
  struct Placed {
    std::string what;
    int round = 0, owner = 0;
    bool finishing = false;  // a finishing task run in that round's idle time
    int thread = 0;          // the owner slot's thread on its rank
  };
  const std::vector<Placed>& placement() const { return placed_; }
  // The most tasks this rank ran at the same moment since the graph was made (measured, not placed:
  // a worker that is not scheduled in time leaves its slot's tasks to another thread).
  int most_at_once() const { return most_at_once_.load(); }

 private:
  struct Node;
  struct Effect;
  struct Decl;

  template <typename F, typename... D>
  static std::function<void()> bind(F fn, const Value<D>&... deps) {
    return [fn = std::move(fn), slots = std::make_tuple(deps.slot_...)]() mutable {
      std::apply([&](const auto&... s) { fn(check(s)...); }, slots);
    };
  }
  template <typename T>
  static const T& check(const std::shared_ptr<std::optional<T>>& s) {
    if (!s || !s->has_value()) throw std::logic_error("task graph: a result read before its task ran");
    return **s;
  }

  template <typename F, typename... D>
  auto add_task(Spec spec, bool finishing, F fn, const Value<D>&... deps) {
    using R = std::decay_t<std::invoke_result_t<F&, const D&...>>;
    auto slot = std::make_shared<std::optional<R>>();
    auto run = [fn = std::move(fn), slots = std::make_tuple(deps.slot_...)](Bytes& b) mutable {
      std::apply([&](const auto&... s) { b.put(R(fn(check(s)...))); }, slots);
    };
    auto take = [slot](Bytes& b) {
      R r{};
      b.get(r);
      *slot = std::move(r);
    };
    const int id = add_node(std::move(spec), finishing, std::move(run), std::move(take), {deps.task_...});
    return Value<R>(std::move(slot), id);
  }

  int add_node(Spec spec, bool finishing, std::function<void(Bytes&)> run, std::function<void(Bytes&)> take,
               std::vector<int> deps);
  void add_effect(bool layer_end, std::function<void()> fn, std::vector<int> deps);
  void run_now(int owner, const std::string& what, const std::function<void(Bytes&)>& run,
               const std::function<void(Bytes&)>& take);

  std::vector<std::vector<int>> rounds_of(const std::vector<int>& site) const;
  int agree_slots();  // every rank calls it: rank 0's threads × the ranks
  void run_round(const std::vector<int>& jobs, int round);
  void run_tasks(const std::vector<int>& ids, const std::vector<int>& slots);
  void run_task(Node& n);
  void run_at_once(const std::vector<int>& ids, const std::vector<std::vector<std::size_t>>& by_thread);
  void take(Node& n);
  void exchange_results(const std::vector<int>& ids, const std::vector<int>& slots);
  void record(const std::vector<const std::vector<char>*>& notes, const std::function<void()>& then);
  void observe(const std::string& group, bool begin) const;
  void time(const std::string& group, const std::string& task, int owner, int thread, double seconds,
            const std::string& after = {}) const;

  Exchange& ex_;
  Hooks hooks_;
  int layer_ = 0;
  std::vector<std::unique_ptr<Node>> nodes_;  // the layer's tasks, in declaration order
  std::vector<Effect> effects_;               // the layer's effects, in declaration order
  std::vector<Decl> decls_;                   // the site's declarations, in order
  int current_ = -1;                          // the declaration being made
  int threads_ = 1;                           // slots per rank of the round being run (rank 0's threads)
  std::vector<Placed> placed_;
  std::atomic<int> at_once_{0}, most_at_once_{0};  // tasks running on this rank now, and the most so far
};

}  // namespace latentllm::graph

// The task-graph runtime (src/graph) on its own: rounds, owners, results and their codecs, finishing work
// in idle time, the order records are replayed in, and a failing task, on one rank and on K ranks
// simulated by threads of one process (a shared-memory Exchange), with one or more thread slots per
// rank, which must all end with the same results and the same record.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/parallel.hpp"
#include "graph/bytes.hpp"
#include "graph/graph.hpp"
#include "latentllm/threads.hpp"

namespace latentllm::graph {
namespace {

// K ranks as threads: a broadcast is a rendezvous of all of them, which an abort releases.
class Ranks {
 public:
  explicit Ranks(int k) : k_(k) {}
  int size() const { return k_; }
  void barrier() {
    std::unique_lock<std::mutex> lock(m_);
    const long gen = gen_;
    if (++arrived_ == k_) {
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen_ != gen || aborted_; });
    }
    if (aborted_) throw std::runtime_error("another rank failed");
  }
  void post(const std::vector<char>& b) {
    std::lock_guard<std::mutex> lock(m_);
    buf_ = b;
  }
  std::vector<char> read() {
    std::lock_guard<std::mutex> lock(m_);
    return buf_;
  }
  void abort() {
    std::lock_guard<std::mutex> lock(m_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  int k_;
  std::mutex m_;
  std::condition_variable cv_;
  int arrived_ = 0;
  long gen_ = 0;
  bool aborted_ = false;
  std::vector<char> buf_;
};

class Simulated final : public Exchange {
 public:
  Simulated(Ranks& ranks, int rank, int threads = 1) : ranks_(ranks), rank_(rank), threads_(threads) {}
  int size() const override { return ranks_.size(); }
  int rank() const override { return rank_; }
  int threads() const override { return threads_; }
  void broadcast(std::vector<char>& bytes, int root) override {
    ++broadcasts;
    if (rank_ == root) ranks_.post(bytes);
    ranks_.barrier();
    if (rank_ != root) bytes = ranks_.read();
    ranks_.barrier();
  }
  void barrier() override { ranks_.barrier(); }
  int broadcasts = 0;

 private:
  Ranks& ranks_;
  int rank_;
  int threads_;
};

// The pool at `n` threads for a scope (the graph's thread slots of this_process()), then as before.
class PoolThreads {
 public:
  explicit PoolThreads(int n) : saved_(core::num_threads()) { core::set_num_threads(n); }
  ~PoolThreads() { core::set_num_threads(saved_); }
  PoolThreads(const PoolThreads&) = delete;
  PoolThreads& operator=(const PoolThreads&) = delete;

 private:
  int saved_;
};

// What tasks record: strings, into the innermost capture on this thread, else into the run's record.
thread_local std::vector<std::string>* g_sink = nullptr;
void note(const std::string& s) {
  if (g_sink != nullptr) g_sink->push_back(s);
}

class Record final : public Journal {
 public:
  std::vector<char> capture(const std::function<void()>& work) override {
    std::vector<std::string> held;
    std::vector<std::string>* outer = g_sink;
    g_sink = &held;
    work();
    g_sink = outer;
    Bytes b;
    b.put(held);
    return std::move(b.data());
  }
  void replay(const std::vector<const std::vector<char>*>& recorded) override {
    for (const std::vector<char>* r : recorded) {
      if (r->empty()) continue;
      Bytes b(*r);
      for (const std::string& s : b.get<std::vector<std::string>>()) note(s);
    }
  }
  void record(const std::vector<const std::vector<char>*>& recorded, const std::function<void()>& then) override {
    std::vector<std::string>* outer = g_sink;
    g_sink = &run;
    replay(recorded);
    if (then) then();
    g_sink = outer;
  }
  std::vector<std::string> run;  // the run's record, in order
};

struct Pair {
  std::string name;
  std::vector<double> values;
  template <class S>
  static auto fields(S& s) { return std::tie(s.name, s.values); }
};

// What one rank ends with: the effects' outputs in order, the run's record, the placement, the timing.
struct Outcome {
  std::vector<std::string> effects;
  std::vector<std::string> record;
  std::vector<Graph::Placed> placed;
  std::vector<Timing> timed;
};

// A layer of two sites: at the first, a chain (a → b) beside a free task c and finishing work f(b);
// at the second, two tasks; every result through a codec, every task recording a note.
Outcome one_layer(Exchange& ex) {
  Record rec;
  Outcome out;
  Hooks hooks{&rec, {}, [&](const Timing& t) { out.timed.push_back(t); }};
  Graph g(ex, hooks);
  g.set_layer(3);
  g.declare("joint", [&](Graph& d) {
    note("declared joint");
    const auto a = d.task({"a", 2.0}, [] {
      note("ran a");
      return Eigen::MatrixXd(Eigen::MatrixXd::Constant(2, 3, 1.5));
    });
    const auto b = d.task({"b", 8.0}, [](const Eigen::MatrixXd& m) {
      note("ran b");
      return Pair{"b", {m.sum(), 2.0}};
    }, a);
    const auto c = d.task({"c", 3.0}, [] {
      note("ran c");
      return std::string("c");
    });
    const auto f = d.finishing({"f", 1.0}, [](const Pair& p) {
      note("ran f");
      return p.values[0] * 2;
    }, b);
    d.at_site_end([&](const Pair& p, const std::string& s) { out.effects.push_back(p.name + s); }, b, c);
    d.at_layer_end([&](const double& v) { out.effects.push_back("f=" + std::to_string(v)); }, f);
  });
  g.declare("local", [&](Graph& d) {
    const auto e = d.task({"e", 5.0}, [] {
      note("ran e");
      return 7;
    });
    const auto h = d.finishing({"h", 4.0}, [](const int& v) {
      note("ran h");
      return v + 1;
    }, e);
    d.at_site_end([&](const int& v) { out.effects.push_back("e=" + std::to_string(v)); }, e);
    d.at_layer_end([&](const int& v) { out.effects.push_back("h=" + std::to_string(v)); }, h);
  });
  g.run_site();
  out.placed = g.placement();
  g.declare("second", [&](Graph& d) {
    const auto x = d.task({"x", 1.0}, [] { return std::vector<int>{1, 2, 3}; });
    const auto y = d.task({"y", 1.0}, [] { return std::vector<int>{4}; });
    d.at_site_end([&](const std::vector<int>& a, const std::vector<int>& b) {
      out.effects.push_back("xy=" + std::to_string(a.size() + b.size()));
    }, x, y);
  });
  g.run_site();
  g.end_layer();
  EXPECT_EQ(g.pending(), 0u);
  out.record = rec.run;
  return out;
}

std::vector<Outcome> on_ranks(int k, const std::function<Outcome(Exchange&)>& body, int slots_per_rank = 1) {
  Ranks ranks(k);
  std::vector<Outcome> outs(static_cast<std::size_t>(k));
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r) {
    threads.emplace_back([&, r] {
      Simulated ex(ranks, r, slots_per_rank);
      outs[static_cast<std::size_t>(r)] = body(ex);
    });
  }
  for (auto& t : threads) t.join();
  return outs;
}

TEST(Graph, OneRankRunsEveryTaskInRoundsAndReplaysInDeclarationOrder) {
  const Outcome o = one_layer(this_process());
  const std::vector<std::string> effects{"bc", "e=7", "xy=4", "f=18.000000", "h=8"};
  EXPECT_EQ(o.effects, effects);
  // Site notes by declaration (its own, then its tasks'), finishing work's with the effect that reads it.
  const std::vector<std::string> record{"declared joint", "ran a", "ran b", "ran c", "ran e", "ran f", "ran h"};
  EXPECT_EQ(o.record, record);
  // a in round 0, b after it in round 1; c and e have no dependents: they join the costlier round (b's).
  ASSERT_EQ(o.placed.size(), 4u);
  for (const auto& p : o.placed) EXPECT_EQ(p.round, p.what == "a" ? 0 : 1) << p.what;
}

TEST(Graph, EveryRankCountGivesTheSameResultsAndRecord) {
  const Outcome one = one_layer(this_process());
  for (int k : {2, 3}) {
    const std::vector<Outcome> outs = on_ranks(k, one_layer);
    for (int r = 0; r < k; ++r) {
      EXPECT_EQ(outs[static_cast<std::size_t>(r)].effects, one.effects) << k << " ranks, rank " << r;
      EXPECT_EQ(outs[static_cast<std::size_t>(r)].record, one.record) << k << " ranks, rank " << r;
    }
  }
}

TEST(Graph, OwnersByCostAndFinishingWorkInIdleTime) {
  const std::vector<Outcome> outs = on_ranks(2, one_layer);
  // Round 1 holds b (8), c (3) and e (5): b on rank 0, c and e on rank 1 (load 8 each). Rank 1 is full,
  // so f (1, reads b) runs right after b on rank 0 only if 8 + 1 ≤ 8: it does not, and h (reads e) neither;
  // both run at the layer's end, costliest first (h on rank 0, f on rank 1).
  std::map<std::string, int> owner;
  for (const auto& p : outs[0].placed) owner[p.what] = p.owner;
  EXPECT_EQ(owner.at("b"), 0);
  EXPECT_EQ(owner.at("c"), 1);
  EXPECT_EQ(owner.at("e"), 1);
  std::map<std::string, int> timed_owner;
  for (const auto& t : outs[1].timed)
    if (!t.task.empty()) timed_owner[t.task] = t.owner;
  EXPECT_EQ(timed_owner.at("h"), 0);
  EXPECT_EQ(timed_owner.at("f"), 1);
  // Every rank receives the same timing rows in the same order.
  ASSERT_EQ(outs[0].timed.size(), outs[1].timed.size());
  std::vector<std::string> tasks0, tasks1;
  for (const auto& t : outs[0].timed)
    if (!t.task.empty()) tasks0.push_back(t.task);
  for (const auto& t : outs[1].timed)
    if (!t.task.empty()) tasks1.push_back(t.task);
  EXPECT_EQ(tasks0, tasks1);
}

// A round that leaves a rank idle: a's finishing work runs right after a on its owner, and pending
// finishing work from the first site fills the idle rank of the second.
Outcome idle_rounds(Exchange& ex) {
  Record rec;
  Outcome out;
  Graph g(ex, {&rec, {}, [&](const Timing& t) { out.timed.push_back(t); }});
  g.declare("s", [&](Graph& d) {
    const auto a = d.task({"a", 10.0}, [] { return 1; });
    const auto b = d.task({"b", 2.0}, [] { return 2; });
    const auto fa = d.finishing({"fa", 3.0}, [](const int& v) { return v * 10; }, a);
    const auto fb = d.finishing({"fb", 9.0}, [](const int& v) { return v * 10; }, b);
    d.at_layer_end([&](const int& x, const int& y) { out.effects.push_back(std::to_string(x + y)); }, fa, fb);
  });
  g.run_site();
  g.declare("t", [&](Graph& d) {
    const auto c = d.task({"c", 9.0}, [] { return 3; });
    const auto e = d.task({"e", 9.0}, [] { return 4; });
    d.at_site_end([&](const int& x, const int& y) { out.effects.push_back(std::to_string(x * y)); }, c, e);
  });
  g.run_site();
  out.placed = g.placement();
  g.end_layer();
  return out;
}

TEST(Graph, FinishingWorkRightAfterItsInputAndInLaterRounds) {
  const std::vector<Outcome> outs = on_ranks(2, idle_rounds);
  const std::vector<std::string> want{"12", "30"};
  for (const auto& o : outs) EXPECT_EQ(o.effects, want);
  // Site s: a (10) on rank 0, b (2) on rank 1; fa (3) reads a, whose owner is the busiest; fb (9) reads
  // b: 2 + 9 > 10. Site t: c and e (9 each) on ranks 0 and 1 leave no room. Both run at the layer's end.
  std::map<std::string, std::string> after;
  for (const auto& t : outs[0].timed)
    if (!t.task.empty()) after[t.task] = t.after;
  EXPECT_EQ(after.at("fa"), "");
  // Now a site whose round leaves room right after a task: b's finishing work of cost ≤ the slack.
  auto small = [](Exchange& ex) {
    Outcome out;
    Graph g(ex, {nullptr, {}, [&](const Timing& t) { out.timed.push_back(t); }});
    g.declare("s", [&](Graph& d) {
      const auto a = d.task({"a", 10.0}, [] { return 1; });
      const auto b = d.task({"b", 2.0}, [] { return 2; });
      const auto fb = d.finishing({"fb", 5.0}, [](const int& v) { return v * 10; }, b);
      d.at_layer_end([&](const int& y) { out.effects.push_back(std::to_string(y)); }, fb);
      d.at_site_end([&](const int& x) { out.effects.push_back(std::to_string(x)); }, a);
    });
    g.run_site();
    out.placed = g.placement();
    g.end_layer();
    return out;
  };
  for (const Outcome& o : on_ranks(2, small)) {
    EXPECT_EQ(o.effects, (std::vector<std::string>{"1", "20"}));
    bool found = false;
    for (const auto& t : o.timed) {
      if (t.task != "fb") continue;
      found = true;
      EXPECT_EQ(t.after, "b");
      EXPECT_EQ(t.owner, 1);
    }
    EXPECT_TRUE(found);
  }
  // With one rank of one thread nothing is attached: the same results.
  const PoolThreads one_thread(1);
  const Outcome one = small(this_process());
  EXPECT_EQ(one.effects, (std::vector<std::string>{"1", "20"}));
  for (const auto& t : one.timed) EXPECT_EQ(t.after, "");
}

TEST(Graph, PendingFinishingWorkFillsAnIdleRank) {
  auto body = [](Exchange& ex) {
    Outcome out;
    Graph g(ex, {nullptr, {}, [&](const Timing& t) { out.timed.push_back(t); }});
    g.declare("s", [&](Graph& d) {
      const auto a = d.task({"a", 1.0}, [] { return 1; });
      const auto fa = d.finishing({"fa", 4.0}, [](const int& v) { return v + 100; }, a);
      d.at_layer_end([&](const int& y) { out.effects.push_back(std::to_string(y)); }, fa);
    });
    g.run_site();
    g.declare("t", [&](Graph& d) {
      const auto c = d.task({"c", 9.0}, [] { return 3; });
      d.at_site_end([&](const int& x) { out.effects.push_back(std::to_string(x)); }, c);
    });
    g.run_site();
    out.placed = g.placement();
    g.end_layer();
    return out;
  };
  for (const Outcome& o : on_ranks(2, body)) {
    EXPECT_EQ(o.effects, (std::vector<std::string>{"3", "101"}));
    // In site t, c (9) on rank 0 leaves rank 1 idle: fa (4) runs there, in c's round.
    bool filled = false;
    for (const auto& p : o.placed)
      if (p.what == "fa") filled = p.finishing && p.owner == 1 && p.round == 0;
    EXPECT_TRUE(filled);
  }
}

TEST(Graph, AFailingTaskFailsItsOwnerAndReleasesTheOthers) {
  auto body = [](Exchange& ex) {
    Graph g(ex);
    g.declare("s", [&](Graph& d) {
      const auto a = d.task({"a", 1.0}, []() -> int { throw std::runtime_error("model.layers.0.q_proj: singular"); });
      d.at_site_end([](const int&) {}, a);
    });
    g.run_site();
    return Outcome{};
  };
  EXPECT_THROW(
      {
        try {
          body(this_process());
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "model.layers.0.q_proj: singular");
          throw;
        }
      },
      std::runtime_error);
  Ranks ranks(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Simulated ex(ranks, r);
      try {
        body(ex);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
        ranks.abort();  // as the run's error handling aborts every rank
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "model.layers.0.q_proj: singular");  // a's owner
  EXPECT_EQ(errors[1], "another rank failed");
}

// Two tasks of one round that each wait until both run: they finish only if the round's thread slots
// run them at once (a timeout, not a hang, when they do not).
Outcome meeting(Exchange& ex) {
  Outcome out;
  Graph g(ex, {nullptr, {}, [&](const Timing& t) { out.timed.push_back(t); }});
  auto arrived = std::make_shared<std::atomic<int>>(0);
  auto meet = [arrived] {
    arrived->fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (arrived->load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    return arrived->load() >= 2 && core::in_parallel_region();
  };
  g.declare("s", [&](Graph& d) {
    const auto a = d.task({"a", 1.0}, meet);
    const auto b = d.task({"b", 1.0}, meet);
    d.at_site_end([&](const bool& x, const bool& y) { out.effects.push_back(x && y ? "met" : "alone"); }, a, b);
  });
  g.run_site();
  out.placed = g.placement();
  g.end_layer();
  out.record.push_back(std::to_string(g.most_at_once()));
  return out;
}

TEST(GraphThreads, ARoundsTasksRunAtOnceOnTheThreadSlots) {
  const PoolThreads two(2);
  const Outcome o = meeting(this_process());
  EXPECT_EQ(o.effects, (std::vector<std::string>{"met"}));
  EXPECT_EQ(o.record, (std::vector<std::string>{"2"}));  // most_at_once
  ASSERT_EQ(o.placed.size(), 2u);
  EXPECT_EQ(o.placed[0].thread, 0);
  EXPECT_EQ(o.placed[1].thread, 1);
  for (const auto& p : o.placed) EXPECT_EQ(p.owner, 0);
  for (const auto& t : o.timed) {
    if (!t.task.empty()) {
      EXPECT_EQ(t.thread, t.task == "a" ? 0 : 1);
    }
  }
}

TEST(GraphThreads, EveryThreadAndRankCountGivesTheSameResultsAndRecord) {
  Outcome one;
  {
    const PoolThreads single(1);
    one = one_layer(this_process());
  }
  for (int threads : {2, 3}) {
    const PoolThreads pool(threads);
    const Outcome o = one_layer(this_process());
    EXPECT_EQ(o.effects, one.effects) << threads << " threads";
    EXPECT_EQ(o.record, one.record) << threads << " threads";
    // (rank, thread) slots: 2 ranks of `threads` slots each, the rank threads sharing this pool.
    for (const Outcome& r : on_ranks(2, one_layer, threads)) {
      EXPECT_EQ(r.effects, one.effects) << "2 ranks x " << threads << " threads";
      EXPECT_EQ(r.record, one.record) << "2 ranks x " << threads << " threads";
    }
  }
}

TEST(GraphThreads, SlotsAreRanksFirstThenThreads) {
  // Round 1 of one_layer holds b (8), c (3) and e (5): over 2 ranks × 2 threads, slots 0..3 are (rank 0,
  // thread 0), (1, 0), (0, 1), (1, 1); b, c and e take slots 0, 1 and 2.
  const std::vector<Outcome> outs = on_ranks(2, one_layer, 2);
  std::map<std::string, std::pair<int, int>> at;
  for (const auto& p : outs[0].placed)
    if (!p.finishing) at[p.what] = {p.owner, p.thread};
  EXPECT_EQ(at.at("b"), std::make_pair(0, 0));
  EXPECT_EQ(at.at("c"), std::make_pair(1, 0));
  EXPECT_EQ(at.at("e"), std::make_pair(0, 1));
  // Both ranks see the same placement.
  ASSERT_EQ(outs[0].placed.size(), outs[1].placed.size());
  for (std::size_t i = 0; i < outs[0].placed.size(); ++i) {
    EXPECT_EQ(outs[0].placed[i].owner, outs[1].placed[i].owner);
    EXPECT_EQ(outs[0].placed[i].thread, outs[1].placed[i].thread);
  }
}

TEST(GraphThreads, FinishingWorkFillsAnIdleThread) {
  const PoolThreads two(2);
  Outcome out;
  Graph g(this_process(), {nullptr, {}, [&](const Timing& t) { out.timed.push_back(t); }});
  g.declare("s", [&](Graph& d) {
    const auto a = d.task({"a", 10.0}, [] { return 1; });
    const auto b = d.task({"b", 2.0}, [] { return 2; });
    const auto fb = d.finishing({"fb", 5.0}, [](const int& v) { return v * 10; }, b);
    d.at_layer_end([&](const int& y) { out.effects.push_back(std::to_string(y)); }, fb);
    d.at_site_end([&](const int& x) { out.effects.push_back(std::to_string(x)); }, a);
  });
  g.run_site();
  g.end_layer();
  EXPECT_EQ(out.effects, (std::vector<std::string>{"1", "20"}));
  bool found = false;
  for (const auto& t : out.timed) {
    if (t.task != "fb") continue;
    found = true;
    EXPECT_EQ(t.after, "b");  // right after b, on b's thread
    EXPECT_EQ(t.owner, 0);
    EXPECT_EQ(t.thread, 1);
  }
  EXPECT_TRUE(found);
}

TEST(GraphThreads, ATasksOwnLoopsRunInlineWithTheSameChunks) {
  // A task's parallel_for runs on the task's thread, in the same fixed chunks: the sums are the same bits.
  auto body = [](Exchange& ex) {
    Outcome out;
    Graph g(ex);
    g.declare("s", [&](Graph& d) {
      std::vector<Value<double>> sums;
      for (int t = 0; t < 4; ++t) {
        sums.push_back(d.task({"sum " + std::to_string(t), 1.0}, [t] {
          std::vector<double> part(16, 0.0);
          core::parallel_for(16, 1, [&](std::int64_t c0, std::int64_t c1) {
            for (std::int64_t c = c0; c < c1; ++c)
              for (int i = 0; i < 1000; ++i) part[static_cast<std::size_t>(c)] += 1.0 / (1.0 + t + c * 1000.0 + i);
          });
          double s = 0;
          for (const double p : part) s += p;  // in chunk order
          return s;
        }));
      }
      for (const auto& v : sums)
        d.at_site_end([&](const double& x) { out.effects.push_back(fmt::format("{:a}", x)); }, v);
    });
    g.run_site();
    g.end_layer();
    return out;
  };
  Outcome one;
  {
    const PoolThreads single(1);
    one = body(this_process());
  }
  for (int threads : {2, 3}) {
    const PoolThreads pool(threads);
    EXPECT_EQ(body(this_process()).effects, one.effects) << threads << " threads";
  }
}

TEST(GraphThreads, TheFirstFailureInTaskOrderIsRethrown) {
  // b fails at once, a fails later: one thread meets a's failure first, and so must two.
  auto body = [](Exchange& ex) {
    Graph g(ex);
    g.declare("s", [&](Graph& d) {
      const auto a = d.task({"a", 2.0}, []() -> int {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        throw std::runtime_error("a failed");
      });
      const auto b = d.task({"b", 1.0}, []() -> int { throw std::runtime_error("b failed"); });
      d.at_site_end([](const int&, const int&) {}, a, b);
    });
    g.run_site();
  };
  for (int threads : {1, 2}) {
    const PoolThreads pool(threads);
    try {
      body(this_process());
      ADD_FAILURE() << "no failure";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "a failed") << threads << " threads";
    }
  }
}

TEST(Graph, OnRunsOneTaskAtOnceOnItsOwner) {
  auto body = [](Exchange& ex) {
    Record rec;
    Outcome out;
    Graph g(ex, {&rec, {}, {}});
    g.declare("s", [&](Graph& d) {
      const auto v = d.on(1 % ex.size(), "solve", [&] {
        note("solved on " + std::to_string(ex.rank()));
        return std::pair<std::vector<double>, int>{{1.0, 2.0}, ex.rank()};
      });
      out.effects.push_back(std::to_string(v.first.size()) + "@" + std::to_string(v.second));
    });
    g.run_site();
    g.end_layer();
    out.record = rec.run;
    return out;
  };
  for (const Outcome& o : on_ranks(2, body)) {
    EXPECT_EQ(o.effects, (std::vector<std::string>{"2@1"}));
    EXPECT_EQ(o.record, (std::vector<std::string>{"solved on 1"}));  // replayed where it was declared
  }
}

TEST(Graph, MisuseIsALogicError) {
  Graph g(this_process());
  auto outside = [&] { (void)g.task({"x", 1.0}, [] { return 1; }); };
  EXPECT_THROW(outside(), std::logic_error);  // a task outside declare
  Value<int> never;
  EXPECT_THROW((void)never.get(), std::logic_error);
}

TEST(GraphBytes, CodecsRoundTripAndDetectShortInput) {
  Bytes b;
  const Pair p{"name", {1.0, -2.5}};
  const std::tuple<int, std::string, Eigen::MatrixXf> t{7, "s", Eigen::MatrixXf::Constant(2, 2, 0.5f)};
  b.put(p), b.put(t);
  Bytes r(b.data());
  const Pair q = r.get<Pair>();
  const auto u = r.get<std::tuple<int, std::string, Eigen::MatrixXf>>();
  EXPECT_EQ(q.name, p.name);
  EXPECT_EQ(q.values, p.values);
  EXPECT_EQ(std::get<0>(u), 7);
  EXPECT_EQ(std::get<1>(u), "s");
  EXPECT_EQ(std::get<2>(u), std::get<2>(t));
  EXPECT_TRUE(r.consumed());
  std::vector<char> cut = b.data();
  cut.resize(cut.size() - 1);
  Bytes s(cut);
  (void)s.get<Pair>();
  using Tuple = std::tuple<int, std::string, Eigen::MatrixXf>;
  EXPECT_THROW((void)s.get<Tuple>(), std::exception);
}

}  // namespace
}  // namespace latentllm::graph

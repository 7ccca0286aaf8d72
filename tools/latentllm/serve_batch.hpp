// Continuous batching for `latentllm serve`: one scheduler thread runs the model for every generation
// request. A request waits in a queue until its KV cache fits the budget (its prompt + max_tokens
// positions at the cache's bytes per position) and the batch has room (--max-batch); it is then
// prefilled alone and joins the decoding steps, where every running request advances one token per
// step through Model::forward_batch (each weight read once per step for the whole batch). A request
// that finishes (max_tokens, EOS, a stop string) or whose client has gone leaves the batch at once and
// frees its reservation. Each request's tokens are those `generate` gives it alone: the batched step is
// row-independent (core::RowwiseProducts) and sampling is per request (its own seed).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "latentllm/generate.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::cli {

struct BatchLimits {
  int max_batch = 8;                  // requests decoding at once (--max-batch)
  std::int64_t kv_bytes = 0;          // the KV caches' budget: --max-memory less the weights and the runtime
  std::int64_t bytes_per_token = 0;   // one position of a request's cache (model::KvCache::bytes_per_token)
  model::KvCacheMode kv_cache = model::KvCacheMode::Auto;
};

class Batcher {
 public:
  struct Request {
    std::vector<std::int32_t> ids;  // the prompt
    eval::GenerateOptions g;        // max_new_tokens >= 1, sampling
    eval::PrefillFn prefill;        // LLaVA: the prompt's forward with its images; empty: forward_cached
    std::vector<std::string> stops;  // generation ends once the text holds one of them
  };
  struct Result {
    std::vector<std::int32_t> tokens;  // generated ids, the EOS that stopped it included
    std::string text;                  // the continuation, whole (stop strings not cut)
    bool stopped_at_eos = false;
  };

  // `compute` is held while the model runs (a step, a prefill), so that other users of the model (the
  // echo / logprobs forward) run between steps, never beside one.
  Batcher(const model::Model& m, const io::Tokenizer& tok, BatchLimits limits, std::mutex& compute);
  ~Batcher();  // finishes the requests in flight, then stops the thread
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Positions a request's cache holds (as generate allocates it) and its bytes.
  static int positions(std::size_t prompt, int max_new_tokens) {
    return static_cast<int>(prompt) + std::max(max_new_tokens - 1, 0);
  }
  std::int64_t bytes(int positions) const { return static_cast<std::int64_t>(positions) * limits_.bytes_per_token; }
  const BatchLimits& limits() const { return limits_; }
  // Requests of `positions` positions that fit the budget at once (at most max_batch).
  std::int64_t slots(int positions) const;

  // Runs r to its end on the scheduler thread (queued until it fits); on_piece receives each piece of
  // the continuation on the calling thread as it is final, and returning false (the client has gone)
  // ends the request at the next step.
  // Rethrows the model's error for this request.
  Result run(Request r, const std::function<bool(std::string_view)>& on_piece);

  // For /health: requests decoding and queued now, the most at once since the start, and the requests
  // that ended early because their client had gone.
  struct Counts {
    int running = 0, queued = 0, peak_running = 0, peak_queued = 0;
    std::int64_t abandoned = 0;
  };
  Counts counts() const;

 private:
  struct Job;
  void loop();
  void admit_and_prefill(const std::vector<std::shared_ptr<Job>>& admitted);
  void decode_step();
  void take(Job& j, const float* logits);  // samples the next token from a [V] row
  void finish(Job& j);
  void publish(Job& j, std::string piece);

  const model::Model& m_;
  const io::Tokenizer& tok_;
  BatchLimits limits_;
  std::mutex& compute_;
  std::vector<std::int64_t> eos_;
  std::int64_t n_cand_ = 0;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::shared_ptr<Job>> active_;  // touched by the scheduler thread only (counted under mu_)
  Counts counts_;
  std::int64_t reserved_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace latentllm::cli

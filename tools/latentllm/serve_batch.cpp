// Continuous batching for `latentllm serve` (serve_batch.hpp).
#include "serve_batch.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "latentllm/error.hpp"

namespace latentllm::cli {

// One request: its input, the scheduler's state for it, and what it hands the waiting caller.
struct Batcher::Job {
  Request req;
  int capacity = 0;         // KV positions
  std::int64_t bytes = 0;   // reserved while it runs
  // Scheduler thread only.
  std::unique_ptr<model::KvCache> cache;
  std::optional<eval::Sampler> sampler;
  std::optional<io::TextStream> stream;
  std::string text;  // the pieces so far (stop strings are looked for here, as generate's stop_requested)
  bool finished = false;
  Result result;
  // Shared under mu_.
  std::deque<std::string> pieces;
  bool done = false;
  std::exception_ptr error;
  std::atomic<bool> gone{false};
};

Batcher::Batcher(const model::Model& m, const io::Tokenizer& tok, BatchLimits limits, std::mutex& compute)
    : m_(m), tok_(tok), limits_(limits), compute_(compute), eos_(eval::stop_token_ids(m)),
      n_cand_(std::min<std::int64_t>(m.config().vocab_size, tok.vocab_size())) {
  limits_.max_batch = std::max(limits_.max_batch, 1);
  thread_ = std::thread([this] { loop(); });
}

Batcher::~Batcher() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

std::int64_t Batcher::slots(int positions) const {
  const std::int64_t b = bytes(positions);
  return std::min<std::int64_t>(limits_.max_batch, b > 0 ? limits_.kv_bytes / b : limits_.max_batch);
}

Batcher::Counts Batcher::counts() const {
  const std::lock_guard<std::mutex> lock(mu_);
  Counts c = counts_;
  c.queued = static_cast<int>(queue_.size());
  return c;
}

Batcher::Result Batcher::run(Request r, const std::function<bool(std::string_view)>& on_piece) {
  auto job = std::make_shared<Job>();
  job->capacity = positions(r.ids.size(), r.g.max_new_tokens);
  job->bytes = bytes(job->capacity);
  job->req = std::move(r);
  // The startup plan holds one request of max_position_embeddings dense positions, so every request fits
  // alone; one that did not would wait forever.
  if (job->bytes > limits_.kv_bytes) throw std::logic_error("serve: a request larger than the whole KV budget");
  {
    const std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job);
    counts_.peak_queued = std::max(counts_.peak_queued, static_cast<int>(queue_.size()));
  }
  work_cv_.notify_all();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    done_cv_.wait(lock, [&] { return job->done || !job->pieces.empty(); });
    std::deque<std::string> pieces;
    pieces.swap(job->pieces);
    const bool done = job->done;
    lock.unlock();
    for (const std::string& p : pieces)
      if (on_piece && !job->gone && !on_piece(p)) job->gone = true;
    lock.lock();
    if (done && job->pieces.empty()) break;
  }
  if (job->error) std::rethrow_exception(job->error);
  return job->result;
}

void Batcher::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !active_.empty(); });
    if (stopping_ && queue_.empty() && active_.empty()) return;
    // Admission in arrival order: the first waiting request goes in once its reservation fits.
    std::vector<std::shared_ptr<Job>> admitted;
    while (!queue_.empty() && static_cast<int>(active_.size()) < limits_.max_batch &&
           reserved_ + queue_.front()->bytes <= limits_.kv_bytes) {
      reserved_ += queue_.front()->bytes;
      admitted.push_back(queue_.front());
      active_.push_back(queue_.front());
      queue_.pop_front();
    }
    counts_.running = static_cast<int>(active_.size());
    counts_.peak_running = std::max(counts_.peak_running, counts_.running);
    lock.unlock();
    {
      const std::lock_guard<std::mutex> compute(compute_);
      admit_and_prefill(admitted);
      decode_step();
    }
    lock.lock();
    // Finished requests leave at once and free their reservation.
    for (const auto& j : active_) {
      if (!j->finished) continue;
      reserved_ -= j->bytes;
      j->done = true;
      if (j->gone) ++counts_.abandoned;
    }
    std::erase_if(active_, [](const std::shared_ptr<Job>& j) { return j->finished; });
    counts_.running = static_cast<int>(active_.size());
    done_cv_.notify_all();
  }
}

void Batcher::admit_and_prefill(const std::vector<std::shared_ptr<Job>>& admitted) {
  MatrixF logits;  // [1, V]
  for (const auto& jp : admitted) {
    Job& j = *jp;
    try {
      j.sampler.emplace(j.req.g.sampling);
      j.stream.emplace(tok_, j.req.ids);
      j.cache = std::make_unique<model::KvCache>(m_, j.capacity, limits_.kv_cache);
      if (j.req.prefill) {
        j.req.prefill(*j.cache, logits);
      } else {
        m_.forward_cached(j.req.ids, *j.cache, logits, true);
      }
      take(j, logits.data());
    } catch (...) {
      j.error = std::current_exception();
      j.finished = true;
      j.cache.reset();
    }
  }
}

void Batcher::decode_step() {
  std::vector<Job*> batch;
  std::vector<std::int32_t> ids;
  std::vector<model::KvCache*> caches;
  for (const auto& j : active_) {
    if (j->finished) continue;
    batch.push_back(j.get());
    ids.push_back(j->result.tokens.back());
    caches.push_back(j->cache.get());
  }
  if (batch.empty()) return;
  MatrixF logits;  // [B, V]
  try {
    m_.forward_batch(ids, caches, logits);
  } catch (...) {
    for (Job* j : batch) {
      j->error = std::current_exception();
      j->finished = true;
    }
    return;
  }
  for (std::size_t b = 0; b < batch.size(); ++b) {
    try {
      take(*batch[b], logits.data() + static_cast<std::int64_t>(b) * logits.cols());
    } catch (...) {
      batch[b]->error = std::current_exception();
      batch[b]->finished = true;
    }
  }
}

// generate's loop for one token: sample, stream its text, then stop at EOS, at max_new_tokens, or when
// asked (a stop string in the text, the client gone); otherwise the token is fed at the next step.
void Batcher::take(Job& j, const float* logits) {
  const std::int32_t id = j.sampler->sample(std::span<const float>(logits, static_cast<std::size_t>(n_cand_)));
  j.result.tokens.push_back(id);
  publish(j, j.stream->push(id));
  const auto& stops = j.req.stops;
  if (std::find(eos_.begin(), eos_.end(), id) != eos_.end()) {
    j.result.stopped_at_eos = true;
  } else if (static_cast<int>(j.result.tokens.size()) < j.req.g.max_new_tokens && !j.gone &&
             std::none_of(stops.begin(), stops.end(), [&](const std::string& s) { return j.text.find(s) != std::string::npos; })) {
    return;
  }
  finish(j);
}

void Batcher::finish(Job& j) {
  publish(j, j.stream->finish());
  j.result.text = j.stream->text();
  j.finished = true;
  j.cache.reset();  // the memory goes back now; the reservation when the loop retires the job
}

void Batcher::publish(Job& j, std::string piece) {
  if (piece.empty()) return;
  j.text += piece;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    j.pieces.push_back(std::move(piece));
  }
  done_cv_.notify_all();
}

}  // namespace latentllm::cli

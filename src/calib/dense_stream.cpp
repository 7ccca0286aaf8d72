#include "calib/dense_stream.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "latentllm/error.hpp"

namespace latentllm::calib {
namespace {

using Clock = std::chrono::steady_clock;

// Keeps the inputs of some sites of one layer's forward, and stops it after the last of them.
class Capture : public model::ForwardObserver {
 public:
  Capture(int layer, const std::vector<model::Site>& sites, std::map<model::Site, MatrixF>& out)
      : layer_(layer), sites_(sites), out_(out), last_(*std::max_element(sites.begin(), sites.end())) {}
  void on_input(int layer, model::Site site, const MatrixF& x) override {
    if (layer == layer_ && std::find(sites_.begin(), sites_.end(), site) != sites_.end()) out_[site] = x;
  }
  bool done_after(model::Site site) const override { return site == last_; }

 private:
  int layer_;
  const std::vector<model::Site>& sites_;
  std::map<model::Site, MatrixF>& out_;
  model::Site last_;
};

// Puts the dense copy of a layer's modules into the model for one forward, and back (also on a throw).
class SwappedLayer {
 public:
  SwappedLayer(model::DecoderLayer& live, model::DecoderLayer& other) : a_(live), b_(other) { std::swap(a_, b_); }
  ~SwappedLayer() { std::swap(a_, b_); }
  SwappedLayer(const SwappedLayer&) = delete;
  SwappedLayer& operator=(const SwappedLayer&) = delete;

 private:
  model::DecoderLayer& a_;
  model::DecoderLayer& b_;
};

std::int64_t site_width(const model::DecoderLayer& layer, model::Site site) {
  for (const auto& lin : layer.linears)
    if (lin.site == site) return lin.in;
  return 0;
}

}  // namespace

DenseStream::DenseStream(model::Model& m, MatrixF hidden, int seqlen, std::int64_t rows_per_batch,
                         std::int64_t in_place_limit)
    : m_(m), hidden_(std::move(hidden)), seqlen_(seqlen), rows_per_batch_(rows_per_batch), limit_(in_place_limit) {}

void DenseStream::begin_layer(int i) {
  layer_ = i;
  dense_ = m_.layer(i);  // [out, in] float copies of the dense modules
  states_.clear();
  for (std::int64_t r0 = 0; r0 < hidden_.rows(); r0 += rows_per_batch_) {
    states_.emplace_back().resid = hidden_.middleRows(r0, std::min(rows_per_batch_, hidden_.rows() - r0));
  }
  inputs_.clear();
}

void DenseStream::run(model::LayerState& s, model::ForwardObserver* obs) {
  const auto t0 = Clock::now();
  {
    SwappedLayer swap(m_.layer(layer_), dense_);
    m_.layer_resume(layer_, s, seqlen_, obs);
  }
  seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
}

void DenseStream::advance_batch(std::size_t b, const std::vector<model::Site>& sites) {
  if (b >= states_.size() || sites.empty()) {
    throw Error(fmt::format("dense stream: batch {} of {} with {} sites (expected an existing batch and a site)", b,
                            states_.size(), sites.size()));
  }
  inputs_.clear();
  const model::Site until = *std::max_element(sites.begin(), sites.end());
  const std::int64_t n_tok = hidden_.rows();
  // Resumable in place while the states fit (each module of the dense layer then runs once).
  const bool in_place = 4 * n_tok * (hidden_.cols() + site_width(dense_, until)) <= limit_;
  Capture obs(layer_, sites, inputs_);
  if (in_place) {
    run(states_[b], &obs);
  } else {
    model::LayerState copy = states_[b];
    run(copy, &obs);
  }
  for (const model::Site s : sites) {
    if (!inputs_.count(s)) throw Error(fmt::format("dense stream: layer {} did not report a site input", layer_));
  }
}

const MatrixF& DenseStream::input(model::Site site) const {
  const auto it = inputs_.find(site);
  if (it == inputs_.end()) throw Error("dense stream: no dense input of that site in the current batch");
  return it->second;
}

void DenseStream::finish_layer() {
  for (std::size_t b = 0; b < states_.size(); ++b) {
    run(states_[b], nullptr);
    hidden_.middleRows(static_cast<std::int64_t>(b) * rows_per_batch_, states_[b].resid.rows()) = states_[b].resid;
  }
  states_.clear();
  inputs_.clear();
  dense_ = model::DecoderLayer{};
}

}  // namespace latentllm::calib

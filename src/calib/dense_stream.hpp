// The dense stream of the calibration pipeline (error-compensating fits, calib.hpp run_layerwise): the
// calibration windows run through the DENSE model beside the compressed pipeline, so that a site's
// compressed inputs x̂_t can be paired with the dense model's inputs x_t of the same token (CrossStats).
//
// Each layer's dense weights are copied before its stages replace them (begin_layer); a dense pass
// swaps that copy into the model for the duration of one batch's forward (the layer's modules are
// then restored), so the dense forward is the model's own forward code, bit for bit what the dense
// model computes. Batches have the compressed pipeline's rows (batch_windows · L), so batch b of both
// streams holds the same tokens.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "latentllm/calib.hpp"
#include "latentllm/model.hpp"

namespace latentllm::calib {

class DenseStream {
 public:
  // hidden: [N·L, d] the dense model's hidden states at the input of the first layer to run.
  // rows_per_batch: the compressed pipeline's batch rows. in_place_limit: bytes the resumable pass
  // states may take (residual + site input of N·L tokens); beyond, each pass runs on per-batch copies
  // from the layer's input (more dense forward, less memory).
  DenseStream(model::Model& m, MatrixF hidden, int seqlen, std::int64_t rows_per_batch, std::int64_t in_place_limit);

  // Copies layer i's modules (dense: call before any stage of layer i runs) and starts its passes.
  void begin_layer(int i);
  // Runs batch b of the dense layer up to the last of `sites` (forward order), keeping the dense inputs
  // of `sites` for that batch (input()). Sites must come after those of the previous call in this layer.
  void advance_batch(std::size_t b, const std::vector<model::Site>& sites);
  // [rows of the batch last advanced, w]: the dense input of `site` (Error when it was not asked for).
  const MatrixF& input(model::Site site) const;
  // Runs the dense layer to its end on every batch: hidden() becomes the input of the next layer. Frees
  // the layer copy and the pass states.
  void finish_layer();

  const MatrixF& hidden() const { return hidden_; }  // [N·L, d]
  double seconds() const { return seconds_; }       // dense forwards so far
  std::size_t batches() const { return states_.size(); }

 private:
  void run(model::LayerState& s, model::ForwardObserver* obs);

  model::Model& m_;
  MatrixF hidden_;  // [N·L, d]
  int seqlen_;
  std::int64_t rows_per_batch_;
  std::int64_t limit_;
  int layer_ = -1;
  model::DecoderLayer dense_;                  // layer_'s dense modules while it is compressed
  std::vector<model::LayerState> states_;      // per batch: at the layer's input or where a pass stopped
  std::map<model::Site, MatrixF> inputs_;      // the batch last advanced: [rows, w] per asked site
  double seconds_ = 0;
};

}  // namespace latentllm::calib

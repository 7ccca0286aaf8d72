#include "model/weight_table.hpp"

#include <algorithm>
#include <cmath>

#include "core/gemm16.hpp"
#include "latentllm/error.hpp"
#include "model/ops.hpp"
#include "quant/pack.hpp"
#include "quant/prefill.hpp"

namespace latentllm::model {
namespace {

// NumericError naming the first non-finite value of rows [r0, r0 + n) (widened at p: [n, cols]).
void check_rows_finite(const float* p, std::int64_t r0, std::int64_t n, std::int64_t cols, const std::string& name) {
  if (all_finite(p, n * cols)) return;
  for (std::int64_t k = 0; k < n * cols; ++k) {
    if (!std::isfinite(p[k])) {
      throw NumericError(fmt::format("{}: non-finite value at [{}, {}] (expected finite, got {})", name,
                                     r0 + k / cols, k % cols, p[k]));
    }
  }
}

}  // namespace

WeightTable WeightTable::widened(MatrixF m) {
  WeightTable t;
  t.rows_ = m.rows();
  t.cols_ = m.cols();
  t.m_ = std::move(m);
  return t;
}

WeightTable WeightTable::mapped(const io::TensorStore& store, const std::string& name, bool keep_pages) {
  WeightTable t;
  t.keep_pages_ = keep_pages;
  t.store_ = &store;
  t.view_ = &store.get(name);
  if (t.view_->shape.size() != 2) {
    throw FormatError(fmt::format("{}: tensor {}: shape (expected 2 dimensions, got {})", store.dir().string(), name,
                                  t.view_->shape.size()));
  }
  t.rows_ = t.view_->shape[0];
  t.cols_ = t.view_->shape[1];
  return t;
}

WeightTable WeightTable::held(Matrix16 m) {
  WeightTable t;
  t.rows_ = m.rows;
  t.cols_ = m.cols;
  t.held_ = std::move(m);
  return t;
}

WeightTable WeightTable::packed(std::shared_ptr<const quant::PackedMatrix> q) {
  WeightTable t;
  t.rows_ = q->rows;
  t.cols_ = q->cols;
  t.packed_ = std::move(q);
  return t;
}

void WeightTable::gather(std::span<const std::int32_t> ids, MatrixF& h) const {
  const auto n = static_cast<std::int64_t>(ids.size());
  h.resize(n, cols_);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t id = ids[static_cast<std::size_t>(i)];
    if (id < 0 || id >= rows_) {
      throw FormatError(fmt::format("token id at position {} (expected 0..{}, got {})", i, rows_ - 1, id));
    }
    if (held_.size() > 0) {
      core::widen_rows(held_, id, id + 1, h.data() + i * cols_);  // checked finite at load
      continue;
    }
    if (packed_) {
      quant::dequantize_rows(*packed_, id, id + 1, h.data() + i * cols_);  // finite scales and zeros (read_packed)
      continue;
    }
    if (view_ == nullptr) {
      h.row(i) = m_.row(id);
      continue;
    }
    float* row = h.data() + i * cols_;  // [cols]
    view_->to_f32(static_cast<std::int64_t>(id) * cols_, std::span<float>(row, static_cast<std::size_t>(cols_)));
    check_rows_finite(row, id, 1, cols_, view_->name);
  }
  release_pages();
}

const float* WeightTable::block(std::int64_t r0, std::int64_t n, core::ScratchF& scratch) const {
  if (packed_) {
    scratch.resize(static_cast<std::size_t>(n * cols_));
    quant::dequantize_rows(*packed_, r0, r0 + n, scratch.data());
    return scratch.data();
  }
  if (held_.size() > 0) {
    scratch.resize(static_cast<std::size_t>(n * cols_));
    core::widen_rows(held_, r0, r0 + n, scratch.data());  // checked finite at load
    return scratch.data();
  }
  if (view_ == nullptr) return m_.data() + r0 * cols_;
  scratch.resize(static_cast<std::size_t>(n * cols_));
  view_->to_f32(r0 * cols_, std::span<float>(scratch.data(), scratch.size()));
  check_rows_finite(scratch.data(), r0, n, cols_, view_->name);
  return scratch.data();
}

void WeightTable::release_pages() const {
  if (view_ != nullptr && !keep_pages_) store_->release_pages(view_->name);
}

std::optional<Matrix16> WeightTable::view16() const {
  if (held_.size() > 0) return held_;
  if (view_ == nullptr || (view_->dtype != DType::F16 && view_->dtype != DType::BF16) ||
      reinterpret_cast<std::uintptr_t>(view_->data) % alignof(std::uint16_t) != 0) {
    return std::nullopt;
  }
  Matrix16 m;
  m.dtype = view_->dtype;
  m.rows = rows_;
  m.cols = cols_;
  m.data = reinterpret_cast<const std::uint16_t*>(view_->data);
  return m;
}

std::shared_ptr<const quant::PackedMatrix> quantize_table(const WeightTable& t, const quant::QuantSpec& spec,
                                                          std::string_view context) {
  constexpr std::int64_t kBlockRows = 1024;
  auto out = std::make_shared<quant::PackedMatrix>();
  out->rows = t.rows();
  out->cols = t.cols();
  out->bits = spec.bits;
  out->group = spec.group;
  core::ScratchF scratch;  // [kBlockRows, cols] a lazy table's widened rows
  for (std::int64_t r0 = 0; r0 < t.rows(); r0 += kBlockRows) {
    const std::int64_t n = std::min(kBlockRows, t.rows() - r0);
    const float* rows = t.block(r0, n, scratch);  // [n, cols]
    const MatrixD w = Eigen::Map<const MatrixF>(rows, n, t.cols()).cast<double>();  // [n, cols]
    const quant::PackedMatrix p = quant::pack(quant::rtn(w, spec, context));
    // Packed rows are contiguous in each of the three arrays: the blocks concatenate.
    out->codes.insert(out->codes.end(), p.codes.begin(), p.codes.end());
    out->scales.insert(out->scales.end(), p.scales.begin(), p.scales.end());
    out->zeros.insert(out->zeros.end(), p.zeros.begin(), p.zeros.end());
  }
  t.release_pages();
  return out;
}

}  // namespace latentllm::model

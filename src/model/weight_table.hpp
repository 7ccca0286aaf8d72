// The token embedding and the LM head as the forward reads them: a [rows, cols] weight read by rows
// (embedding lookups) or by blocks of rows (the LM head's vocabulary blocks). An eager model holds it
// widened to float32; a lazy model (model::LoadOptions) reads the checkpoint's memory-mapped tensor
// (F32, F16 or BF16) and widens only the rows it needs, when it needs them; so does a model that
// holds its 16-bit tables in memory (LoadOptions::huge_pages). All give the same floats (the
// widening is exact), so the same arithmetic on them gives the same bits. A quantized LM head
// (compress --head-bits, docs/QUANT.md "The LM head") is a packed table: its rows are dequantized
// (quant::dequantize_rows) where the others are widened, and decoding reads its codes (quant::gemv).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/parallel.hpp"
#include "latentllm/io.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::quant {
struct PackedMatrix;  // src/quant/pack.hpp
struct QuantSpec;     // src/quant/quant.hpp
}  // namespace latentllm::quant

namespace latentllm::model {

class WeightTable {
 public:
  WeightTable() = default;
  // An eager table: m: [rows, cols] float32 (checked finite by the loader).
  static WeightTable widened(MatrixF m);
  // A lazy table: the tensor `name` of `store` (the store outlives the table), shape [rows, cols].
  // keep_pages: release_pages() leaves the pages mapped in (a model with stored weights reads its head
  // every decoding step; dropping its pages would fault them in again each time).
  static WeightTable mapped(const io::TensorStore& store, const std::string& name, bool keep_pages = false);
  // A 16-bit table held in memory (a copy in huge pages, LoadOptions::huge_pages), checked finite by
  // the loader.
  static WeightTable held(Matrix16 m);
  // A quantized table: q [rows, cols] packed (validated by the loader, quant::read_packed), shared.
  static WeightTable packed(std::shared_ptr<const quant::PackedMatrix> q);

  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  std::int64_t size() const { return rows_ * cols_; }  // parameters
  bool empty() const { return rows_ == 0; }
  bool is_mapped() const { return view_ != nullptr; }
  // Widened to float32 at load: matrix() holds it.
  bool is_widened() const { return m_.size() > 0; }
  // The packed matrix of a quantized table, else null.
  const quant::PackedMatrix* packed() const { return packed_.get(); }

  // h: [ids.size(), cols] = the rows ids. Throws FormatError "token id at position i (expected
  // 0..rows−1, got id)"; lazy: NumericError "<tensor>: non-finite value at [id, j] (...)" for a
  // non-finite value in a gathered row, and the tensor's pages are dropped afterwards.
  void gather(std::span<const std::int32_t> ids, MatrixF& h) const;
  // Rows [r0, r0 + n) as float32 [n, cols], row-major: a pointer into the matrix (eager), or the rows
  // widened into `scratch` (lazy; NumericError for a non-finite value as gather). Valid until scratch
  // changes.
  const float* block(std::int64_t r0, std::int64_t n, core::ScratchF& scratch) const;
  // The float32 matrix of an eager table (empty for a mapped one).
  const MatrixF& matrix() const { return m_; }
  // The held 16-bit table, or the mapped tensor as a Matrix16 view when it is F16 or BF16 with 2-byte
  // aligned data; else nullopt.
  std::optional<Matrix16> view16() const;
  // Lazy: drops the tensor's mapped pages from this process (TensorStore::release_pages); eager: nothing.
  void release_pages() const;

 private:
  MatrixF m_;                              // [rows, cols] eager; empty when mapped or held
  Matrix16 held_;                          // [rows, cols] held 16-bit; empty otherwise
  std::shared_ptr<const quant::PackedMatrix> packed_;  // [rows, cols] quantized; null otherwise
  const io::TensorStore* store_ = nullptr;  // lazy
  const TensorView* view_ = nullptr;        // lazy: [rows, cols] in the mapping
  std::int64_t rows_ = 0, cols_ = 0;
  bool keep_pages_ = false;
};

// t [rows, cols] quantized by round to nearest on each group's grid (quant::rtn, `spec`) and packed: the
// LM head of compress --head-bits. Rows are independent under round to nearest, so it runs a block of
// rows at a time (t widened block by block, never whole in double) and gives the codes of quant::rtn
// on the whole matrix. Throws as quant::rtn, naming `context`.
std::shared_ptr<const quant::PackedMatrix> quantize_table(const WeightTable& t, const quant::QuantSpec& spec,
                                                          std::string_view context);

}  // namespace latentllm::model

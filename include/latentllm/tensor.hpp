// Element types, a non-owning tensor view and the dense matrix types used throughout.
//
// Glossary (matches the paper): d = hidden size, d' = output size of a linear map, d_h = head dim,
// n_tok = tokens in a batch of windows, r = rank kept by a low-rank factorization.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Core>

namespace latentllm {

// U8 holds the packed codes of quantized modules (docs/FORMAT.md "Quantized tensors"); every other
// tensor is floating. A U8 tensor widens to float32 as its integer values.
enum class DType { F32, F16, BF16, U8 };

// Bytes per element.
std::size_t dtype_size(DType dtype);
// The safetensors spelling: "F32", "F16", "BF16", "U8".
std::string_view dtype_name(DType dtype);
// Parses a safetensors dtype string; throws FormatError for anything else.
DType parse_dtype(std::string_view name);

// IEEE half / bfloat16 <-> float. f32 -> half rounds to nearest even, as numpy and torch do.
float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_f16(float f);
float bf16_to_f32(std::uint16_t h);
std::uint16_t f32_to_bf16(float f);

// A view of tensor bytes owned elsewhere (usually a memory-mapped safetensors file).
struct TensorView {
  std::string name;               // HF tensor name, e.g. "model.decoder.layers.0.fc1.weight"
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;  // PyTorch order: a Linear weight is [out, in]
  const std::byte* data = nullptr;  // little-endian, row-major
  std::size_t nbytes = 0;

  std::int64_t numel() const;
  // Widens to float32 into out (numel() elements).
  void to_f32(std::span<float> out) const;
  std::vector<float> to_f32() const;
  // Widens the out.size() elements from flat index `first` on (row-major) into out; the same values
  // as the whole-tensor widening (exact for F16 and BF16). Throws Error when the range leaves the tensor.
  void to_f32(std::int64_t first, std::span<float> out) const;
};

// Row-major float matrices hold weights ([out, in]) and activations ([n_tok, d]), so that a
// safetensors tensor maps onto one without transposition.
using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using VectorF = Eigen::VectorXf;
// A [rows, cols] row-major matrix of F16 or BF16 values kept as a checkpoint stores them
// (model::LoadOptions::weights): a view of the mapped tensor (whoever mapped it keeps the mapping
// alive for the matrix's lifetime) or an owned copy (the tensor's bytes are not 2-byte aligned, or
// the model copies its weights into huge pages, LoadOptions::huge_pages).
// The kernels of core/gemm16.hpp widen it to float32 per block; the widening is exact.
struct Matrix16 {
  DType dtype = DType::F16;             // F16 or BF16
  std::int64_t rows = 0, cols = 0;
  const std::uint16_t* data = nullptr;  // [rows, cols] little-endian
  std::shared_ptr<const void> owned;    // backs data when not a view

  std::int64_t size() const { return rows * cols; }
  std::int64_t bytes() const { return 2 * size(); }
  const std::uint16_t* row(std::int64_t i) const { return data + i * cols; }
};

// Statistics and decompositions run in double (column-major, Eigen's default).
using MatrixD = Eigen::MatrixXd;
using VectorD = Eigen::VectorXd;

}  // namespace latentllm

// model::Weight: one weight matrix as float32, 16-bit as stored, or quantized (include/latentllm/model.hpp).
#include <cstring>

#include <fmt/format.h>

#include "core/gemm16.hpp"
#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "quant/pack.hpp"
#include "quant/prefill.hpp"

namespace latentllm::model {

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;  // clang before 17 deduces no aggregate's arguments

}  // namespace

Weight::Weight(Packed q) {
  if (q) v_ = std::move(q);
}

std::int64_t Weight::rows() const {
  return std::visit(Overloaded{[](const MatrixF& m) { return static_cast<std::int64_t>(m.rows()); },
                               [](const Matrix16& m) { return m.rows; },
                               [](const Packed& q) { return q->rows; }},
                    v_);
}

std::int64_t Weight::cols() const {
  return std::visit(Overloaded{[](const MatrixF& m) { return static_cast<std::int64_t>(m.cols()); },
                               [](const Matrix16& m) { return m.cols; },
                               [](const Packed& q) { return q->cols; }},
                    v_);
}

std::int64_t Weight::bytes() const {
  return std::visit(Overloaded{[](const MatrixF& m) { return 4 * static_cast<std::int64_t>(m.size()); },
                               [](const Matrix16& m) { return m.bytes(); },
                               [](const Packed& q) { return quant::packed_bytes(q->rows, q->cols, q->spec()); }},
                    v_);
}

int Weight::bits() const {
  return std::visit(Overloaded{[](const MatrixF&) { return 32; }, [](const Matrix16&) { return 16; },
                               [](const Packed& q) { return q->bits; }},
                    v_);
}

int Weight::group() const {
  const Packed& q = packed();
  return q ? q->group : 0;
}

const MatrixF& Weight::f32() const {
  if (const auto* m = std::get_if<MatrixF>(&v_)) return *m;
  throw Error(fmt::format("{} matrix [{}, {}] where float32 is expected",
                          half() != nullptr ? std::string(dtype_name(half()->dtype))
                                            : fmt::format("{}-bit quantized", bits()),
                          rows(), cols()));
}

MatrixF& Weight::f32() { return const_cast<MatrixF&>(std::as_const(*this).f32()); }

const Weight::Packed& Weight::packed() const {
  static const Packed kNone;
  if (const auto* q = std::get_if<Packed>(&v_)) return *q;
  return kNone;
}

MatrixF Weight::to_f32() const {
  return std::visit(Overloaded{[](const MatrixF& m) { return m; },
                               [](const Matrix16& h) {
                                 MatrixF out(h.rows, h.cols);  // [rows, cols]
                                 core::widen_rows(h, 0, h.rows, out.data());
                                 return out;
                               },
                               [](const Packed& q) {
                                 MatrixF out(q->rows, q->cols);  // [rows, cols]
                                 quant::dequantize_rows(*q, 0, q->rows, out.data());
                                 return out;
                               }},
                    v_);
}

bool operator==(const Weight& a, const Weight& b) {
  if (a.v_.index() != b.v_.index() || a.rows() != b.rows() || a.cols() != b.cols()) return false;
  if (a.is_f32()) return a.empty() || (a.f32().array() == b.f32().array()).all();
  if (const Matrix16* h = a.half()) {
    return h->dtype == b.half()->dtype &&
           (h->size() == 0 || std::memcmp(h->data, b.half()->data, static_cast<std::size_t>(h->bytes())) == 0);
  }
  const quant::PackedMatrix &p = *a.packed(), &q = *b.packed();
  return p.bits == q.bits && p.group == q.group && p.codes == q.codes && p.scales == q.scales && p.zeros == q.zeros;
}

}  // namespace latentllm::model

// Linear modules (dense, factored, block identity) and the layer's module lookup.
#include <algorithm>

#include "core/gemm.hpp"
#include "core/gemm16.hpp"
#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "model/linear_fused.hpp"
#include "core/parallel.hpp"
#include "model/profile.hpp"
#include "quant/gemv.hpp"
#include "quant/prefill.hpp"

namespace latentllm::model {

using Packed = std::shared_ptr<const quant::PackedMatrix>;

namespace {

// Rows per task of the linear forward (also the sgemm's M).
constexpr std::int64_t kRowBlock = 256;
// Fewer rows than one row block (decoding: 1 row) would run on one thread: those split the output
// columns instead, in fixed blocks of kColBlock (so results do not depend on the thread count).
constexpr std::int64_t kColBlock = 128;

bool ends_with_module(std::string_view name, std::string_view rel) {
  return name.size() > rel.size() && name.ends_with(rel) && name[name.size() - rel.size() - 1] == '.';
}

double linear_macs(const Linear& l) {
  return static_cast<double>(l.factored() ? l.A.size() + l.B.size() : l.weight.size());
}

// A weight operand [rows, cols]: float32 (f), kept 16-bit (h) or quantized (q); exactly one is set
// (f may be null for an empty matrix).
struct Operand {
  const float* f = nullptr;
  const Matrix16* h = nullptr;
  const quant::PackedMatrix* q = nullptr;
};
Operand operand(const Weight& w) {
  if (const Packed& q = w.packed()) return {nullptr, nullptr, q.get()};
  if (const Matrix16* h = w.half()) return {nullptr, h, nullptr};
  return {w.f32().data(), nullptr, nullptr};
}

}  // namespace

std::int64_t Linear::rank() const { return factored() ? B.cols() : std::min(in, out); }

int Linear::bits() const {
  const Packed& q = (factored() ? B : weight).packed();
  return q ? q->bits : 16;
}

int Linear::group() const { return (factored() ? B : weight).group(); }

std::int64_t Linear::num_params() const {
  return (factored() ? B.size() + A.size() : weight.size()) + bias.size();
}

std::int64_t Linear::bytes() const {
  return weight.bytes() + B.bytes() + A.bytes() + 4 * (bias.size() + static_cast<std::int64_t>(perm.size()));
}

const float* widened(const Weight& w, core::ScratchF& scratch) {
  if (const Matrix16* h = w.half()) {
    scratch.resize(static_cast<std::size_t>(h->size()));
    const double bytes = 6.0 * static_cast<double>(h->size());  // 2 read, 4 written per value
    core::parallel_for(h->rows, 64, core::Work{0, bytes}, [&](std::int64_t r0, std::int64_t r1) {
      core::widen_rows(*h, r0, r1, scratch.data() + r0 * h->cols);
    });
    return scratch.data();
  }
  const Packed& q = w.packed();
  if (!q) return w.f32().data();
  scratch.resize(static_cast<std::size_t>(q->rows * q->cols));
  const double bytes = 4.0 * static_cast<double>(q->rows * q->cols);
  core::parallel_for(q->rows, 64, core::Work{0, bytes}, [&](std::int64_t r0, std::int64_t r1) {
    quant::dequantize_rows(*q, r0, r1, scratch.data() + r0 * q->cols);
  });
  return scratch.data();
}

void Linear::forward(const MatrixF& x, MatrixF& y) const { linear_forward(*this, x, y); }

namespace {

// z: [rows, r] = xb: [rows, in] · Aᵀ for the factored l, a: l's A in float32 (block identity: the
// gathered identity columns plus the other columns · A).
void latent_block(const Linear& l, const float* a, const float* xb, int rows, core::ScratchF& z,
                  core::ScratchF& rest) {
  const std::int64_t r = l.rank(), in = l.in;
  z.resize(static_cast<std::size_t>(rows) * r);
  if (!l.block_identity) {
    core::sgemm_rm(false, true, rows, static_cast<int>(r), static_cast<int>(in), 1.0f, xb, static_cast<int>(in),
                   a, static_cast<int>(in), 0.0f, z.data(), static_cast<int>(r));
    return;
  }
  // A_dense = [I_r | A] on the columns perm: z = x[:, perm[:r]] + x[:, perm[r:]]·Aᵀ.
  const std::int64_t k = in - r;
  rest.resize(static_cast<std::size_t>(rows) * k);
  for (int i = 0; i < rows; ++i) {
    const float* xi = xb + i * in;
    float* zi = z.data() + i * r;
    float* ri = rest.data() + i * k;
    for (std::int64_t j = 0; j < r; ++j) zi[j] = xi[l.perm[static_cast<std::size_t>(j)]];
    for (std::int64_t j = r; j < in; ++j) ri[j - r] = xi[l.perm[static_cast<std::size_t>(j)]];
  }
  if (k > 0) {
    core::sgemm_rm(false, true, rows, static_cast<int>(r), static_cast<int>(k), 1.0f, rest.data(), static_cast<int>(k),
                   a, static_cast<int>(k), 1.0f, z.data(), static_cast<int>(r));
  }
}

// y[:, j] (ld ldy) = beta·y[:, j] + x: [n, k] · w[j, :]ᵀ for every column j < cols of w: [cols, k],
// by column blocks on the pool (a GEMV split over its output when n = 1).
// A 16-bit w is widened block by block (the same sgemm calls on the same values), or read by the GEMV
// kernel for at most core::kGemvRows rows.
void xwt_columns(const float* x, int n, int k, Operand w, std::int64_t cols, float beta, float* y, int ldy) {
  const bool rowwise = n > 1 && core::rowwise_products();
  if (rowwise && w.q != nullptr) {  // each row as alone: the quantized GEMV per row
    for (int i = 0; i < n; ++i) xwt_columns(x + static_cast<std::int64_t>(i) * k, 1, k, w, cols, beta, y + static_cast<std::int64_t>(i) * ldy, ldy);
    return;
  }
  if (rowwise && w.f != nullptr) {  // each row as alone (sgemv), the column block kept in cache across the rows
    core::parallel_for(cols, kColBlock, core::gemm_work(n, cols, k), [&](std::int64_t c0, std::int64_t c1) {
      for (int i = 0; i < n; ++i) {
        const std::int64_t xi = static_cast<std::int64_t>(i) * k, yi = static_cast<std::int64_t>(i) * ldy;
        core::sgemm_rm(false, true, 1, static_cast<int>(c1 - c0), k, 1.0f, x + xi, k, w.f + c0 * k, k, beta, y + yi + c0,
                       ldy);
      }
    });
    return;
  }
  if (w.q != nullptr && n == 1) {  // decode: the GEMV reads the packed codes once (rows split on the pool)
    core::ScratchF t(static_cast<std::size_t>(cols));  // [cols]
    quant::gemv(*w.q, std::span<const float>(x, static_cast<std::size_t>(k)), std::span<float>(t.data(), t.size()));
    for (std::int64_t c = 0; c < cols; ++c) y[c] = beta == 0.0f ? t[static_cast<std::size_t>(c)] : beta * y[c] + t[static_cast<std::size_t>(c)];
    return;
  }
  core::parallel_for(cols, kColBlock, core::gemm_work(n, cols, k), [&](std::int64_t c0, std::int64_t c1) {
    if (w.q != nullptr) {
      quant::xwtq(x, n, k, *w.q, c0, c1, beta, y + c0, ldy);
    } else if (w.h != nullptr) {
      core::xwt16(x, n, k, *w.h, c0, c1, beta, y + c0, ldy);
    } else {
      core::sgemm_rm(false, true, n, static_cast<int>(c1 - c0), k, 1.0f, x, k, w.f + c0 * k, k, beta, y + c0, ldy);
    }
  });
}

// z: [n, r] = x: [n, in] · A_denseᵀ for the factored l, by columns of z (few rows).
void latent_columns(const Linear& l, const float* x, int n, float* z) {
  const std::int64_t r = l.rank(), in = l.in;
  const Operand a = operand(l.A);
  if (!l.block_identity) {
    xwt_columns(x, n, static_cast<int>(in), a, r, 0.0f, z, static_cast<int>(r));
    return;
  }
  const std::int64_t k = in - r;
  core::ScratchF rest(static_cast<std::size_t>(n * k));  // [n, in − r] the non-identity inputs
  for (int i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < r; ++j) z[i * r + j] = x[i * in + l.perm[static_cast<std::size_t>(j)]];
    for (std::int64_t j = r; j < in; ++j) rest[static_cast<std::size_t>(i * k + j - r)] = x[i * in + l.perm[static_cast<std::size_t>(j)]];
  }
  if (k > 0) xwt_columns(rest.data(), n, static_cast<int>(k), a, r, 1.0f, z, static_cast<int>(r));
}

// linear_forward for n < kRowBlock rows: the GEMMs split by output columns, the epilogue after them.
void forward_columns(const Linear& l, const MatrixF& x, MatrixF& y, const Epilogue& e) {
  const auto n = static_cast<int>(x.rows());
  const std::int64_t in = l.in, out = l.out;
  if (l.bias.size() > 0) {
    if (e.accumulate) {
      y.rowwise() += l.bias.transpose();
    } else {
      y.rowwise() = l.bias.transpose();
    }
  }
  const float beta = e.accumulate || l.bias.size() > 0 ? 1.0f : 0.0f;
  if (!l.factored()) {
    xwt_columns(x.data(), n, static_cast<int>(in), operand(l.weight), out, beta, y.data(),
                static_cast<int>(out));
  } else {
    const std::int64_t r = l.rank();
    core::ScratchF z(static_cast<std::size_t>(n * r));  // [n, r]
    latent_columns(l, x.data(), n, z.data());
    xwt_columns(z.data(), n, static_cast<int>(r), operand(l.B), out, beta, y.data(),
                static_cast<int>(out));
  }
  if (e.act) activate_span(y.data(), y.size(), *e.act);
  if (e.times != nullptr) y.array() *= e.times->array();
}

}  // namespace

void latent_forward(const Linear& l, const MatrixF& x, MatrixF& z) {
  if (!l.factored() || x.cols() != l.in) {
    throw Error(fmt::format("{}: latent of a {} module with input width {} (expected a factored module of input "
                            "width {})", l.name, l.factored() ? "factored" : "dense", x.cols(), l.in));
  }
  const std::int64_t n = x.rows(), r = l.rank();
  detail::ProfileScope scope(&ForwardProfile::linear_s, &ForwardProfile::linear_flops,
                             2.0 * static_cast<double>(l.A.size()) * static_cast<double>(n));
  z.resize(n, r);
  core::BlasSingleThreaded single;
  if (n < kRowBlock) {
    latent_columns(l, x.data(), static_cast<int>(n), z.data());
    return;
  }
  thread_local core::ScratchF wide_a;  // [r, in(−r)] a 16-bit A widened
  const float* a = widened(l.A, wide_a);
  core::parallel_for(n, kRowBlock, core::gemm_work(n, r, l.in), [&](std::int64_t r0, std::int64_t r1) {
    thread_local core::ScratchF zb, rest;  // [rows, r], [rows, in − r]
    latent_block(l, a, x.data() + r0 * l.in, static_cast<int>(r1 - r0), zb, rest);
    std::copy(zb.begin(), zb.begin() + (r1 - r0) * r, z.data() + r0 * r);
  });
}

void linear_forward(const Linear& l, const MatrixF& x, MatrixF& y, const Epilogue& e) {
  const std::int64_t n = x.rows(), in = l.in, out = l.out;
  if (x.cols() != in) throw Error(fmt::format("{}: input width (expected {}, got {})", l.name, in, x.cols()));
  if ((e.accumulate && (y.rows() != n || y.cols() != out)) ||
      (e.times != nullptr && (e.times->rows() != n || e.times->cols() != out))) {
    throw Error(fmt::format("{}: output shape (expected [{}, {}], got [{}, {}])", l.name, n, out,
                            e.accumulate ? y.rows() : e.times->rows(), e.accumulate ? y.cols() : e.times->cols()));
  }
  detail::ProfileScope scope(&ForwardProfile::linear_s, &ForwardProfile::linear_flops,
                             2.0 * linear_macs(l) * static_cast<double>(n));
  if (!e.accumulate) y.resize(n, out);
  if (n > 0 && n < kRowBlock) {
    core::BlasSingleThreaded single;
    forward_columns(l, x, y, e);
    return;
  }
  const bool has_bias = l.bias.size() > 0;
  // Row blocks, each on one thread: a factored module's latent block stays in cache between its
  // two GEMMs, and the block-identity gather and the epilogue run in parallel with them.
  const std::int64_t rank = l.factored() ? l.rank() : 0;
  const core::Work work = l.factored() ? core::gemm_work(n, rank, in) + core::gemm_work(n, out, rank)
                                       : core::gemm_work(n, out, in);
  core::BlasSingleThreaded single;
  // 16-bit matrices are widened whole once per call (on the pool) and the row blocks run the float32
  // path's sgemm calls on them: OpenBLAS's bits depend on how a product is split, so splitting W
  // further would change them for small blocks.
  thread_local core::ScratchF wide_w, wide_a, wide_b;  // the widened weight16, A16, B16
  const float* w = l.factored() ? nullptr : widened(l.weight, wide_w);
  const float* a = l.factored() ? widened(l.A, wide_a) : nullptr;
  const float* b = l.factored() ? widened(l.B, wide_b) : nullptr;
  core::parallel_for(n, kRowBlock, work, [&](std::int64_t r0, std::int64_t r1) {
    const int rows = static_cast<int>(r1 - r0);
    float* yb = y.data() + r0 * out;  // [rows, out]
    auto yrows = y.middleRows(r0, rows);
    if (has_bias && e.accumulate) {
      yrows.rowwise() += l.bias.transpose();
    } else if (has_bias) {
      yrows.rowwise() = l.bias.transpose();
    }
    const float beta = e.accumulate || has_bias ? 1.0f : 0.0f;
    if (!l.factored()) {
      core::sgemm_rm(false, true, rows, static_cast<int>(out), static_cast<int>(in), 1.0f, x.data() + r0 * in,
                     static_cast<int>(in), w, static_cast<int>(in), beta, yb, static_cast<int>(out));
    } else {
      thread_local core::ScratchF z, rest;  // [rows, r] latent, [rows, in − r] non-identity inputs
      latent_block(l, a, x.data() + r0 * in, rows, z, rest);
      const int r = static_cast<int>(l.rank());
      core::sgemm_rm(false, true, rows, static_cast<int>(out), r, 1.0f, z.data(), r, b, r, beta, yb,
                     static_cast<int>(out));
    }
    if (e.act) activate_span(yb, static_cast<std::int64_t>(rows) * out, *e.act);
    if (e.times != nullptr) yrows.array() *= e.times->middleRows(r0, rows).array();
  });
}

MatrixF Linear::dense_weight() const {
  if (!factored()) return weight.to_f32();
  const MatrixF B = this->B.to_f32(), A = this->A.to_f32();
  if (!block_identity) return B * A;  // [out, r]·[r, in]
  const std::int64_t r = B.cols();
  MatrixF a_dense = MatrixF::Zero(r, in);  // [r, in]
  for (std::int64_t j = 0; j < r; ++j) a_dense(j, perm[static_cast<std::size_t>(j)]) = 1.0f;
  for (std::int64_t k = 0; k < in - r; ++k) a_dense.col(perm[static_cast<std::size_t>(r + k)]) = A.col(k);
  return B * a_dense;
}

Linear Linear::dequantized() const {
  Linear l = *this;
  for (Weight* w : {&l.weight, &l.B, &l.A})
    if (w->packed()) *w = w->to_f32();
  return l;
}

const MatrixF& weight_f32(const Linear& l, MatrixF& widened) {
  if (l.weight.is_f32()) return l.weight.f32();
  widened = l.weight.to_f32();
  return widened;
}

Linear& DecoderLayer::linear(std::string_view rel_name) {
  return const_cast<Linear&>(std::as_const(*this).linear(rel_name));
}

const Linear& DecoderLayer::linear(std::string_view rel_name) const {
  for (const auto& l : linears)
    if (ends_with_module(l.name, rel_name)) return l;
  throw Error(fmt::format("no linear module {} in this layer", rel_name));
}

const Linear* DecoderLayer::find(Role role) const {
  for (const auto& l : linears)
    if (l.role == role) return &l;
  return nullptr;
}

Linear* DecoderLayer::find(Role role) { return const_cast<Linear*>(std::as_const(*this).find(role)); }

const Linear& DecoderLayer::linear(Role role) const {
  if (const Linear* l = find(role)) return *l;
  throw Error(fmt::format("no {} module in this layer", role_name(role)));
}

Linear& DecoderLayer::linear(Role role) { return const_cast<Linear&>(std::as_const(*this).linear(role)); }

std::string_view role_name(Role r) {
  switch (r) {
    case Role::Q: return "q";
    case Role::K: return "k";
    case Role::V: return "v";
    case Role::O: return "o";
    case Role::Gate: return "gate";
    case Role::Up: return "up";
    case Role::Down: return "down";
  }
  return "?";
}

const VectorF& DecoderLayer::norm(std::string_view rel_name) const {
  static const VectorF kEmpty;
  for (const auto& [name, v] : norms)
    if (name == rel_name) return v;
  return kEmpty;
}

}  // namespace latentllm::model

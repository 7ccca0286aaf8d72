// Linear modules (dense, factored, block identity) and the layer's module lookup.
#include <algorithm>
#include <array>

#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "model/parallel.hpp"
#include "model/profile.hpp"

namespace latentllm::model {
namespace {

// Which input site feeds each linear module, by HF name relative to the layer (both families).
constexpr std::array<std::pair<std::string_view, Site>, 10> kSites = {{
    {"self_attn.q_proj", Site::AttnIn},
    {"self_attn.k_proj", Site::AttnIn},
    {"self_attn.v_proj", Site::AttnIn},
    {"self_attn.out_proj", Site::AttnOut},
    {"self_attn.o_proj", Site::AttnOut},
    {"fc1", Site::MlpIn},
    {"mlp.gate_proj", Site::MlpIn},
    {"mlp.up_proj", Site::MlpIn},
    {"fc2", Site::MlpMid},
    {"mlp.down_proj", Site::MlpMid},
}};

bool ends_with_module(std::string_view name, std::string_view rel) {
  return name.size() > rel.size() && name.ends_with(rel) && name[name.size() - rel.size() - 1] == '.';
}

// y[i, :] = b for every row (y: [n, out]), so that the GEMM can accumulate onto it.
void fill_bias(MatrixF& y, std::int64_t n, const VectorF& b) {
  y.resize(n, b.size());
  y.rowwise() = b.transpose();
}

double linear_macs(const Linear& l) {
  return static_cast<double>(l.factored() ? l.A.size() + l.B.size() : l.weight.size());
}

}  // namespace

std::int64_t Linear::num_params() const {
  const std::int64_t w = factored() ? B.size() + A.size() : weight.size();
  return w + bias.size();
}

void Linear::forward(const MatrixF& x, MatrixF& y) const {
  if (x.cols() != in) {
    throw Error(fmt::format("{}: input width (expected {}, got {})", name, in, x.cols()));
  }
  const std::int64_t n = x.rows();
  detail::ProfileScope scope(&ForwardProfile::linear_s, &ForwardProfile::linear_flops,
                             2.0 * linear_macs(*this) * static_cast<double>(n));
  const bool has_bias = bias.size() > 0;
  if (has_bias) fill_bias(y, n, bias);
  if (!factored()) {
    parallel_xwt(x, weight, y, has_bias);  // [n, out]
    return;
  }
  const std::int64_t r = B.cols();
  MatrixF z;  // [n, r] latent
  if (!block_identity) {
    parallel_xwt(x, A, z);
  } else {
    // A_dense = [I_r | A] on the columns perm: z = x[:, perm[:r]] + x[:, perm[r:]]·Aᵀ.
    MatrixF rest(n, in - r);  // [n, in − r]
    z.resize(n, r);
    for (std::int64_t i = 0; i < n; ++i) {
      const float* xi = x.data() + i * in;
      float* zi = z.data() + i * r;
      float* ri = rest.data() + i * (in - r);
      for (std::int64_t j = 0; j < r; ++j) zi[j] = xi[perm[static_cast<std::size_t>(j)]];
      for (std::int64_t j = r; j < in; ++j) ri[j - r] = xi[perm[static_cast<std::size_t>(j)]];
    }
    parallel_xwt(rest, A, z, /*accumulate=*/true);
  }
  parallel_xwt(z, B, y, has_bias);  // [n, out]
}

MatrixF Linear::dense_weight() const {
  if (!factored()) return weight;
  if (!block_identity) return B * A;  // [out, r]·[r, in]
  const std::int64_t r = B.cols();
  MatrixF a_dense = MatrixF::Zero(r, in);  // [r, in]
  for (std::int64_t j = 0; j < r; ++j) a_dense(j, perm[static_cast<std::size_t>(j)]) = 1.0f;
  for (std::int64_t k = 0; k < in - r; ++k) a_dense.col(perm[static_cast<std::size_t>(r + k)]) = A.col(k);
  return B * a_dense;
}

Linear& DecoderLayer::linear(std::string_view rel_name) {
  return const_cast<Linear&>(std::as_const(*this).linear(rel_name));
}

const Linear& DecoderLayer::linear(std::string_view rel_name) const {
  for (const auto& l : linears)
    if (ends_with_module(l.name, rel_name)) return l;
  throw Error(fmt::format("no linear module {} in this layer", rel_name));
}

Site DecoderLayer::site_of(std::string_view rel_name) const {
  for (const auto& [rel, site] : kSites)
    if (rel == rel_name || ends_with_module(rel_name, rel)) return site;
  throw Error(fmt::format("{}: not a linear module of a decoder layer", rel_name));
}

const VectorF& DecoderLayer::norm(std::string_view rel_name) const {
  static const VectorF kEmpty;
  for (const auto& [name, v] : norms)
    if (name == rel_name) return v;
  return kEmpty;
}

}  // namespace latentllm::model

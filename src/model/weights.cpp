#include "model/weights.hpp"

#include <vector>

#include <fmt/ranges.h>

#include "latentllm/error.hpp"
#include "model/ops.hpp"

namespace latentllm::model {

WeightLoader::WeightLoader(const io::TensorStore& store, std::map<std::string, io::LatentModule> latent)
    : store_(store), latent_(std::move(latent)) {}

bool WeightLoader::has(const std::string& name) const {
  if (store_.has(name)) return true;
  const auto& meta = store_.metadata();
  const auto it = meta.find(name);
  return it != meta.end() && store_.has(it->second);
}

bool WeightLoader::has_prefix(const std::string& prefix) const {
  for (const auto& n : store_.names())
    if (n.starts_with(prefix)) return true;
  return false;
}

std::string WeightLoader::resolve(const std::string& name) const {
  if (store_.has(name)) return name;
  const auto& meta = store_.metadata();
  if (const auto it = meta.find(name); it != meta.end() && store_.has(it->second)) return it->second;
  store_.get(name);  // throws the store's "missing tensor" FormatError
  return name;
}

const TensorView& WeightLoader::view(const std::string& name, std::initializer_list<std::int64_t> shape) const {
  const std::vector<std::int64_t> expected(shape);
  const auto& t = store_.get(resolve(name), expected);
  if (t.shape != expected) {  // the store checks too; this guards the widening below
    throw FormatError(fmt::format("{}: shape (expected [{}], got [{}])", name, fmt::join(expected, ", "),
                                  fmt::join(t.shape, ", ")));
  }
  return t;
}

MatrixF WeightLoader::matrix(const std::string& name, std::int64_t rows, std::int64_t cols) const {
  const auto& t = view(name, {rows, cols});
  MatrixF m(rows, cols);
  t.to_f32(std::span<float>(m.data(), static_cast<std::size_t>(m.size())));
  check_finite(m, name);
  return m;
}

VectorF WeightLoader::vector(const std::string& name, std::int64_t n) const {
  const auto& t = view(name, {n});
  VectorF v(n);
  t.to_f32(std::span<float>(v.data(), static_cast<std::size_t>(v.size())));
  check_finite(v, name);
  return v;
}

Linear WeightLoader::linear(const std::string& module, std::int64_t in, std::int64_t out, bool has_bias) {
  Linear l;
  l.name = module;
  l.in = in;
  l.out = out;
  if (const auto it = latent_.find(module); it != latent_.end()) {
    const auto& lm = it->second;
    if (lm.in != in || lm.out != out) {
      throw FormatError(fmt::format("{}: latent module shape (expected [{}, {}], got [{}, {}])", module, out, in,
                                    lm.out, lm.in));
    }
    const std::int64_t r = lm.rank;
    l.B = matrix(module + ".B.weight", out, r);                                       // [out, r]
    l.A = matrix(module + ".A.weight", r, lm.block_identity ? in - r : in);          // [r, in(−r)]
    l.block_identity = lm.block_identity;
    l.perm = lm.perm;
    latent_used_.insert(module);
  } else {
    l.weight = matrix(module + ".weight", out, in);  // [out, in]
  }
  if (has_bias) l.bias = vector(module + ".bias", out);  // [out]
  return l;
}

void WeightLoader::check_latent_used() const {
  for (const auto& [name, lm] : latent_) {
    if (!latent_used_.count(name)) {
      throw FormatError(fmt::format("{}: latent.modules.{}: not a linear module of this architecture",
                                    store_.dir().string(), name));
    }
  }
}

}  // namespace latentllm::model

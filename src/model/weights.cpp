#include "model/weights.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/ranges.h>

#include "core/gemm16.hpp"
#include "core/mapped_file.hpp"
#include "io/latent_format.hpp"
#include "latentllm/error.hpp"
#include "model/ops.hpp"
#include "quant/pack.hpp"

namespace latentllm::model {

namespace {

// NumericError "<name>: non-finite value at [i, j] (expected finite, got v)" for m's first Inf or NaN.
void check_finite16(const Matrix16& m, const std::string& name) {
  if (const std::int64_t bad = core::first_non_finite(m); bad >= 0) {
    const std::uint16_t h = m.data[bad];
    throw NumericError(fmt::format("{}: non-finite value at [{}, {}] (expected finite, got {})", name, bad / m.cols,
                                   bad % m.cols, m.dtype == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h)));
  }
}

// The stored bytes of t as the element type T, checking the dtype first (FormatError naming t).
template <typename T>
std::span<const T> elements(const TensorView& t, DType dtype, std::vector<T>& copy) {
  if (t.dtype != dtype) {
    throw FormatError(fmt::format("{}: dtype (expected {}, got {})", t.name, dtype_name(dtype), dtype_name(t.dtype)));
  }
  copy.resize(t.nbytes / sizeof(T));  // unaligned mappings are copied; the copy is small beside the model
  if (!copy.empty()) std::memcpy(copy.data(), t.data, copy.size() * sizeof(T));
  return {copy.data(), copy.size()};
}

}  // namespace

WeightLoader::WeightLoader(const io::TensorStore& store, std::map<std::string, io::LatentModule> latent)
    : store_(store), latent_(std::move(latent)) {}

std::string WeightLoader::stored_name(const std::string& name) const {
  for (const PrefixRule& r : rules_)
    if (name.starts_with(r.from)) return r.to + name.substr(r.from.size());
  return name;
}

bool WeightLoader::has(const std::string& requested) const {
  const std::string name = stored_name(requested);
  if (store_.has(name)) return true;
  const auto& meta = store_.metadata();
  const auto it = meta.find(name);
  return it != meta.end() && store_.has(it->second);
}

bool WeightLoader::has_prefix(const std::string& requested) const {
  const std::string prefix = stored_name(requested);
  for (const auto& n : store_.names())
    if (n.starts_with(prefix)) return true;
  return false;
}

std::string WeightLoader::resolve(const std::string& requested) const {
  const std::string name = stored_name(requested);
  if (store_.has(name)) {
    used_.insert(name);
    return name;
  }
  const auto& meta = store_.metadata();
  if (const auto it = meta.find(name); it != meta.end() && store_.has(it->second)) {
    used_.insert(it->second);
    return it->second;
  }
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
  return matrix_of(name, {rows, cols}, rows, cols);
}

MatrixF WeightLoader::matrix_of(const std::string& name, std::initializer_list<std::int64_t> shape, std::int64_t rows,
                                std::int64_t cols) const {
  const auto& t = view(name, shape);
  counted_bytes_ += 4 * rows * cols;
  largest_stored_ = std::max(largest_stored_, static_cast<std::int64_t>(t.nbytes));
  if (checking_ && !scan_) return {};
  MatrixF m(rows, cols);
  t.to_f32(std::span<float>(m.data(), static_cast<std::size_t>(m.size())));
  store_.release_pages(t.name);
  check_finite(m, name);
  if (checking_) return {};  // scanned only
  return m;
}

Matrix16 WeightLoader::huge_copy(const TensorView& t, std::int64_t rows, std::int64_t cols) const {
  Matrix16 m;
  m.dtype = t.dtype;
  m.rows = rows;
  m.cols = cols;
  auto copy = core::copy_to_huge_pages(t.data, t.nbytes);
  m.data = reinterpret_cast<const std::uint16_t*>(copy.get());
  m.owned = std::move(copy);
  store_.release_pages(t.name);
  return m;
}

bool WeightLoader::is16(const std::string& name) const {
  const DType d = store_.get(resolve(name)).dtype;
  return d == DType::F16 || d == DType::BF16;
}

Matrix16 WeightLoader::matrix16(const std::string& name, std::int64_t rows, std::int64_t cols) const {
  const auto& t = view(name, {rows, cols});
  if (t.dtype != DType::F16 && t.dtype != DType::BF16) {
    throw Error(fmt::format("{}: matrix16 of a {} tensor (expected F16 or BF16)", name, dtype_name(t.dtype)));
  }
  counted_bytes_ += 2 * rows * cols;
  largest_stored_ = std::max(largest_stored_, static_cast<std::int64_t>(t.nbytes));
  if (checking_ && !scan_) return {};
  Matrix16 m;
  m.dtype = t.dtype;
  m.rows = rows;
  m.cols = cols;
  if (huge_pages_ && !checking_ && static_cast<std::int64_t>(t.nbytes) >= huge_min_bytes_) {
    m = huge_copy(t, rows, cols);
  } else if (reinterpret_cast<std::uintptr_t>(t.data) % alignof(std::uint16_t) == 0) {
    m.data = reinterpret_cast<const std::uint16_t*>(t.data);
  } else {
    auto copy = std::make_shared<std::vector<std::uint16_t>>(static_cast<std::size_t>(rows * cols));
    std::memcpy(copy->data(), t.data, t.nbytes);
    m.data = copy->data();
    m.owned = std::move(copy);
  }
  check_finite16(m, name);
  if (checking_) {  // scanned only
    store_.release_pages(t.name);
    return {};
  }
  return m;
}

VectorF WeightLoader::vector(const std::string& name, std::int64_t n) const {
  const auto& t = view(name, {n});
  counted_bytes_ += 4 * n;
  largest_stored_ = std::max(largest_stored_, static_cast<std::int64_t>(t.nbytes));
  if (checking_ && !scan_) return {};
  VectorF v(n);
  t.to_f32(std::span<float>(v.data(), static_cast<std::size_t>(v.size())));
  store_.release_pages(t.name);
  check_finite(v, name);
  if (checking_) return {};  // scanned only
  return v;
}

WeightTable WeightLoader::table(const std::string& name, std::int64_t rows, std::int64_t cols) const {
  const auto stored_bytes = static_cast<std::int64_t>(view(name, {rows, cols}).nbytes);
  largest_table_stored_ = std::max(largest_table_stored_, stored_bytes);
  if (stored_ && is16(name) && huge_pages_ && !checking_ && stored_bytes >= huge_min_bytes_) {  // a copy in huge pages
    table_bytes_ += stored_bytes;
    const TensorView& v = store_.get(resolve(name));
    auto [it, added] = huge_tables_.try_emplace(v.name);
    if (added) {
      it->second = huge_copy(v, rows, cols);
      check_finite16(it->second, name);
    }
    return WeightTable::held(it->second);
  }
  if (stored_ && is16(name)) {  // mapped, its stored bytes
    table_bytes_ += stored_bytes;
    WeightTable t = WeightTable::mapped(store_, resolve(name), /*keep_pages=*/!lazy_);
    if (!checking_ && !lazy_) {
      // An eager model checks every value at load; the GEMV of decoding reads a 16-bit head unchecked.
      const TensorView& v = store_.get(resolve(name));
      if (const auto m = t.view16()) check_finite16(*m, name);
      store_.release_pages(v.name);
    }
    return t;
  }
  if (!lazy_) {
    WeightTable t = WeightTable::widened(matrix(name, rows, cols));
    counted_bytes_ -= 4 * rows * cols;  // counted as a table
    table_bytes_ += 4 * rows * cols;
    return t;
  }
  table_bytes_ += 4 * rows * cols;
  return WeightTable::mapped(store_, resolve(name));
}

std::int64_t WeightLoader::take_largest_stored() {
  const std::int64_t b = largest_stored_;
  largest_stored_ = 0;
  return b;
}

std::int64_t WeightLoader::take_largest_widened() {
  const std::int64_t b = largest_widened_;
  largest_widened_ = 0;
  return b;
}

void WeightLoader::release_pages(const Linear& l) const {
  using io::Factor;
  const std::pair<const Weight*, Factor> parts[] = {{&l.weight, Factor::Weight}, {&l.B, Factor::B}, {&l.A, Factor::A}};
  for (const auto& [w, factor] : parts) {
    const Matrix16* m = w->half();
    if (m != nullptr && m->size() > 0 && !m->owned) store_.release_pages(resolve(io::latent_tensor_name(l.name, factor)));
  }
}

std::shared_ptr<const quant::PackedMatrix> WeightLoader::packed(const std::string& module, io::Factor f, std::int64_t rows,
                                                                std::int64_t cols, const io::LatentModule& lm) const {
  auto p = read_packed(module, f, rows, cols, lm);
  counted_bytes_ += quant::packed_bytes(rows, cols, p->spec());
  if (checking_) return nullptr;  // validated only
  return p;
}

std::optional<WeightTable> WeightLoader::packed_table(const std::string& module, std::int64_t rows, std::int64_t cols) {
  const auto it = latent_.find(module);
  if (it == latent_.end()) return std::nullopt;
  const io::LatentModule& lm = it->second;
  // Anything else listed under the head's name is left unused (check_latent_used names it); the codes'
  // shapes are checked against [rows, cols] by read_packed.
  if (!lm.quantized() || lm.rank != 0) return std::nullopt;
  auto q = read_packed(module, io::Factor::Weight, rows, cols, lm);
  const std::int64_t bytes = quant::packed_bytes(rows, cols, q->spec());
  table_bytes_ += bytes;
  largest_table_stored_ = std::max(largest_table_stored_, bytes);
  latent_used_.insert(module);
  return WeightTable::packed(std::move(q));
}

std::shared_ptr<const quant::PackedMatrix> WeightLoader::read_packed(const std::string& module, io::Factor f,
                                                                     std::int64_t rows, std::int64_t cols,
                                                                     const io::LatentModule& lm) const {
  using io::Piece;
  const TensorView& codes = store_.get(resolve(io::latent_tensor_name(module, f, Piece::Codes)));
  const TensorView& scales = store_.get(resolve(io::latent_tensor_name(module, f, Piece::Scales)));
  const TensorView& zeros = store_.get(resolve(io::latent_tensor_name(module, f, Piece::Zeros)));
  std::vector<std::uint8_t> c;
  std::vector<std::uint16_t> s, z;
  const quant::PackedTensors t{codes.shape, elements(codes, DType::U8, c), scales.shape, elements(scales, DType::F16, s),
                               zeros.shape, elements(zeros, DType::F16, z)};
  auto p = quant::read_packed(codes.name, lm.bits, lm.group, cols, t);
  if (p.rows != rows) {
    throw FormatError(fmt::format("{}: rows (expected {}, got {})", codes.name, rows, p.rows));
  }
  largest_stored_ = std::max(largest_stored_, static_cast<std::int64_t>(codes.nbytes));
  for (const TensorView* v : {&codes, &scales, &zeros}) store_.release_pages(v->name);
  return std::make_shared<const quant::PackedMatrix>(std::move(p));
}

std::int64_t WeightLoader::take_counted_bytes() {
  const std::int64_t b = counted_bytes_;
  counted_bytes_ = 0;
  return b;
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
    const std::int64_t a_cols = lm.block_identity ? in - r : in;
    const std::string b_name = io::latent_tensor_name(module, io::Factor::B);
    const std::string a_name = io::latent_tensor_name(module, io::Factor::A);
    if (lm.quantized() && r == 0) {
      l.weight = packed(module, io::Factor::Weight, out, in, lm);  // [out, in]
    } else if (lm.quantized()) {
      l.B = packed(module, io::Factor::B, out, r, lm);       // [out, r]
      l.A = packed(module, io::Factor::A, r, a_cols, lm);    // [r, in(−r)]
    } else {
      if (stored_ && is16(b_name)) {
        l.B = matrix16(b_name, out, r);  // [out, r]
      } else {
        l.B = matrix(b_name, out, r);
      }
      if (stored_ && is16(a_name)) {
        l.A = matrix16(a_name, r, a_cols);  // [r, in(−r)]
      } else {
        l.A = matrix(a_name, r, a_cols);
      }
    }
    if (stored_ && !lm.quantized()) largest_widened_ = std::max(largest_widened_, 4 * (out * r + r * a_cols));
    l.block_identity = lm.block_identity;
    l.perm = lm.perm;
    counted_bytes_ += 4 * static_cast<std::int64_t>(lm.perm.size());
    latent_used_.insert(module);
  } else {
    const std::string w_name = io::latent_tensor_name(module, io::Factor::Weight);
    if (stored_ && is16(w_name)) {
      l.weight = matrix16(w_name, out, in);  // [out, in]
      largest_widened_ = std::max(largest_widened_, 4 * out * in);
    } else {
      l.weight = matrix(w_name, out, in);  // [out, in]
    }
  }
  if (has_bias) l.bias = vector(module + ".bias", out);  // [out]
  return l;
}

namespace {

// Buffers that some exporters store beside the weights and no forward reads: RoPE's inverse
// frequencies (older transformers saved `rotary_emb.inv_freq`) and GPT-2-style causal masks.
bool ignorable_tensor(const std::string& name) {
  for (const char* suffix : {".rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias"})
    if (name.ends_with(suffix)) return true;
  return false;
}

}  // namespace

void WeightLoader::check_tensors_used(const std::vector<std::string>& within) const {
  auto checked = [&](const std::string& n) {
    if (within.empty()) return true;
    for (const auto& p : within)
      if (n.starts_with(p)) return true;
    return false;
  };
  std::vector<std::string> unused;
  for (const auto& n : store_.names())
    if (checked(n) && !used_.count(n) && !ignorable_tensor(n)) unused.push_back(n);
  if (unused.empty()) return;
  const std::size_t shown = std::min<std::size_t>(unused.size(), 3);
  throw FormatError(fmt::format(
      "{}: stored tensors not used by config.json's architecture (expected none, got {}: {}{}): config.json and "
      "the weights disagree (e.g. num_hidden_layers); --allow-unused-tensors runs the model without them",
      store_.dir().string(), unused.size(), fmt::join(unused.begin(), unused.begin() + static_cast<long>(shown), ", "),
      unused.size() > shown ? ", ..." : ""));
}

void WeightLoader::check_latent_used(const std::vector<std::string>& skip) const {
  for (const auto& entry : latent_) {
    const std::string& name = entry.first;
    const bool other = std::any_of(skip.begin(), skip.end(), [&](const std::string& p) { return name.starts_with(p); });
    if (!other && !latent_used_.count(name)) {
      throw FormatError(fmt::format("{}: latent.modules.{}: not a linear module of this architecture",
                                    store_.dir().string(), name));
    }
  }
}

}  // namespace latentllm::model

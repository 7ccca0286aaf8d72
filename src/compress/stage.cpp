#include "compress/stage.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "compress/asvd.hpp"
#include "compress/junction.hpp"
#include "compress/notes.hpp"
#include "core/gemm16.hpp"
#include "core/mapped_file.hpp"
#include "dist/comm.hpp"
#include "latentllm/error.hpp"
#include "latentllm/log.hpp"
#include "model/ops.hpp"

namespace latentllm::compress {
namespace {

// Writes factors into a model Linear (float), replacing its dense weight.
void install_factors(model::Linear& lin, const LowRank& f) {
  MatrixF b = f.B.cast<float>(), a = f.A.cast<float>();  // [out, r], [r, in or in − r]
  // Factors beyond the float range (from weights near it) would poison every later layer.
  model::check_finite(b, lin.name + ".B.weight");
  model::check_finite(a, lin.name + ".A.weight");
  lin.B = std::move(b);
  lin.A = std::move(a);
  lin.block_identity = f.block_identity();
  lin.perm.assign(f.perm.begin(), f.perm.end());
  if (f.bias.size() > 0) lin.bias = f.bias.cast<float>();
  lin.weight.resize(0, 0);
  // A view of the mapped checkpoint (an owned copy is freed with it): its pages leave the resident set
  // now, not when the layer is released (the dense stream's copy reads them again if it needs them).
  if (lin.weight16.size() > 0 && !lin.weight16.owned) {
    core::MappedFile::drop_pages_within(lin.weight16.data, static_cast<std::size_t>(lin.weight16.bytes()));
  }
  lin.weight16 = {};
}

}  // namespace

namespace {

// Writes a trivially copyable value, a string, a vector or a matrix into bytes and reads it back.
class Bytes {
 public:
  std::vector<char> data;
  template <typename T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const char*>(&v);
    data.insert(data.end(), p, p + sizeof v);
  }
  void put(const std::string& s) { put_span(s.data(), s.size()); }
  template <typename T>
  void put(const std::vector<T>& v) { put_span(v.data(), v.size()); }
  template <typename T, int R, int C>
  void put(const Eigen::Matrix<T, R, C>& m) {
    put<std::int64_t>(m.rows());
    put<std::int64_t>(m.cols());
    put_raw(m.data(), static_cast<std::size_t>(m.size()));
  }
  template <typename T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  void get(std::string& s) { s.resize(get<std::uint64_t>()), std::memcpy(s.data(), take(s.size()), s.size()); }
  template <typename T>
  void get(std::vector<T>& v) {
    v.resize(get<std::uint64_t>());
    std::memcpy(v.data(), take(v.size() * sizeof(T)), v.size() * sizeof(T));
  }
  template <typename T, int R, int C>
  void get(Eigen::Matrix<T, R, C>& m) {
    const auto rows = get<std::int64_t>(), cols = get<std::int64_t>();
    m.resize(rows, cols);
    std::memcpy(m.data(), take(static_cast<std::size_t>(m.size()) * sizeof(T)), static_cast<std::size_t>(m.size()) * sizeof(T));
  }

 private:
  template <typename T>
  void put_raw(const T* p, std::size_t n) {
    const auto* c = reinterpret_cast<const char*>(p);
    data.insert(data.end(), c, c + n * sizeof(T));
  }
  template <typename T>
  void put_span(const T* p, std::size_t n) {
    put<std::uint64_t>(n);
    put_raw(p, n);
  }
  const char* take(std::size_t n) {
    if (at_ + n > data.size()) throw Error(fmt::format("module fit: broadcast bytes (expected {} more, got {})", n, data.size() - at_));
    const char* p = data.data() + at_;
    at_ += n;
    return p;
  }
  std::size_t at_ = 0;
};

}  // namespace

void broadcast_fit(ModuleFit& fit, int root) {
  if (dist::size() == 1) return;
  Bytes b;
  if (dist::rank() == root) {
    b.put(fit.f.B), b.put(fit.f.A), b.put(fit.f.perm), b.put(fit.f.bias), b.put(fit.loss), b.put(fit.energy);
    b.put<std::uint64_t>(fit.notes.size());
    for (const NumericNote& n : fit.notes) b.put(n.module), b.put(n.kind), b.put(n.detail);
  }
  auto size = static_cast<std::int64_t>(b.data.size());
  dist::broadcast_bytes(&size, sizeof size, root);
  b.data.resize(static_cast<std::size_t>(size));
  dist::broadcast_bytes(b.data.data(), size, root);
  if (dist::rank() == root) return;
  b.get(fit.f.B), b.get(fit.f.A), b.get(fit.f.perm), b.get(fit.f.bias);
  fit.loss = b.get<double>();
  fit.energy = b.get<double>();
  fit.notes.resize(b.get<std::uint64_t>());
  for (NumericNote& n : fit.notes) b.get(n.module), b.get(n.kind), b.get(n.detail);
}

double fit_cost(const model::Linear& lin, bool output_side) {
  const double o = static_cast<double>(lin.out), n = static_cast<double>(lin.in), k = std::min(o, n);
  return output_side ? o * o * o + o * o * n : n * n * n + o * n * k + k * k * k;
}

MatrixD to_double(const MatrixF& m) { return m.cast<double>(); }
VectorD to_double(const VectorF& v) { return v.cast<double>(); }

MatrixD weight_double(const model::Linear& lin) {
  const Matrix16& h = lin.weight16;  // [out, in] when lin keeps a 16-bit matrix
  if (h.size() == 0) return lin.weight.cast<double>();
  // Blocks of rows widened to float32, then to double: no float32 copy of the whole module.
  constexpr std::int64_t kRows = 64;
  MatrixD out(h.rows, h.cols);
  MatrixF block(std::min(kRows, h.rows), h.cols);  // [rows, in]
  for (std::int64_t r0 = 0; r0 < h.rows; r0 += kRows) {
    const std::int64_t n = std::min(kRows, h.rows - r0);
    core::widen_rows(h, r0, r0 + n, block.data());
    out.middleRows(r0, n) = block.topRows(n).cast<double>();
  }
  return out;
}

std::string joined_name(std::initializer_list<const model::Linear*> mods) {
  std::string out;
  for (const model::Linear* lin : mods) out += out.empty() ? lin->name : ", " + lin->name.substr(lin->name.rfind('.') + 1);
  return out;
}

StageContext::StageContext(const CompressOptions& opt, const RankPlan& plan, CompressReport& report)
    : opt_(opt), local_(opt.local), report_(report) {
  local_.preconditioner = preconditioner_of(opt.method);
  for (const auto& mp : plan.modules) ranks_[mp.name] = mp.rank;
}

int StageContext::rank_of(const model::Linear& lin) const {
  const auto it = ranks_.find(lin.name);
  if (it == ranks_.end()) throw Error(fmt::format("{}: no rank planned", lin.name));
  return static_cast<int>(it->second);
}

void StageContext::install(model::Linear& lin, LowRank f, const MatrixD& w, const VectorD& b,
                           const calib::SiteStats* st, std::string_view how) {
  f = with_junction(std::move(f), local_.junction, lin.name);
  if (st == nullptr) return report_and_install(lin, f, (w - f.dense()).squaredNorm(), -1.0, how);
  const MatrixD e = w - f.dense();
  VectorD delta;
  if (b.size() > 0) delta = b - f.bias;
  const VectorD mean = st->mean();
  const auto n = static_cast<double>(st->n);
  const double loss = output_error_f32(e, delta, st->xtx, mean, n);
  report_and_install(lin, f, loss, output_error_f32(w, b, st->xtx, mean, n), how);
}

void StageContext::install_measured(model::Linear& lin, LowRank f, double loss, double energy, std::string_view how) {
  f = with_junction(std::move(f), local_.junction, lin.name);
  report_and_install(lin, f, loss, energy, how);
}

void StageContext::report_and_install(model::Linear& lin, const LowRank& f, double loss, double energy,
                                      std::string_view how) {
  ModuleReport r;
  r.name = lin.name;
  r.out = lin.out;
  r.in = lin.in;
  r.rank = f.rank();
  r.dense_params = lin.out * lin.in;
  r.params = f.weight_params();
  r.how = how;
  r.loss = loss;
  if (energy >= 0) {
    r.loss_rel = energy > 0 ? r.loss / energy : 0.0;
    log_info("  {} rank {} params {}/{} loss {:.4e} (rel {:.4f}) [{}]", lin.name, r.rank, r.params, r.dense_params,
             r.loss, r.loss_rel, how);
  }
  report_.modules.push_back(std::move(r));
  install_factors(lin, f);
}

void CompressStage::run(const calib::StageInput& in, model::Model& m) {
  NoteCollector notes;  // the numerical fallbacks of this stage, into the report in order
  const std::string part(name());
  const auto& observe = ctx_.options().part_observer;
  if (observe) observe(part, true);
  const auto t0 = std::chrono::steady_clock::now();
  compress(in, m);
  if (observe) observe(part, false);
  ctx_.report().part_seconds[part] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const NumericNote& n : notes.notes()) ctx_.report().add_note(n);
}

}  // namespace latentllm::compress

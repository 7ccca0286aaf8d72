// The sparse stage of `--method sparse | wanda | sparsegpt | lowrank-sparse`: every module of its site keeps
// its dense shape with a fraction `ratio` of its weights set to zero (compress/math/sparse.hpp), fitted on
// the site's input second moment C = Σ x·xᵀ (the full C for --method sparse, appendix "Sparse Matrix"; its
// diagonal for Wanda's score, H = C + λI for SparseGPT), or, for lowrank-sparse, B·A + D in the bytes of
// that sparse module (compress/math/lowrank_sparse.hpp). One task per module; the result serves the
// layer's later passes from the site's end (the sequential protocol of SparseGPT and of the low-rank
// methods) and is reported at the layer's end. The module stays a dense matrix in the checkpoint (with
// zeros; B·A + D summed); ModuleReport::params counts its non-zero entries, plus r·(d' + d) factor
// parameters at rank r (ModuleReport::rank).
#include <algorithm>
#include <set>

#include "compress/math/asvd.hpp"
#include "compress/math/bias.hpp"
#include "compress/math/lowrank_sparse.hpp"
#include "compress/math/sparse.hpp"
#include "compress/stages/codecs.hpp"
#include "compress/stages/stage.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/log.hpp"
#include "model/ops.hpp"

namespace latentllm::compress {
namespace {

// A module's sparse weight as installed (float32) with its bias and its output error over the calibration
// inputs.
struct SparseFit {
  MatrixF d;                // [d', d] zeros where pruned
  VectorF bias;             // [d'] the module's bias (updated with --method sparse), or empty
  std::int64_t nnz = 0;     // non-zero entries of the sparse part
  int rank = 0;             // of the low-rank part (lowrank-sparse), else 0
  double loss = 0, energy = 0;
  template <class S>
  static auto fields(S& s) { return std::tie(s.d, s.bias, s.nnz, s.rank, s.loss, s.energy); }
};

// A method's weight Ŵ in double ([d', d]) with its sparse part's non-zeros (counted as installed, in
// float) and the rank of its low-rank part.
struct Solved {
  MatrixD w_hat;  // [d', d]
  std::int64_t nnz = 0;
  int rank = 0;
};

std::int64_t nonzeros_f32(const MatrixD& d) { return (d.cast<float>().array() != 0.0f).count(); }

class SparseStage final : public CompressStage {
 public:
  SparseStage(StageContext& ctx, model::Site site, std::vector<model::Role> roles)
      : CompressStage(ctx), site_(site), roles_(std::move(roles)) {}
  std::string_view name() const override { return "sparse"; }
  model::Site site() const override { return site_; }

  void declare(graph::Graph& g, const calib::StageInput& in, model::Model& m) override {
    const calib::SiteStats& st = in.stats_of(site_);
    for (model::Linear& lin : m.layer(in.layer).linears) {
      if (lin.site != site_ || std::find(roles_.begin(), roles_.end(), lin.role) == roles_.end()) continue;
      if (!done_.insert(lin.name).second) continue;  // a later pass over the same site
      declare_module(g, lin, st);
    }
  }

 private:
  std::string how() const {
    const CompressOptions& o = ctx_.options();
    std::string h(method_name(o.method));
    if (o.method == Method::Sparse || o.method == Method::LowRankSparse) {
      h += fmt::format(" ({})", sparse_solver_name(o.sparse.solver));
    }
    if (o.sparse.pattern != SparsePattern::Unstructured) h += fmt::format(", {}", sparse_pattern_name(o.sparse.pattern));
    return h;
  }

  // The method's weight for w ([d', d]) on the input second moment c ([d, d]).
  Solved solve(const MatrixD& w, const MatrixD& c, const std::string& name) const {
    const CompressOptions& o = ctx_.options();
    if (o.method == Method::LowRankSparse) {
      const LowRankSparseOptions lo{o.sparse.solver, o.sparse.iters, o.local.lambda_rel, kLowRankSparseAlternations};
      const LowRankSparse f = lowrank_sparse_budget(w, c, o.ratio, lo, name);
      return {f.dense(), nonzeros_f32(f.d), f.rank};
    }
    const SparseTarget t{o.ratio, o.sparse.pattern};
    MatrixD d;  // [d', d]
    switch (o.method) {
      case Method::Wanda: d = wanda(w, c, t, name); break;
      case Method::SparseGpt: d = sparsegpt(w, c, t, o.local.lambda_rel, name); break;
      default:
        d = o.sparse.solver == SparseSolver::Fista ? sparse_fista(w, c, t, o.sparse.iters, name)
                                                   : sparse_hard(w, c, t, o.sparse.iters, name);
    }
    const std::int64_t nnz = nonzeros_f32(d);
    return {std::move(d), nnz, 0};
  }

  // --method sparse (and lowrank-sparse) on a module with a bias (and update_bias): the free bias
  // b̂ = b + (W − Ŵ)·μ keeps the mean output, so Ŵ is fitted on the centered covariance (appendix "Bias
  // Update", as the local ASVD).
  // Wanda and SparseGPT keep the bias, as published.
  bool updates_bias(const VectorD& b) const {
    const CompressOptions& o = ctx_.options();
    return (o.method == Method::Sparse || o.method == Method::LowRankSparse) && o.local.update_bias && b.size() > 0;
  }

  SparseFit fit(const model::Linear& lin, const DenseWeight& dense, const VectorD& b, const calib::SiteStats& st) const {
    const MatrixD w = weight_double(dense);  // [d', d]
    const bool centered = updates_bias(b);
    const Solved s = centered ? solve(w, st.centered(), lin.name) : solve(w, st.xtx, lin.name);
    SparseFit f;
    f.d = s.w_hat.cast<float>();
    // Values beyond the float range would poison every later layer.
    model::check_finite(f.d, lin.name + ".weight");
    f.nnz = s.nnz;
    f.rank = s.rank;
    const MatrixD dense_d = f.d.cast<double>();  // [d', d] as installed
    const VectorD mean = st.mean();              // [d]
    const VectorD bias = centered ? updated_bias(w, dense_d, b, mean) : b;  // [d'] or empty
    f.bias = bias.cast<float>();
    const double n = static_cast<double>(st.n);
    const VectorD delta = centered ? VectorD(b - f.bias.cast<double>()) : VectorD();  // [d'] b − b̂
    f.loss = output_error_f32(w - dense_d, delta, st.xtx, mean, n);
    f.energy = output_error_f32(w, b, st.xtx, mean, n);
    return f;
  }

  void declare_module(graph::Graph& g, model::Linear& lin, const calib::SiteStats& st) {
    auto b = std::make_shared<const VectorD>(to_double(lin.bias));  // [d'] or empty: kept as it is
    std::shared_ptr<const DenseWeight> dense = take_dense(lin);
    const double o = static_cast<double>(lin.out), n = static_cast<double>(lin.in);
    const bool low_rank = ctx_.options().method == Method::LowRankSparse;
    // lowrank-sparse: the sparse solve once per split and alternation
    const double runs =
        low_rank ? static_cast<double>(kLowRankSparseSplits.size() * (1 + kLowRankSparseAlternations)) : 1.0;
    const double cost = n * n * n + runs * (1.0 + ctx_.options().sparse.iters) * o * n * n;
    const auto fitted = g.task({lin.name, cost}, [this, &lin, &st, dense, b] { return fit(lin, *dense, *b, st); });
    g.at_site_end([&lin](const SparseFit& f) {
      lin.weight = f.d;
      lin.bias = f.bias;
    }, fitted);
    g.at_layer_end([this, &lin](const SparseFit& f) { report(lin, f); }, fitted);
  }

  void report(const model::Linear& lin, const SparseFit& f) {
    ModuleReport r;
    r.name = lin.name;
    r.out = lin.out;
    r.in = lin.in;
    r.dense_params = lin.out * lin.in;
    r.rank = f.rank;
    r.params = f.nnz + eval::factored_params(lin.out, lin.in, f.rank, false);
    r.how = how();
    r.loss = f.loss;
    r.loss_rel = f.energy > 0 ? f.loss / f.energy : 0.0;
    const std::string rank = f.rank > 0 ? fmt::format(" rank {}", f.rank) : std::string();
    log_info("  {} sparsity {:.4f}{} loss {:.4e} (rel {:.4f}) [{}]", lin.name,
             1.0 - static_cast<double>(f.nnz) / static_cast<double>(r.dense_params), rank, r.loss, r.loss_rel, r.how);
    ctx_.report().modules.push_back(std::move(r));
  }

  model::Site site_;
  std::vector<model::Role> roles_;
  std::set<std::string> done_;  // modules already given their task (names are unique across layers)
};

}  // namespace

std::unique_ptr<CompressStage> make_sparse_stage(StageContext& ctx, model::Site site, std::vector<model::Role> roles) {
  return std::make_unique<SparseStage>(ctx, site, std::move(roles));
}

}  // namespace latentllm::compress

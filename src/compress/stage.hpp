// The compressor as a sequence of calibration stages (calib::Stage): a method is a registry row
// (methods.cpp) whose stage list plan_stages returns, each stage in its own file, sharing one StageContext.
//
//   stage      file                 site it waits for   modules          rewrites
//   local      stage_local.cpp      its site            by role           its site
//   joint-qk   stage_joint_qk.cpp   AttnIn              Q, K              AttnIn
//   joint-vo   stage_joint_vo.cpp   AttnOut (+AttnIn)   V, O              AttnIn, AttnOut
//   joint-ud   stage_joint_ud.cpp   MlpIn (activations) Gate, Up, Down    MlpIn, MlpMid
#pragma once

#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "compress/low_rank.hpp"
#include "compress/notes.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/model.hpp"

namespace latentllm::compress {

// A module's factors in their junction form with their output error: loss = Σ ‖W·x + b − B·A·x − b̂‖²
// and energy = Σ ‖W·x + b‖² over the calibration inputs (energy < 0: the weight error ‖W − B·A‖²
// only, unlogged).
struct Fitted {
  LowRank f;
  double loss = 0, energy = -1;
};

// The bytes of a decomposition's results, written by the rank that computed them and read back on
// every rank in the same order.
class Payload {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put_raw(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put(const std::string& s) { put_span(s.data(), s.size()); }
  template <typename T>
  void put(const std::vector<T>& v) { put_span(v.data(), v.size()); }
  template <typename T, int R, int C>
  void put(const Eigen::Matrix<T, R, C>& m) {
    put<std::int64_t>(m.rows());
    put<std::int64_t>(m.cols());
    put_raw(reinterpret_cast<const char*>(m.data()), static_cast<std::size_t>(m.size()) * sizeof(T));
  }
  void put(const LowRank& f) { put(f.B), put(f.A), put(f.perm), put(f.bias); }
  void put(const Fitted& f) { put(f.f), put(f.loss), put(f.energy); }
  // Final factors as install() keeps them: B and A in float32 (half the bytes to send; exact, as the
  // model holds them in float32), the rest as they are.
  void put_installed(const Fitted& f) {
    put(Eigen::MatrixXf(f.f.B.cast<float>())), put(Eigen::MatrixXf(f.f.A.cast<float>()));
    put(f.f.perm), put(f.f.bias), put(f.loss), put(f.energy);
  }

  template <typename T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    take_into(&v, sizeof v);
    return v;
  }
  void get(std::string& s);
  template <typename T>
  void get(std::vector<T>& v) {
    v.resize(get<std::uint64_t>());
    take_into(v.data(), v.size() * sizeof(T));
  }
  template <typename T, int R, int C>
  void get(Eigen::Matrix<T, R, C>& m) {
    const auto rows = get<std::int64_t>(), cols = get<std::int64_t>();
    m.resize(rows, cols);
    take_into(m.data(), static_cast<std::size_t>(m.size()) * sizeof(T));
  }
  void get(LowRank& f) { get(f.B), get(f.A), get(f.perm), get(f.bias); }
  void get(Fitted& f) { get(f.f), f.loss = get<double>(), f.energy = get<double>(); }
  // A fit's factors as the layer's passes and its deferred finishing work read them: B and A rounded to
  // float32 (round_factors first, so that the rank that computed them holds the same values).
  void put_rounded(const LowRank& f) {
    put(Eigen::MatrixXf(f.B.cast<float>())), put(Eigen::MatrixXf(f.A.cast<float>())), put(f.perm), put(f.bias);
  }
  void get_rounded(LowRank& f) {
    Eigen::MatrixXf b, a;
    get(b), get(a);
    f.B = b.cast<double>();
    f.A = a.cast<double>();
    get(f.perm), get(f.bias);
  }
  void get_installed(Fitted& f) {
    Eigen::MatrixXf b, a;
    get(b), get(a);
    f.f.B = b.cast<double>();
    f.f.A = a.cast<double>();
    get(f.f.perm), get(f.f.bias);
    f.loss = get<double>(), f.energy = get<double>();
  }

  std::vector<char>& bytes() { return data_; }

 private:
  void put_raw(const char* p, std::size_t n) { data_.insert(data_.end(), p, p + n); }
  template <typename T>
  void put_span(const T* p, std::size_t n) {
    put<std::uint64_t>(n);
    put_raw(reinterpret_cast<const char*>(p), n * sizeof(T));
  }
  const char* take(std::size_t n);
  // The next n bytes into dst (which may be null when n is 0: an empty vector's or matrix's data()).
  void take_into(void* dst, std::size_t n) {
    const char* p = take(n);
    if (n > 0) std::memcpy(dst, p, n);
  }
  std::vector<char> data_;
  std::size_t at_ = 0;
};

// One decomposition of a stage: computed by one owner rank (all of them with one rank), its results
// handed to every rank. The jobs of a round are independent of each other.
struct Job {
  std::string what;   // the module(s) and part, for --json's timing ("...v_proj", "...q_proj, k_proj: start U_q")
  double cost = 0;    // modelled, in the units of fit_cost (owners are chosen by it)
  std::function<void(Payload&)> run;   // on the owner: computes and writes its results
  std::function<void(Payload&)> done;  // on every rank, in job order: reads them back
  // Optional finishing work (a fit's junction form and output error) that the stage otherwise defers:
  // run on the same owner right after run, appending to its results, when the round leaves that owner
  // idle for it (run_site decides by modelled cost; with one rank never); then_done reads it back on
  // every rank after done. The bytes are the same either way.
  double then_cost = 0;
  std::function<void(Payload&)> then_run = {};
  std::function<void(Payload&)> then_done = {};
};

// What the stages of one compression run share: the options, the planned ranks, the report.
class StageContext {
 public:
  StageContext(const CompressOptions& opt, const RankPlan& plan, CompressReport& report);

  const CompressOptions& options() const { return opt_; }
  // The local options of the method (its pre-conditioner, the junction, λ, α).
  const LocalOptions& local() const { return local_; }
  CompressReport& report() { return report_; }
  int rank_of(const model::Linear& lin) const;

  // f put into the junction form the options ask for and measured: its output error over the inputs
  // `st` against the dense w, b (st null: the weight error only).
  Fitted fitted(const model::Linear& lin, LowRank f, const MatrixD& w, const VectorD& b,
                const calib::SiteStats* st) const;
  // The same with the output error already known (the output side, output_side.hpp).
  Fitted fitted_measured(const model::Linear& lin, LowRank f, double loss, double energy) const;
  // Reports f under `how` (its log line, the report's row) and installs it in lin in place of the
  // dense weight.
  void install(model::Linear& lin, const Fitted& f, std::string_view how);

  // ---- finishing work, off the critical path ----
  // A fit's factors before their junction form (B·A is the same product) serve the layer's later
  // passes at once (install_for_passes); the junction form and the output error, which no later
  // decomposition reads, are a deferred job: run_site gives pending ones to the ranks a round leaves
  // idle, and finish_deferred runs the rest, then each one's install in the order they were deferred,
  // after the layer's output is propagated and before it is saved. The bytes do not depend on which
  // rank ran a job or when (the propagation always uses the factors as fitted).
  struct Deferred {
    int layer = 0;
    std::string stage;  // its stage's name, for the timing
    Job job;            // run on its owner, done on every rank
    std::function<void()> install;  // on every rank, in defer order, with the job's notes replayed before it
    bool ran = false;
    std::vector<NumericNote> notes;
  };
  // The modelled cost (fit_cost's units) of a module's junction form and, when measured, its output
  // error: the work StageContext::fitted does.
  double finish_cost(const model::Linear& lin, std::int64_t rank, bool measured) const;
  // Installs f in lin for the layer's later calibration passes only (no report row, no log line): as
  // its two factors, or as their product when that is cheaper per token (a dense-looking module until
  // finish_deferred installs its final form; fitted_in_layer tells it apart).
  void install_for_passes(model::Linear& lin, const LowRank& f);
  bool fitted_in_layer(const model::Linear& lin) const { return in_passes_.count(lin.name) > 0; }
  void defer(int layer, std::string_view stage, Job job, std::function<void()> install);
  std::vector<Deferred>& deferred() { return deferred_; }
  // The pending deferred jobs as one round (owners by cost), then every deferred install in order.
  void finish_deferred();

 private:
  const CompressOptions& opt_;
  LocalOptions local_;
  CompressReport& report_;
  std::map<std::string, std::int64_t> ranks_;
  std::vector<Deferred> deferred_;
  std::set<std::string> in_passes_;  // the modules installed for passes, until finish_deferred
};

// B and A rounded to float32 (kept in double): a fit as the layer's passes read it and as its deferred
// junction form starts from it, the same values on every rank (half the bytes to send).
LowRank round_factors(LowRank f);
// A rounded fit held in float32 until its deferred job runs (half the memory of the double).
struct Factors32 {
  Eigen::MatrixXf B, A;   // [d', r], [r, d]
  std::vector<int> perm;  // as LowRank's
  VectorD bias;
  explicit Factors32(const LowRank& f) : B(f.B.cast<float>()), A(f.A.cast<float>()), perm(f.perm), bias(f.bias) {}
  LowRank widened() const { return {B.cast<double>(), A.cast<double>(), perm, bias}; }
};

// The dense weight of a module, moved out of it before its factors are installed, for its deferred
// output error; a mapped view's pages are dropped when the last holder lets go.
struct DenseWeight {
  MatrixF weight;     // [out, in] float32, or empty
  Matrix16 weight16;  // [out, in] 16-bit, or empty
  DenseWeight() = default;
  DenseWeight(const DenseWeight&) = delete;
  DenseWeight& operator=(const DenseWeight&) = delete;
  ~DenseWeight();
};
std::shared_ptr<const DenseWeight> take_dense(model::Linear& lin);
MatrixD weight_double(const DenseWeight& w);

// A stage of the compressor. Per layer, on every rank: begin() prepares its decompositions (the
// collectives and the cheap shared work) and says how many rounds of jobs they take; jobs(r) are the
// r-th round's, all asked for before any runs (a job reads what the earlier rounds' done() kept when
// it runs, never when it is made); finish() installs the factors and reports them. run_site runs the
// stages waiting for one site together (site_stages).
class CompressStage : public calib::Stage {
 public:
  explicit CompressStage(StageContext& ctx) : ctx_(ctx) {}
  // The stage alone at its site (site_stages wraps every site's stages instead).
  void run(const calib::StageInput& in, model::Model& m) final;

  virtual int begin(const calib::StageInput& in, model::Model& m) = 0;
  virtual std::vector<Job> jobs(int round) = 0;
  virtual void finish(model::Model& m) = 0;

 protected:
  StageContext& ctx_;
};

// Runs the stages of one site (all waiting for the same site; their inputs are in `in`) for layer
// in.layer as one schedule, so that the ranks share their decompositions: every stage's begin() in
// stage order; then round by round (a stage of several rounds takes the last ones; a stage of one
// round joins the costliest round of the others, where the ranks would wait longest) the round's
// jobs of all stages get owner ranks by modelled cost (dist::owners_by_cost), each
// owner runs its jobs, and every rank receives every job's results (with the numerical notes it
// recorded) in job order; then every stage's finish() in stage order, with its notes replayed in the
// order one process records them. Each stage's seconds (begin, its jobs where they ran, finish) go to
// CompressReport::part_seconds, each job's to CompressReport::jobs. Every rank installs the same bytes
// for any number of ranks; with one rank the jobs run in turn on it.
void run_site(StageContext& ctx, std::span<CompressStage* const> stages, const calib::StageInput& in,
              model::Model& m);

// The pipeline's stages: each run of consecutive stages waiting for the same site as one stage
// (run_site). The stages must outlive them.
std::vector<std::unique_ptr<calib::Stage>> site_stages(StageContext& ctx,
                                                       std::span<const std::unique_ptr<CompressStage>> stages);

// Local ASVD (the method's pre-conditioner) of the not yet compressed modules with these roles at `site`.
// With the root covariance, the wide modules among them (output_side.hpp) are fitted from their
// outputs, without the site's covariance, when local_output_side allows it.
std::unique_ptr<CompressStage> make_local_stage(StageContext& ctx, const model::Model& m, model::Site site,
                                                std::vector<model::Role> roles);
std::unique_ptr<CompressStage> make_joint_qk_stage(StageContext& ctx);
std::unique_ptr<CompressStage> make_joint_vo_stage(StageContext& ctx);
std::unique_ptr<CompressStage> make_joint_ud_stage(StageContext& ctx);

// The stages of ctx's method for model m, in the sites' forward order: its registry row's (methods.cpp).
std::vector<std::unique_ptr<CompressStage>> plan_stages(StageContext& ctx, const model::Model& m);

// ---- helpers of the stage files ---------------------------------------------------------------

// The modelled cost of decomposing a module alone: the eigendecomposition of its input covariance and
// the SVD of the whitened weight, or from its outputs (output side) the [out, out] ones.
double fit_cost(const model::Linear& lin, bool output_side);

MatrixD to_double(const MatrixF& m);
VectorD to_double(const VectorF& v);
// The [out, in] weight of an unfactored module in double: from float32, or from the 16-bit matrix a model
// with stored weights keeps (widened by blocks of rows, never whole in float32), exact either way.
MatrixD weight_double(const model::Linear& lin);
// "model.layers.0.self_attn.q_proj, k_proj": the modules a joint stage compresses together.
std::string joined_name(std::initializer_list<const model::Linear*> mods);

}  // namespace latentllm::compress

// docs/ERRORS.md in sync with the code (tests/support/errors_doc.hpp): the sparse methods' options and
// solvers, one bad input per failure mode.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "compress/math/sparse.hpp"
#include "errors_doc.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/compress.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

using compress::SparsePattern;
using compress::SparseTarget;

MatrixD weight() {
  MatrixD w(3, 8);
  for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = std::sin(0.37 * static_cast<double>(i));
  return w;
}

CaseFn options_with(std::function<void(compress::CompressOptions&)> edit) {
  return lib([edit] {
    compress::CompressOptions o = compress::preset_options(compress::Preset::Default, compress::Method::Sparse, 0.5);
    edit(o);
    o.validate();
  });
}

CaseFn compress_cli(const std::string& args) {
  return cli("compress --model '" + shared_path("models/stories260K/hf").string() + "' --dry-run " + args);
}

const std::string kModule = "model.layers.1.mlp.up_proj";

TEST(ErrorsDoc, Sparsity) {
  const SparseTarget half{0.5, SparsePattern::Unstructured};
  const std::vector<Case> cases = {
      {"sp-solver", {lib([] { (void)compress::parse_sparse_solver("ista"); }), compress_cli("--method sparse --solver soft")}},
      {"sp-pattern", {lib([] { (void)compress::parse_sparse_pattern("4:8"); }), compress_cli("--method wanda --pattern 1:4")}},
      {"sp-ratio", {options_with([](compress::CompressOptions& o) { o.ratio = 1.0; })}},
      {"sp-ratio-24", {options_with([](compress::CompressOptions& o) {
                         o.sparse.pattern = SparsePattern::TwoFour;
                         o.ratio = 0.3;
                       }),
                       compress_cli("--method sparsegpt --pattern 2:4 --ratio 0.3")}},
      {"sp-fista-24", {options_with([](compress::CompressOptions& o) {
                         o.sparse = {compress::SparseSolver::Fista, SparsePattern::TwoFour, 10};
                       }),
                       lib([] { (void)compress::sparse_fista(weight(), MatrixD::Identity(8, 8), {0.5, SparsePattern::TwoFour}, 5, kModule); })}},
      {"sp-iters", {options_with([](compress::CompressOptions& o) { o.sparse.iters = 0; })}},
      {"sp-bits", {options_with([](compress::CompressOptions& o) { o.quant.bits = 4; }),
                   compress_cli("--method lowrank-sparse --bits 4")}},
      {"sp-rank-alloc", {options_with([](compress::CompressOptions& o) { o.rank_alloc = compress::RankAlloc::Global; }),
                         compress_cli("--method lowrank-sparse --rank-alloc global")}},
      {"sp-components", {options_with([](compress::CompressOptions& o) { o.components.vision = true; })}},
      {"sp-target", {compress_cli("--method sparse --ratio 0.5 --target params"),
                     compress_cli("--method lowrank-sparse --ratio 0.5 --target bytes")}},
      {"sp-columns", {lib([] {
         (void)compress::wanda(MatrixD::Ones(2, 6), MatrixD::Identity(6, 6), {0.5, SparsePattern::TwoFour}, kModule);
       })}},
      {"sp-finite", {lib([half] {
                       MatrixD w = weight();
                       w(1, 2) = std::numeric_limits<double>::infinity();
                       (void)compress::sparse_hard(w, MatrixD::Identity(8, 8), half, 5, kModule);
                     }),
                     lib([half] {
                       MatrixD c = MatrixD::Identity(8, 8);
                       c(3, 3) = std::nan("");
                       (void)compress::sparsegpt(weight(), c, half, 0.01, kModule);
                     })}},
      {"sp-covariance", {lib([half] { (void)compress::sparse_fista(weight(), MatrixD::Identity(4, 4), half, 5, kModule); })}},
      {"sp-zero-covariance", {lib([half] { (void)compress::sparse_hard(weight(), MatrixD::Zero(8, 8), half, 5, kModule); })}},
      {"sp-sparsegpt-pd", {lib([half] {
         MatrixD c = MatrixD::Ones(8, 8);  // rank 1, undamped: not positive definite
         (void)compress::sparsegpt(weight(), c, half, 0.0, kModule);
       })}},
      {"sp-parts", {lib([] { (void)eval::read_sparse_part(nlohmann::json(3), 4, 8, "latent.sparse_parts.m"); }),
                    lib([] { (void)eval::read_sparse_part({{"rank", 5}}, 4, 8, "latent.sparse_parts.m"); }),
                    lib([] { (void)eval::read_sparse_part({{"nonzeros", 33}}, 4, 8, "latent.sparse_parts.m"); }),
                    lib([] { (void)eval::read_sparse_part({{"nonzeros", "7"}}, 4, 8, "latent.sparse_parts.m"); }),
                    lib([] { (void)eval::read_sparse_part({{"rank", -1}}, 4, 8, "latent.sparse_parts.m"); })}},
  };
  check_section("Sparsity (`compress --method sparse|wanda|sparsegpt`, `compress::sparse_hard`, "
                "`compress::sparse_fista`, `compress::wanda`, `compress::sparsegpt`)",
                cases);
}

}  // namespace
}  // namespace latentllm::test

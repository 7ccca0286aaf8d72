// docs/ERRORS.md in sync with the code (tests/support/errors_doc.hpp): the quantizers' errors and the
// validating reader of packed tensors, one corrupted input per failure mode.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "errors_doc.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/io.hpp"
#include "model/weights.hpp"
#include "quant/factors.hpp"
#include "quant/gemv.hpp"
#include "quant/gptq.hpp"
#include "quant/pack.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

using namespace quant;

MatrixD weight() {
  MatrixD w(2, 16);
  for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = std::sin(0.37 * static_cast<double>(i));
  return w;
}

// A valid packed [3, 20] matrix at 4 bits in groups of 8 (n_g = 3, the last group padded by 4 codes).
struct Stored {
  PackedMatrix p;
  PackedTensors t;
  Stored() {
    MatrixD w(3, 20);
    for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = std::cos(0.21 * static_cast<double>(i));
    p = pack(rtn(w, {4, 8, Grid::MinMax}, "w"));
    t = {{3, 3, 4}, p.codes, {3, 3}, p.scales, {3, 3}, p.zeros};
  }
  void read() const { (void)read_packed("layers.0.fc1", 4, 8, 20, t); }
};

CaseFn stored(std::function<void(Stored&)> edit) {
  return lib([edit] {
    Stored s;
    edit(s);
    s.read();
  });
}

CaseFn gptq_with(std::function<void(MatrixD&, MatrixD&, QuantSpec&, GptqOptions&)> edit) {
  return lib([edit] {
    MatrixD w = weight(), h = MatrixD::Identity(16, 16);
    QuantSpec spec{4, 8, Grid::MinMax};
    GptqOptions opt;
    edit(w, h, spec, opt);
    (void)gptq(w, h, spec, opt, "layers.0.fc1");
  });
}

// A latent section with one module entry `e` (docs/FORMAT.md), parsed.
CaseFn latent_entry(nlohmann::json e) {
  return lib([e] {
    const nlohmann::json config = {{"latent", {{"format_version", io::kLatentFormatVersion}, {"modules", {{"m", e}}}}}};
    (void)io::parse_latent_modules(config, "dir/config.json");
  });
}

// A dense quantized module "m" of `rows` x 8 loaded from a checkpoint whose codes are `codes_dtype`
// (the stored matrix: 2 rows, one 4-bit group of 8).
CaseFn load_quantized(DType codes_dtype, std::int64_t rows) {
  return lib([codes_dtype, rows] {
    const auto dir = make_temp_dir("errors-quant");
    const std::vector<float> codes(8, 1.0f), scales(2, 0.5f), zeros(2, 8.0f);
    const std::vector<io::TensorToWrite> t = {{"m.qweight", codes_dtype, {2, 1, 4}, codes},
                                              {"m.scales", DType::F16, {2, 1}, scales},
                                              {"m.qzeros", DType::F16, {2, 1}, zeros}};
    io::write_safetensors(dir / "model.safetensors", t);
    const auto store = io::TensorStore::open(dir);
    io::LatentModule lm;
    lm.in = 8;
    lm.out = rows;
    lm.bits = 4;
    lm.group = 8;
    model::WeightLoader w(store, {{"m", lm}});
    (void)w.linear("m", 8, rows, false);
  });
}

// An edit on top of a valid --bpw run (latentllm, global ranks, a budget of 3 bits per weight).
std::function<void(compress::CompressOptions&)> bpw(std::function<void(compress::CompressOptions&)> edit) {
  return [edit](compress::CompressOptions& o) {
    o.method = compress::Method::LatentLlm;
    o.rank_alloc = compress::RankAlloc::Global;
    o.quant.bpw = 3;
    edit(o);
  };
}

CaseFn options_with(std::function<void(compress::CompressOptions&)> edit) {
  return lib([edit] {
    compress::CompressOptions o;
    edit(o);
    o.validate();
  });
}

TEST(ErrorsDoc, Quantization) {
  const std::vector<Case> cases = {
      {"q-bits", {lib([] { (void)rtn(weight(), {5, 8, Grid::MinMax}, "m"); }),
                  gptq_with([](MatrixD&, MatrixD&, QuantSpec& s, GptqOptions&) { s.bits = 16; })}},
      {"q-group", {lib([] { (void)rtn(weight(), {4, 12, Grid::MinMax}, "m"); }),
                   lib([] { (void)rtn(weight(), {4, 0, Grid::MinMax}, "m"); })}},
      {"q-weight", {lib([] {
                      MatrixD w = weight();
                      w(1, 3) = std::numeric_limits<double>::quiet_NaN();
                      (void)rtn(w, {4, 8, Grid::MinMax}, "m");
                    }),
                    gptq_with([](MatrixD& w, MatrixD&, QuantSpec&, GptqOptions&) { w(0, 0) = INFINITY; })}},
      {"q-scale-range", {lib([] {
         MatrixD w = weight();
         w(0, 0) = 2e6;
         (void)rtn(w, {4, 8, Grid::MinMax}, "m");
       })}},
      {"gptq-h-shape", {gptq_with([](MatrixD&, MatrixD& h, QuantSpec&, GptqOptions&) { h = MatrixD::Identity(8, 8); })}},
      {"gptq-h-finite", {gptq_with([](MatrixD&, MatrixD& h, QuantSpec&, GptqOptions&) { h(2, 5) = std::nan(""); })}},
      {"gptq-damping", {gptq_with([](MatrixD&, MatrixD&, QuantSpec&, GptqOptions& o) { o.percdamp = -0.1; }),
                        gptq_with([](MatrixD&, MatrixD&, QuantSpec&, GptqOptions& o) { o.percdamp = std::nan(""); })}},
      {"gptq-block", {gptq_with([](MatrixD&, MatrixD&, QuantSpec&, GptqOptions& o) { o.block = 0; })}},
      {"gptq-act-order", {gptq_with([](MatrixD&, MatrixD&, QuantSpec&, GptqOptions& o) { o.act_order = true; })}},
      {"gptq-not-pd", {gptq_with([](MatrixD&, MatrixD& h, QuantSpec&, GptqOptions& o) {
         h = MatrixD::Ones(16, 16);  // rank one, every diagonal entry 1: no dead input
         o.percdamp = 0.0;
       })}},
      {"q-gemv-shape", {lib([] {
         const Stored s;
         std::vector<float> x(19), y(3);
         gemv(s.p, x, y);
       })}},
      {"qf-shapes", {lib([] {
         (void)quantize_factors(MatrixD::Ones(4, 3), MatrixD::Ones(2, 16), MatrixD::Identity(16, 16), {}, "m");
       }),
                     lib([] {
                       (void)quantize_factors(MatrixD::Ones(4, 2), MatrixD::Ones(2, 16), MatrixD::Identity(8, 8), {},
                                              "m");
                     })}},
      {"qf-refit-not-pd", {lib([] {
         FactorOptions o;
         o.spec = {4, 8, Grid::MinMax};
         o.refit_b = true;
         o.gptq.percdamp = 0.0;
         MatrixD a = MatrixD::Zero(2, 16);  // A' = 0: B's inputs never vary
         (void)quantize_factors(MatrixD::Ones(4, 2), a, MatrixD::Identity(16, 16), o, "m");
       })}},
      {"qread-bits", {lib([] { (void)read_packed("m", 6, 8, 20, Stored().t); })}},
      {"qread-group", {lib([] { (void)read_packed("m", 4, 20, 20, Stored().t); })}},
      {"qread-codes-shape", {stored([](Stored& s) { s.t.codes_shape = {3, 12}; }),
                             stored([](Stored& s) { s.t.codes_shape = {3, 2, 4}; }),
                             stored([](Stored& s) { s.t.codes_shape = {std::int64_t{1} << 62, 3, 4}; })}},
      {"qread-codes-size", {stored([](Stored& s) { s.t.codes = s.t.codes.first(30); })}},
      {"qread-scales-shape", {stored([](Stored& s) { s.t.scales_shape = {9}; })}},
      {"qread-scales-size", {stored([](Stored& s) { s.t.scales = s.t.scales.first(8); })}},
      {"qread-zeros-shape", {stored([](Stored& s) { s.t.zeros_shape = {3, 2}; })}},
      {"qread-zeros-size", {stored([](Stored& s) { s.t.zeros = s.t.zeros.first(2); })}},
      {"qread-scale", {stored([](Stored& s) { s.p.scales[4] = 0x0000; }),          // 0
                       stored([](Stored& s) { s.p.scales[4] = 0xbc00; }),          // −1
                       stored([](Stored& s) { s.p.scales[4] = 0x7c00; }),          // inf
                       stored([](Stored& s) { s.p.scales[4] = 0x7e00; })}},        // nan
      {"qread-zero", {stored([](Stored& s) { s.p.zeros[8] = 0xfc00; })}},
      {"qlatent-bits", {latent_entry({{"rank", 2}, {"in", 8}, {"out", 8}, {"bits", 5}, {"group", 8}})}},
      {"qlatent-group", {latent_entry({{"in", 8}, {"out", 8}, {"bits", 4}, {"group", 12}})}},
      {"qlatent-pair", {latent_entry({{"in", 8}, {"out", 8}, {"bits", 4}})}},
      {"qread-dtype", {load_quantized(DType::F32, 2)}},
      {"qread-rows", {load_quantized(DType::U8, 3)}},
      {"qopt-bits", {options_with([](compress::CompressOptions& o) { o.quant.bits = 5; })}},
      {"qopt-head-bits", {options_with([](compress::CompressOptions& o) { o.quant.head_bits = 5; }),
                          options_with([](compress::CompressOptions& o) { o.quant.head_bits = 2; })}},
      {"qopt-group", {options_with([](compress::CompressOptions& o) { o.quant = {.bits = 4, .group = 20}; })}},
      {"qopt-method", {options_with([](compress::CompressOptions& o) { o.method = compress::Method::Gptq; })}},
      {"qopt-bpw", {options_with(bpw([](compress::CompressOptions& o) { o.quant.bpw = -1; })),
                    options_with(bpw([](compress::CompressOptions& o) { o.quant.bpw = 17; })),
                    options_with(bpw([](compress::CompressOptions& o) { o.quant.bpw = std::nan(""); }))}},
      {"qopt-bpw-method", {options_with(bpw([](compress::CompressOptions& o) { o.method = compress::Method::Gptq; })),
                           options_with(bpw([](compress::CompressOptions& o) { o.method = compress::Method::Wanda; }))}},
      {"qopt-bpw-bits", {options_with(bpw([](compress::CompressOptions& o) { o.quant.bits = 4; }))}},
      {"qopt-bpw-alloc", {options_with(bpw([](compress::CompressOptions& o) { o.rank_alloc = compress::RankAlloc::Uniform; })),
                          options_with(bpw([](compress::CompressOptions& o) { o.alloc_score = compress::AllocScore::Grouped; }))}},
      {"qopt-bpw-components", {options_with(bpw([](compress::CompressOptions& o) { o.components = {true, true, false}; }))}},
      {"qalloc-bpw-budget", {lib([] {
         const compress::ModuleSpectrum s{"model.layers.0.mlp.down_proj", model::Role::Down, 16, 16,
                                          std::vector<double>(16, 1.0), {}};
         (void)compress::allocate_ranks_bits({s}, 2.0, 8, compress::Junction::BlockIdentity);
       })}},
      {"qread-padding", {stored([](Stored& s) { s.p.codes[3 * 12 - 1] |= 0x10; }),
                         stored([](Stored& s) { s.p.codes[12 - 2] = 0x01; })}},
  };
  check_section("Quantization (`quant::rtn`, `quant::gptq`, `quant::quantize_factors`, `quant::read_packed`, "
                "`quant::gemv`)", cases);
}

}  // namespace
}  // namespace latentllm::test

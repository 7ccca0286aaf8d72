// The progress files' dense modules (checkpoint::write_layer_factors with dense_modules, the sparse methods):
// a module's rewritten dense weight reads back exactly, and one whose shape is not the module's is a
// FormatError naming the file and the tensor, never installed.
#include <gtest/gtest.h>

#include "latentllm/checkpoint.hpp"
#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;

model::DecoderLayer one_module(std::int64_t out, std::int64_t in) {
  model::DecoderLayer layer;
  model::Linear l;
  l.name = "model.layers.0.mlp.down_proj";
  l.role = model::Role::Down;
  l.in = in;
  l.out = out;
  l.weight = MatrixF(MatrixF::Random(out, in));  // [out, in]
  layer.linears.push_back(l);
  return layer;
}

TEST(ProgressFactors, DenseModuleReadsBackAndAWrongShapeIsAFormatError) {
  const fs::path file = test::make_temp_dir("progress-dense") / "layer-0.safetensors";
  const model::DecoderLayer written = one_module(3, 5);
  checkpoint::write_layer_factors(file, written, true);

  model::DecoderLayer same = one_module(3, 5);
  same.linears[0].weight = {};
  checkpoint::read_layer_factors(file, same);
  EXPECT_EQ(same.linears[0].weight, written.linears[0].weight);

  model::DecoderLayer other = one_module(5, 3);  // the file's [3, 5] does not fit a [5, 3] module
  const model::Weight before = other.linears[0].weight;
  const std::string what =
      test::error_of<FormatError>([&] { checkpoint::read_layer_factors(file, other); });
  EXPECT_EQ(what, file.string() + ": model.layers.0.mlp.down_proj.weight shape (expected [5, 3], got [3, 5])");
  EXPECT_EQ(other.linears[0].weight, before);
}

}  // namespace
}  // namespace latentllm

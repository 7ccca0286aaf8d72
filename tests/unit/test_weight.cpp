// model::Weight, a Linear's matrix in exactly one form (float32, 16-bit as stored, quantized): its shape,
// bytes and bits in each form, the float32 copy, equality of form and bits, and the error a reader
// that needs float32 gets instead of an empty matrix.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "quant/pack.hpp"
#include "quant/quant.hpp"

namespace latentllm {
namespace {

using model::Weight;

// [2, 3] 16-bit values of 1..6 (exact in F16), owned.
Matrix16 half_1_to_6() {
  auto bits = std::make_shared<std::vector<std::uint16_t>>();
  for (int i = 1; i <= 6; ++i) bits->push_back(f32_to_f16(static_cast<float>(i)));
  Matrix16 h;
  h.dtype = DType::F16;
  h.rows = 2;
  h.cols = 3;
  h.data = bits->data();
  h.owned = bits;
  return h;
}

MatrixF f32_1_to_6() {
  MatrixF m(2, 3);  // [2, 3]
  m << 1, 2, 3, 4, 5, 6;
  return m;
}

TEST(ModelWeight, EmptyByDefaultAndFloat32FromAnExpression) {
  const Weight none;
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(none.is_f32());
  EXPECT_EQ(none.bytes(), 0);
  const Weight w = f32_1_to_6() * 2.0f;  // an Eigen expression, evaluated
  ASSERT_TRUE(w.is_f32());
  EXPECT_EQ(w.rows(), 2);
  EXPECT_EQ(w.cols(), 3);
  EXPECT_EQ(w.bytes(), 24);
  EXPECT_EQ(w.bits(), 32);
  EXPECT_EQ(w.f32()(1, 2), 12.0f);
  EXPECT_EQ(w.half(), nullptr);
  EXPECT_EQ(w.packed(), nullptr);
}

TEST(ModelWeight, SixteenBitKeepsItsFormAndWidensExactly) {
  const Weight w = half_1_to_6();
  EXPECT_FALSE(w.is_f32());
  ASSERT_NE(w.half(), nullptr);
  EXPECT_EQ(w.bytes(), 12);
  EXPECT_EQ(w.bits(), 16);
  EXPECT_EQ(w.group(), 0);
  EXPECT_EQ(w.to_f32(), f32_1_to_6());
  EXPECT_EQ(Weight(w.to_f32()), Weight(f32_1_to_6()));
  EXPECT_FALSE(w == Weight(f32_1_to_6()));  // the same values in another form
  try {
    (void)w.f32();
    FAIL() << "f32() of a 16-bit matrix";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "F16 matrix [2, 3] where float32 is expected");
  }
}

TEST(ModelWeight, QuantizedBytesBitsAndDequantizedCopy) {
  const quant::QuantSpec spec{4, 8, quant::Grid::MinMax};
  MatrixD d(2, 8);  // [2, 8]: one group per row
  for (int j = 0; j < 8; ++j) d(0, j) = j, d(1, j) = -j;
  const quant::QuantizedMatrix q = quant::rtn(d, spec, "test");
  const Weight w = std::make_shared<const quant::PackedMatrix>(quant::pack(q));
  ASSERT_NE(w.packed(), nullptr);
  EXPECT_EQ(w.rows(), 2);
  EXPECT_EQ(w.cols(), 8);
  EXPECT_EQ(w.bits(), 4);
  EXPECT_EQ(w.group(), 8);
  EXPECT_EQ(w.bytes(), quant::packed_bytes(2, 8, spec));
  EXPECT_EQ(w.to_f32(), MatrixF(quant::dequantize(q).cast<float>()));
  EXPECT_EQ(w, Weight(std::make_shared<const quant::PackedMatrix>(quant::pack(q))));
  try {
    (void)w.f32();
    FAIL() << "f32() of a quantized matrix";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "4-bit quantized matrix [2, 8] where float32 is expected");
  }
  EXPECT_TRUE(Weight(Weight::Packed{}).empty());  // no packed matrix: no matrix
}

TEST(ModelWeight, LinearFormFollowsItsMatrices) {
  model::Linear l;
  l.in = 3;
  l.out = 2;
  l.weight = half_1_to_6();
  EXPECT_FALSE(l.factored());
  EXPECT_TRUE(l.stored16());
  EXPECT_EQ(l.bytes(), 12);
  EXPECT_EQ(l.dense_weight(), f32_1_to_6());
  l.B = MatrixF::Ones(2, 1);
  l.A = MatrixF::Ones(1, 3);
  l.weight = {};
  EXPECT_TRUE(l.factored());
  EXPECT_FALSE(l.stored16());
  EXPECT_EQ(l.rank(), 1);
  EXPECT_EQ(l.num_params(), 5);
  EXPECT_EQ(l.bytes(), 20);
}

}  // namespace
}  // namespace latentllm

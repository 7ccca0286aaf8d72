// How the compressor's result types travel between ranks (graph/bytes.hpp): each one serialized here,
// once. Factors that the model holds in float32 travel in float32 (exact: every rank widens the same
// floats), the solvers' intermediate subspaces in double.
#pragma once

#include "compress/math/joint_qk.hpp"
#include "compress/math/low_rank.hpp"
#include "compress/math/pair_solver.hpp"
#include "compress/stages/stage.hpp"
#include "graph/bytes.hpp"

namespace latentllm::graph {

template <>
struct Codec<compress::LowRank> {
  static void put(Bytes& b, const compress::LowRank& f) { b.put(f.B), b.put(f.A), b.put(f.perm), b.put(f.bias); }
  static void get(Bytes& b, compress::LowRank& f) { b.get(f.B), b.get(f.A), b.get(f.perm), b.get(f.bias); }
};

template <>
struct Codec<compress::Factors32> {
  static void put(Bytes& b, const compress::Factors32& f) { b.put(f.B), b.put(f.A), b.put(f.perm), b.put(f.bias); }
  static void get(Bytes& b, compress::Factors32& f) { b.get(f.B), b.get(f.A), b.get(f.perm), b.get(f.bias); }
};

template <>
struct Codec<quant::PackedMatrix> {
  static void put(Bytes& b, const quant::PackedMatrix& m) {
    b.put(m.rows), b.put(m.cols), b.put(m.bits), b.put(m.group), b.put(m.codes), b.put(m.scales), b.put(m.zeros);
  }
  static void get(Bytes& b, quant::PackedMatrix& m) {
    b.get(m.rows), b.get(m.cols), b.get(m.bits), b.get(m.group), b.get(m.codes), b.get(m.scales), b.get(m.zeros);
  }
};

// A module's final factors: B and A in float32, as install() keeps them, and when quantized their packed
// forms (the float32 values are then the dequantized ones, which install() does not read), or the packed
// dense matrix of a full-rank fit under --bpw.
template <>
struct Codec<compress::Fitted> {
  static void put(Bytes& b, const compress::Fitted& f) {
    b.put(compress::Factors32(f.f)), b.put(f.loss), b.put(f.energy), b.put(f.params);
    const bool q = f.qb != nullptr;
    b.put(q);
    if (q) b.put(*f.qb), b.put(*f.qa);
    const bool dense = f.qw != nullptr;  // --bpw at full rank
    b.put(dense);
    if (dense) b.put(*f.qw);
  }
  static void get(Bytes& b, compress::Fitted& f) {
    compress::Factors32 f32;
    b.get(f32);
    f.f = f32.widened();
    b.get(f.loss), b.get(f.energy), b.get(f.params);
    bool q = false;
    b.get(q);
    if (q) {
      quant::PackedMatrix qb, qa;
      b.get(qb), b.get(qa);
      f.qb = std::make_shared<const quant::PackedMatrix>(std::move(qb));
      f.qa = std::make_shared<const quant::PackedMatrix>(std::move(qa));
    }
    bool dense = false;
    b.get(dense);
    if (!dense) return;
    quant::PackedMatrix qw;
    b.get(qw);
    f.qw = std::make_shared<const quant::PackedMatrix>(std::move(qw));
  }
};

template <>
struct Codec<compress::RoundedFit> {
  static void put(Bytes& b, const compress::RoundedFit& f) { b.put(f.f), b.put(f.loss), b.put(f.energy); }
  static void get(Bytes& b, compress::RoundedFit& f) { b.get(f.f), b.get(f.loss), b.get(f.energy); }
};

template <>
struct Codec<compress::PairSolution> {
  static void put(Bytes& b, const compress::PairSolution& s) { b.put(s.u_l), b.put(s.u_r), b.put(s.loss); }
  static void get(Bytes& b, compress::PairSolution& s) { b.get(s.u_l), b.get(s.u_r), b.get(s.loss); }
};

template <>
struct Codec<compress::QkFactors> {
  static void put(Bytes& b, const compress::QkFactors& f) { b.put(f.q), b.put(f.k); }
  static void get(Bytes& b, compress::QkFactors& f) { b.get(f.q), b.get(f.k); }
};

template <>
struct Codec<compress::QkResult> {
  static void put(Bytes& b, const compress::QkResult& r) {
    b.put(r.f), b.put(r.loss), b.put(r.loss_local_start), b.put(r.used_local_start);
  }
  static void get(Bytes& b, compress::QkResult& r) {
    b.get(r.f), b.get(r.loss), b.get(r.loss_local_start), b.get(r.used_local_start);
  }
};

}  // namespace latentllm::graph

// The MLP activations of the supported architectures: one enum (latentllm/model.hpp) and one
// definition of each function, in float for the forward pass and in double for the joint up-down
// solver (src/compress/math/joint_ud.cpp), which also needs the slope.
#pragma once

#include <cmath>

#include "latentllm/model.hpp"

namespace latentllm::model {

// σ(x): relu; gelu = x·Φ(x) (torch's exact form); gelu_tanh = the tanh approximation (gelu_new,
// gelu_pytorch_tanh, gelu_fast); silu = x·sigmoid(x); quick_gelu = x·sigmoid(1.702·x) (CLIP).
template <typename T>
T activate(Activation a, T x) {
  switch (a) {
    case Activation::Relu: return x > T(0) ? x : T(0);
    case Activation::Gelu: return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752)));
    case Activation::GeluTanh:
      return T(0.5) * x * (T(1) + std::tanh(T(0.79788456080286536) * (x + T(0.044715) * x * x * x)));
    case Activation::Silu: return x / (T(1) + std::exp(-x));
    case Activation::QuickGelu: return x / (T(1) + std::exp(T(-1.702) * x));  // HF QuickGELUActivation
  }
  return x;
}

// dσ/dx (the Gauss-Newton step of joint up-down).
template <typename T>
T activate_slope(Activation a, T x) {
  switch (a) {
    case Activation::Relu: return x > T(0) ? T(1) : T(0);
    case Activation::Gelu: {
      const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752)));
      return cdf + x * std::exp(T(-0.5) * x * x) * T(0.39894228040143268);  // φ(x) = e^{−x²/2}/√(2π)
    }
    case Activation::GeluTanh: {
      const T k = T(0.79788456080286536);
      const T t = std::tanh(k * (x + T(0.044715) * x * x * x));
      return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3 * 0.044715) * x * x);
    }
    case Activation::Silu: {
      const T s = T(1) / (T(1) + std::exp(-x));
      return s * (T(1) + x * (T(1) - s));
    }
    case Activation::QuickGelu: {
      const T s = T(1) / (T(1) + std::exp(T(-1.702) * x));
      return s * (T(1) + T(1.702) * x * (T(1) - s));
    }
  }
  return T(1);
}

}  // namespace latentllm::model

#include "model/activation.hpp"

#include "latentllm/error.hpp"

namespace latentllm::model {

Activation parse_activation(const std::string& name, const std::string& origin) {
  if (name == "relu") return Activation::Relu;
  if (name == "gelu") return Activation::Gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return Activation::GeluTanh;
  if (name == "silu" || name == "swish") return Activation::Silu;
  if (name == "quick_gelu") return Activation::QuickGelu;
  throw ConfigError(fmt::format("{}: activation (expected one of relu, gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, "
                                "silu, swish, quick_gelu, got {})", origin, name.empty() ? "<none>" : name));
}

}  // namespace latentllm::model

// Fuzz target: config.json -> ModelConfig (src/model/config.cpp and the architecture files), through model::load_config.
// Input: the bytes of config.json.
#include <cstdint>

#include "support.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace latentllm;
  const auto parts = fuzz::split_input(data, size, 1);
  const auto path = fuzz::write_scratch("config.json", parts[0]);
  fuzz::accept_typed_errors([&] {
    const model::ModelConfig c = model::load_config(path);
    // What every consumer relies on after a successful parse.
    if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.head_dim <= 0 ||
        c.ffn_width() <= 0 || c.num_attention_heads % c.num_key_value_heads != 0) {
      __builtin_trap();
    }
  });
  return 0;
}

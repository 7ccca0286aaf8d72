// Fuzz target: a checkpoint's chat template (Jinja, src/io/jinja_*.cpp) parsed and rendered, through
// io::ChatTemplate. Input: the template's text, then (after the split marker) the conversation as JSON
// (a default conversation when it is not a JSON array).
#include <cstdint>

#include <nlohmann/json.hpp>

#include "support.hpp"
#include "latentllm/chat.hpp"
#include "latentllm/io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace latentllm;
  const auto parts = fuzz::split_input(data, size, 2);
  fuzz::accept_typed_errors([&] {
    io::check_json_depth(parts[1], "messages");  // as the server checks a request body
    io::Messages messages = nlohmann::ordered_json::parse(parts[1], nullptr, /*allow_exceptions=*/false);
    if (!messages.is_array()) {
      messages = nlohmann::ordered_json::parse(
          R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
              {"role": "assistant", "content": "Hello."}, {"role": "user", "content": [{"type": "image"},
              {"type": "text", "text": "What is this?"}]}])");
    }
    const io::ChatTemplate t(parts[0], "fuzz", "<s>", "</s>");
    (void)t.render(messages, true);
  });
  return 0;
}

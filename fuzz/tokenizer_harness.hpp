// Shared body of the tokenizer fuzz targets: load a tokenizer from a scratch model directory through
// io::load_tokenizer (format dispatch + config handling), then encode arbitrary bytes with and
// without special tokens and look every id up again.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "support.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::fuzz {

// `files`: (name, content) written into the directory; an empty content leaves the file out.
inline void run_tokenizer(std::initializer_list<std::pair<const char*, std::string_view>> files,
                          std::string_view text) {
  std::filesystem::path dir;
  for (const auto& [name, content] : files) {
    const std::string rel = std::string("tok/") + name;
    if (content.empty()) {
      remove_scratch(rel);
      dir = write_scratch("tok/.keep", "").parent_path();
    } else {
      dir = write_scratch(rel, content).parent_path();
    }
  }
  accept_typed_errors([&] {
    const auto tok = io::load_tokenizer(dir);
    (void)tok->describe();
    const std::int64_t n = tok->vocab_size();
    for (const bool special : {true, false}) {
      for (const std::int32_t id : tok->encode(text, special)) {
        if (id >= 0 && id < n) (void)tok->id_to_token(id);
      }
    }
    (void)tok->bos_id();
  });
}

}  // namespace latentllm::fuzz

// Fuzz target: safetensors layout validation (src/io/safetensors_header.cpp) and the reader and
// sharded store on top of it (src/io/safetensors.cpp).
//
// Input: the bytes of one safetensors file, validated in memory and, when valid, opened through
// TensorStore as <dir>/model.safetensors with every tensor widened to float32 (so ASan checks that the
// views stay inside the mapping). An input containing kSplit is a sharded checkpoint instead:
// model.safetensors.index.json, kSplit, the bytes of shard "s1.safetensors" (both written to a
// directory without model.safetensors).
#include <cstdint>
#include <span>

#include "support.hpp"
#include "io/safetensors_header.hpp"
#include "latentllm/io.hpp"

namespace {

using namespace latentllm;

void read_all(const io::TensorStore& store) {
  for (const auto& name : store.names()) {
    const TensorView& t = store.get(name);
    if (t.numel() <= 4096) (void)t.to_f32();
  }
  (void)store.metadata();
}

void run_single(std::string_view bytes) {
  const auto span = std::as_bytes(std::span(bytes.data(), bytes.size()));
  io::detail::parse_safetensors_layout(span, "input");  // throws for an invalid layout
  const auto dir = fuzz::write_scratch("single/model.safetensors", bytes).parent_path();
  read_all(io::TensorStore::open(dir));
}

void run_sharded(std::string_view index, std::string_view shard) {
  fuzz::write_scratch("sharded/model.safetensors.index.json", index);
  const auto dir = fuzz::write_scratch("sharded/s1.safetensors", shard).parent_path();
  read_all(io::TensorStore::open(dir));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto parts = fuzz::split_input(data, size, 2);
  fuzz::accept_typed_errors([&] {
    if (parts[0].size() == size) {
      run_single(parts[0]);
    } else {
      run_sharded(parts[0], parts[1]);
    }
  });
  return 0;
}

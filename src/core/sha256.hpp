// SHA-256 (FIPS 180-4), for the provenance of outputs: the hashes of calibration files and of a source
// checkpoint's config and safetensors headers. Streaming: update() any number of times, then hex().
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace latentllm::core {

class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  // The digest of everything updated, as 64 lowercase hex digits; the object is then spent.
  std::string hex();

 private:
  void block(const unsigned char* p);  // one 64-byte block
  std::array<std::uint32_t, 8> h_;
  std::array<unsigned char, 64> buf_{};
  std::size_t buffered_ = 0;
  std::uint64_t length_ = 0;  // bytes
};

// The SHA-256 of a file's bytes, read in chunks. IoError naming the file when it cannot be read.
std::string file_sha256(const std::filesystem::path& file);

}  // namespace latentllm::core

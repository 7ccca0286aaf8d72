// Read-only memory-mapped file (RAII). Empty files map to an empty span.
#pragma once

#include "latentllm/files.hpp"

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

namespace latentllm::core {

class MappedFile {
 public:
  // Throws IoError "<path>: cannot open (...)" with the OS reason.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};


}  // namespace latentllm::core

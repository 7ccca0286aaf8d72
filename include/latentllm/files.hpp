// Whole-file reads and atomic writes (temporary file + fsync + rename), for the library and the CLI.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace latentllm::core {

// Reads a whole file into a string; throws IoError naming the path.
std::string read_file(const std::filesystem::path& path);

// Writes `data` to `path` atomically: a temporary file in the same directory, fsync, rename.
// Throws IoError naming the path on any failure and removes the temporary.
void write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> data);

inline void write_text_atomic(const std::filesystem::path& path, std::string_view text) {
  write_file_atomic(path, std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace latentllm::core

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

namespace latentllm::core {

// `p` absolute and normalized; "out/" names the directory "out".
std::filesystem::path normalized_dir(const std::filesystem::path& p);

// fsync of a directory, so the entries created or renamed in it survive a crash. IoError on failure.
void sync_directory(const std::filesystem::path& dir);

// A directory written under the temporary sibling <out>.partial-<pid> and moved into place by commit(),
// so `out` always holds nothing, the old complete directory or the new complete one. Partial
// directories of killed runs (their pid gone) are removed on construction; the destructor removes an
// uncommitted one.
class StagedDirectory {
 public:
  // Throws IoError "<out>: output directory exists (use --force to replace it)" when out exists and
  // !overwrite, or when out's parent is not writable or the partial directory cannot be created.
  StagedDirectory(const std::filesystem::path& out, bool overwrite);
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  const std::filesystem::path& path() const { return tmp_; }   // write the files here
  const std::filesystem::path& target() const { return out_; }
  // fsyncs the partial directory and renames it to `out`; an existing `out` is exchanged in one step
  // (renameat2 RENAME_EXCHANGE) and then removed (where the file system cannot exchange, it is moved
  // aside first). Throws IoError naming `out`.
  void commit();

 private:
  std::filesystem::path out_, tmp_;
  bool committed_ = false;
};

}  // namespace latentllm::core

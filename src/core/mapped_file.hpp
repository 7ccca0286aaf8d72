// Read-only memory-mapped file (RAII). Empty files map to an empty span.
#pragma once

#include "latentllm/files.hpp"

#include <cstddef>
#include <filesystem>
#include <memory>
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
  // Drops the pages of [p, p + n) (a range inside bytes(), widened to whole pages) from this process:
  // madvise(MADV_DONTNEED). The mapping is read-only and file-backed, so nothing is lost: a later read
  // faults the page in again from the page cache or the disk. Pages read to widen a tensor otherwise
  // stay in this process's resident set (and in ru_maxrss) until the file is unmapped. Best effort:
  // a failing madvise changes nothing but the resident set, so it is ignored.
  void drop_pages(const std::byte* p, std::size_t n) const;
  const std::filesystem::path& path() const { return path_; }
  // drop_pages for a range of some read-only file mapping whose MappedFile is not at hand (a Matrix16
  // view of a checkpoint): only the whole pages inside [p, p + n) are dropped, so no byte outside the
  // range is touched. Never for anonymous memory, whose dropped pages would read as zeros.
  static void drop_pages_within(const void* p, std::size_t n);

 private:
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// A private anonymous copy of the n bytes at src, 2 MiB-aligned and advised for transparent huge pages
// (madvise MADV_HUGEPAGE; best effort: without THP it is ordinary memory). Decoding streams every
// weight once per token: the page cache maps a checkpoint in 4 KiB pages, and their TLB misses cost
// the GEMV part of its bandwidth (bench/results/decode). Freed with the last shared_ptr. std::bad_alloc
// when the memory cannot be had.
std::shared_ptr<const std::byte> copy_to_huge_pages(const void* src, std::size_t n);

}  // namespace latentllm::core

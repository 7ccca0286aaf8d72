#include "core/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>

#include "latentllm/error.hpp"

namespace latentllm::core {

namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;

// fd's first n bytes mapped read-only at a 2 MiB-aligned address, advised for transparent huge pages:
// file offsets and addresses then agree modulo 2 MiB, so the kernel can map the page cache's 2 MiB
// folios with one page-table entry each (and reads them ahead in such folios). Decoding streams every
// weight per token, and 4 KiB mappings cost it TLB misses (bench/results/decode). Best effort: the
// advice changes nothing but speed. MAP_FAILED with errno when the mapping fails.
void* map_aligned(int fd, std::size_t n) {
  // Reserve n + 2 MiB of address space, map the file over its first aligned address, free the rest.
  void* reserve = ::mmap(nullptr, n + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserve == MAP_FAILED) return MAP_FAILED;
  const auto begin = reinterpret_cast<std::uintptr_t>(reserve);
  const std::uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  void* p = ::mmap(reinterpret_cast<void*>(aligned), n, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::munmap(reserve, n + kHugePage);
    errno = err;
    return MAP_FAILED;
  }
  if (aligned > begin) ::munmap(reserve, aligned - begin);
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t end = aligned + (n + page - 1) / page * page, reserve_end = begin + n + kHugePage;
  if (reserve_end > end) ::munmap(reinterpret_cast<void*>(end), reserve_end - end);
  ::madvise(p, n, MADV_HUGEPAGE);
  return p;
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(fmt::format("{}: cannot open ({})", path.string(), std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(fmt::format("{}: not a regular file", path.string()));
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    void* p = map_aligned(fd, size_);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw IoError(fmt::format("{}: cannot map ({})", path.string(), std::strerror(err)));
    }
    data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);
}

void MappedFile::drop_pages(const std::byte* p, std::size_t n) const {
  if (data_ == nullptr || n == 0 || p < data_ || p + n > data_ + size_) return;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(p) / page * page;
  const auto end = std::min(reinterpret_cast<std::uintptr_t>(data_ + size_),
                            (reinterpret_cast<std::uintptr_t>(p + n) + page - 1) / page * page);
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void MappedFile::drop_pages_within(const void* p, std::size_t n) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(p);
  const auto begin = (first + page - 1) / page * page, end = (first + n) / page * page;
  if (n > 0 && begin < end) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

std::shared_ptr<const std::byte> copy_to_huge_pages(const void* src, std::size_t n) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t size = std::max<std::size_t>((n + kHuge - 1) / kHuge * kHuge, kHuge);
  // Over-map by one huge page and trim, so that the copy starts on a 2 MiB boundary.
  void* raw = ::mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto begin = reinterpret_cast<std::uintptr_t>(raw), aligned = (begin + kHuge - 1) / kHuge * kHuge;
  if (aligned > begin) ::munmap(raw, aligned - begin);
  if (const std::uintptr_t tail = begin + size + kHuge - (aligned + size); tail > 0) {
    ::munmap(reinterpret_cast<void*>(aligned + size), tail);
  }
  auto* p = reinterpret_cast<std::byte*>(aligned);
  ::madvise(p, size, MADV_HUGEPAGE);
  if (n > 0) std::memcpy(p, src, n);
  return {p, [size](const std::byte* q) { ::munmap(const_cast<std::byte*>(q), size); }};
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw IoError(fmt::format("{}: is a directory (expected a file)", path.string()));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("{}: cannot open ({})", path.string(), std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError(fmt::format("{}: read failed", path.string()));
  return ss.str();
}

void write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> data) {
  const std::string tmp = path.string() + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(fmt::format("{}: cannot create ({})", tmp, std::strerror(errno)));
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw IoError(fmt::format("{}: write failed ({})", path.string(), std::strerror(err)));
    }
    off += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("{}: write failed ({})", path.string(), std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("{}: cannot rename into place ({})", path.string(), std::strerror(err)));
  }
}

}  // namespace latentllm::core

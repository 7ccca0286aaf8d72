// SafetensorsWriter: write_safetensors' layout (the same header and encoding helpers, so the same
// bytes), written tensor by tensor through a fixed buffer, for checkpoints larger than memory.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "io/safetensors_header.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"

namespace latentllm::io {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

constexpr std::size_t kBufferBytes = std::size_t{8} << 20;

// "[i]" for a vector, "[i, j, ...]" for the multi-index of flat element `flat` in `shape`.
std::string element_index(std::span<const std::int64_t> shape, std::uint64_t flat) {
  std::vector<std::uint64_t> idx(shape.size(), 0);
  for (std::size_t k = shape.size(); k-- > 0;) {
    const auto d = static_cast<std::uint64_t>(shape[k]);
    if (k == 0 || d == 0) {
      idx[k] = flat;
      break;
    }
    idx[k] = flat % d;
    flat /= d;
  }
  if (idx.empty()) idx.push_back(flat);  // a scalar: shape []
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

}  // namespace

struct SafetensorsWriter::Impl {
  std::filesystem::path path;
  std::string origin;                        // path.string(), the prefix of every message
  std::string tmp;                           // <path>.tmp.<pid>
  std::vector<TensorSpec> specs;
  std::vector<std::uint64_t> numel;          // [n_tensors]
  std::uint64_t file_bytes = 0;
  std::uint64_t written = 0;                 // bytes passed to write(2)
  std::size_t current = 0;                   // the tensor being filled
  std::uint64_t filled = 0;                  // its values so far
  int fd = -1;
  bool closed = false;                       // finished or failed
  std::vector<std::byte> buf;                // [kBufferBytes] pending output
  std::size_t buf_used = 0;

  // Closes and removes the temporary after a failure; the writer is unusable from then on.
  [[noreturn]] void fail(const std::string& what, int err) {
    if (fd >= 0) ::close(fd);
    fd = -1;
    ::unlink(tmp.c_str());
    closed = true;
    throw IoError(fmt::format("{}: {} ({})", origin, what, std::strerror(err)));
  }

  void check_open() const {
    if (closed) {
      throw IoError(fmt::format("{}: writer closed (expected an open writer, got one that finished or failed)",
                                origin));
    }
  }

  void flush() {
    std::size_t off = 0;
    while (off < buf_used) {
      const ssize_t n = ::write(fd, buf.data() + off, buf_used - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("write failed", errno);
      }
      off += static_cast<std::size_t>(n);
      written += static_cast<std::uint64_t>(n);
    }
    buf_used = 0;
  }

  void put(const void* data, std::size_t n) {
    const auto* p = static_cast<const std::byte*>(data);
    while (n > 0) {
      const std::size_t k = std::min(n, buf.size() - buf_used);
      std::memcpy(buf.data() + buf_used, p, k);
      buf_used += k;
      p += k;
      n -= k;
      if (buf_used == buf.size()) flush();
    }
  }

  // Skips complete tensors (and empty ones) so `current` is the next one needing values.
  void advance() {
    while (current < specs.size() && filled == numel[current]) {
      ++current;
      filled = 0;
    }
  }

  // A finite value that F16/BF16 would store as ±Inf is refused (NaN and ±Inf pass unchanged, as in
  // checkpoint::save): a silently broken model otherwise.
  void check_representable(const TensorSpec& t, std::span<const float> values) const {
    if (t.dtype == DType::F32) return;
    const float limit = t.dtype == DType::F16 ? 65504.0f : bf16_to_f32(0x7f7f);  // the largest finite value
    const float inf = std::numeric_limits<float>::infinity();
    bool any = false;  // a finite value beyond the limit (one vectorized pass; rarely true)
    for (const float x : values) any |= (std::abs(x) > limit) & (std::abs(x) < inf);
    if (!any) return;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float x = values[i];
      if (!std::isfinite(x) || std::abs(x) <= limit) continue;
      const float back = t.dtype == DType::F16 ? f16_to_f32(f32_to_f16(x)) : bf16_to_f32(f32_to_bf16(x));
      if (std::isfinite(back)) continue;  // rounds down to the largest finite value
      throw NumericError(fmt::format("{}: tensor {}: value at {} overflows {} (expected |x| <= {:g}, got {:g})", origin,
                                     t.name, element_index(t.shape, filled + i), dtype_name(t.dtype), limit, x));
    }
  }

  void encode(DType dtype, std::span<const float> values) {
    const std::size_t esize = dtype_size(dtype);
    while (!values.empty()) {
      const std::size_t k = std::min(values.size(), (buf.size() - buf_used) / esize);
      detail::encode_values(dtype, values.first(k), buf.data() + buf_used);
      buf_used += k * esize;
      values = values.subspan(k);
      if (buf.size() - buf_used < esize) flush();
    }
  }
};

SafetensorsWriter::SafetensorsWriter(const std::filesystem::path& path, std::vector<TensorSpec> specs,
                                     const std::map<std::string, std::string>& metadata)
    : impl_(std::make_unique<Impl>()) {
  Impl& w = *impl_;
  w.path = path;
  w.origin = path.string();
  std::set<std::string> seen;
  std::vector<detail::HeaderEntry> entries;  // names, dtypes, shapes, data offsets
  std::uint64_t data_size = 0;
  for (const auto& t : specs) {
    detail::check_tensor_name(t.name, seen, w.origin);
    const std::uint64_t nbytes = detail::checked_nbytes(t.name, t.dtype, t.shape, w.origin);
    std::uint64_t end = 0;
    if (__builtin_add_overflow(data_size, nbytes, &end)) {  // its end offset would not fit in 64 bits
      throw FormatError(fmt::format("{}: tensor {}: shape [{}] (expected non-negative dimensions with a 64-bit size)",
                                    w.origin, t.name, fmt::join(t.shape, ", ")));
    }
    entries.push_back({t.name, t.dtype, t.shape, data_size, end});
    w.numel.push_back(nbytes / dtype_size(t.dtype));
    data_size = end;
  }
  const std::string header = detail::serialize_header(entries, metadata, w.origin);
  w.specs = std::move(specs);
  w.file_bytes = 8 + header.size() + data_size;

  w.tmp = w.origin + ".tmp." + std::to_string(::getpid());
  w.fd = ::open(w.tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd < 0) throw IoError(fmt::format("{}: cannot create ({})", w.tmp, std::strerror(errno)));
  w.buf.resize(kBufferBytes);
  const std::uint64_t n = header.size();
  w.put(&n, 8);  // little-endian (static_assert above)
  w.put(header.data(), header.size());
  w.advance();
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!impl_ || impl_->fd < 0) return;
  ::close(impl_->fd);
  ::unlink(impl_->tmp.c_str());
}

SafetensorsWriter::SafetensorsWriter(SafetensorsWriter&&) noexcept = default;
SafetensorsWriter& SafetensorsWriter::operator=(SafetensorsWriter&& other) noexcept {
  if (this != &other) {
    SafetensorsWriter old(std::move(*this));  // its destructor removes an unfinished temporary
    impl_ = std::move(other.impl_);
  }
  return *this;
}

void SafetensorsWriter::append(std::span<const float> values) {
  Impl& w = *impl_;
  w.check_open();
  if (values.empty()) return;
  if (w.current == w.specs.size()) {
    throw FormatError(fmt::format("{}: values after the last tensor{} (expected none, got {})", w.origin,
                                  w.specs.empty() ? "" : " " + w.specs.back().name, values.size()));
  }
  const TensorSpec& t = w.specs[w.current];
  const std::uint64_t need = w.numel[w.current];
  if (values.size() > need - w.filled) {
    throw FormatError(fmt::format("{}: tensor {}: value count for shape [{}] (expected {}, got {})", w.origin, t.name,
                                  fmt::join(t.shape, ", "), need, w.filled + values.size()));
  }
  w.check_representable(t, values);
  w.encode(t.dtype, values);
  w.filled += values.size();
  w.advance();
}

void SafetensorsWriter::finish() {
  Impl& w = *impl_;
  w.check_open();
  if (w.current < w.specs.size()) {
    const TensorSpec& t = w.specs[w.current];
    throw FormatError(fmt::format("{}: tensor {}: value count for shape [{}] (expected {}, got {})", w.origin, t.name,
                                  fmt::join(t.shape, ", "), w.numel[w.current], w.filled));
  }
  w.flush();
  if (::fsync(w.fd) != 0) w.fail("write failed", errno);
  const int fd = w.fd;
  w.fd = -1;
  if (::close(fd) != 0) w.fail("write failed", errno);
  if (::rename(w.tmp.c_str(), w.path.c_str()) != 0) w.fail("cannot rename into place", errno);
  w.closed = true;
  w.buf = {};
}

const std::filesystem::path& SafetensorsWriter::path() const { return impl_->path; }
std::size_t SafetensorsWriter::current_tensor() const { return impl_->current; }
std::uint64_t SafetensorsWriter::file_bytes() const { return impl_->file_bytes; }
std::uint64_t SafetensorsWriter::bytes_written() const { return impl_->written; }

}  // namespace latentllm::io

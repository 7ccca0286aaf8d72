// Checkpoint I/O: safetensors (single file or sharded), the `latent` section of config.json, and the
// safetensors writers used for latent checkpoints. (config.json's architecture keys are parsed by the
// architecture files: model::load_config.)
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/tensor.hpp"

namespace latentllm::io {

// The `latent` section of a latent checkpoint's config.json (docs/FORMAT.md): which linear modules are
// stored factored, as <name>.B.weight [out, rank] and <name>.A.weight [rank, in] (or [rank, in − rank]
// with a block-identity junction). Read and written in src/io/latent_format.cpp; the writer of the whole
// checkpoint is checkpoint::save (src/format/latent.cpp).
inline constexpr int kLatentFormatVersion = 1;

struct LatentModule {
  std::int64_t rank = 0;           // 0: a dense module stored quantized (bits < 16; no factors)
  std::int64_t in = 0, out = 0;
  bool block_identity = false;
  std::vector<std::int32_t> perm;  // [in] when block_identity
  // Quantized storage (docs/FORMAT.md "Quantized tensors"): q-bit codes in groups of `group` input
  // columns, for both factors (or the dense weight); 16 = stored as floats, no quantization.
  int bits = 16;
  int group = 0;                   // G when bits < 16
  bool quantized() const { return bits < 16; }
};

// Parses config.json's `latent` section (absent -> empty map). Throws FormatError naming the module
// for an invalid entry (rank out of range, perm not a permutation of 0..in−1, bits not 2, 3, 4 or 8,
// a group size that is not a positive multiple of 8, ...).
std::map<std::string, LatentModule> parse_latent_modules(const nlohmann::json& config, const std::string& origin);
// A module's entry of `latent.modules` (rank, in, out, junction, perm with block identity; bits and
// group when quantized, rank omitted for a quantized dense module), as
// parse_latent_modules reads it.
nlohmann::json latent_module_json(const LatentModule& m);

// One memory-mapped safetensors file, fully validated on open (header size cap, JSON, dtypes,
// shape × dtype = byte length, offsets in range, in order, not overlapping, data filling the file).
// Only F32, F16 and BF16 tensors are accepted. The TensorViews point into the mapping and live as
// long as this object.
class SafetensorsFile {
 public:
  // Throws IoError if the file cannot be opened or mapped, FormatError "<path>: [tensor <name>: ]
  // <what> (expected X, got Y)" for any layout violation.
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const;
  const std::vector<TensorView>& tensors() const;   // in file order
  const TensorView* find(const std::string& name) const;  // nullptr if absent
  // The named 2-D tensor widened to float32 ([rows, cols] as stored). FormatError "<path>: tensor
  // <name> (expected a matrix, got none|another shape)".
  MatrixF matrix(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const;  // "__metadata__"
  // Drops the mapped pages holding `t`'s bytes (t one of tensors(); its range widened to whole
  // pages) from this process's resident set, madvise(MADV_DONTNEED): after widening a tensor, its
  // pages need not stay resident. Views stay valid; a later read faults the pages in again.
  void release_pages(const TensorView& t) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// All tensors of a checkpoint directory: model.safetensors, or (when that is absent) the shards listed
// by model.safetensors.index.json, each mapped once. Views stay valid while the store lives (also
// across moves).
class TensorStore {
 public:
  // Throws IoError when the directory has neither file or a listed shard does not exist; FormatError
  // for a malformed index, a weight_map entry missing from its shard, or a tensor stored in two shards.
  static TensorStore open(const std::filesystem::path& dir);
  TensorStore(TensorStore&&) noexcept;
  TensorStore& operator=(TensorStore&&) noexcept;
  ~TensorStore();

  bool has(const std::string& name) const;
  // Throws FormatError "<dir>: missing tensor <name>" when absent.
  const TensorView& get(const std::string& name) const;
  // get() plus a shape check: FormatError "<file>: tensor <name>: shape (expected [a, b], got [c, d])".
  const TensorView& get(const std::string& name, std::span<const std::int64_t> expected_shape) const;
  std::vector<std::string> names() const;  // shard order, then file (offset) order
  const std::filesystem::path& dir() const;
  // Merged "__metadata__" of all files (on a key clash the first shard's value wins).
  const std::map<std::string, std::string>& metadata() const;
  // SafetensorsFile::release_pages of the tensor `name` (FormatError "missing tensor" when absent).
  void release_pages(const std::string& name) const;

 private:
  TensorStore();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A tensor to write, converted from float32 to `dtype` by the writer.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::span<const float> data;  // numel(shape) values, row-major
};

// Writes a safetensors file atomically (temporary name + rename). Tensors are stored in the order
// given, back to back after a header padded with spaces to 8 bytes. Throws FormatError naming the path
// and tensor for invalid input (duplicate or empty names, data.size() != numel(shape)) and IoError
// naming the path when writing fails.
void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

// ---- Streaming safetensors writer (checkpoints larger than memory) ------------------------------

// A tensor declared to SafetensorsWriter; its values arrive later through append().
struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;  // PyTorch order, e.g. a Linear weight [out, in]
};

// Writes one safetensors file tensor by tensor without holding the data. The header (names, dtypes,
// shapes, offsets) is fixed at construction; then append() takes each tensor's values in the declared
// order (row-major floats, in chunks of any size), converted to the tensor's dtype as write_safetensors
// does (round to nearest even for F16/BF16). One append() belongs to one tensor: it holds some or all
// of the values the current tensor still needs, never values of the next one, so a wrong count is
// caught at the tensor it concerns; a tensor is complete once numel(shape) values arrived and the next
// append() goes to the next tensor (empty tensors take none). The bytes are those write_safetensors
// writes for the same tensors and metadata (tests check byte identity). The file is written to the
// temporary `<path>.tmp.<pid>` in the same directory (write_safetensors' temporary) through an 8 MiB
// buffer, the only memory held; finish() fsyncs it and renames it into place. The destructor of a
// writer that did not finish removes the temporary. Not thread-safe.
//
// Errors (docs/ERRORS.md, "Streaming safetensors writer"): the constructor throws FormatError as
// write_safetensors for duplicate, empty or __metadata__ names, negative or 64-bit-overflowing shapes
// and headers that cannot be encoded, and IoError "<path>.tmp.<pid>: cannot create (...)"; append()
// throws FormatError "<path>: tensor <name>: value count for shape [..] (expected N, got M)" when the
// values overrun the current tensor (M = its values so far + values.size()), FormatError "<path>:
// values after the last tensor <name> (expected none, got K)", and NumericError "<path>: tensor <name>:
// value at [i, j] overflows F16 (expected |x| <= 65504, got 7e+04)" for a finite value the dtype would
// store as ±Inf; such a refused append() writes nothing, and the writer stays usable. finish() throws
// the value-count FormatError for the first incomplete tensor. I/O failures throw IoError "<path>:
// write failed (...)" / "<path>: cannot rename into place (...)" and close the writer (temporary
// removed); any later call throws IoError "<path>: writer closed (expected an open writer, got one
// that finished or failed)".
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::filesystem::path& path, std::vector<TensorSpec> specs,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(SafetensorsWriter&&) noexcept;
  SafetensorsWriter& operator=(SafetensorsWriter&&) noexcept;
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends values of the current tensor (see above).
  void append(std::span<const float> values);
  // Checks that every tensor is complete, flushes, fsyncs, closes and renames into place.
  void finish();

  const std::filesystem::path& path() const;
  // Index of the tensor the next append() feeds (= the number of tensors once all are complete).
  std::size_t current_tensor() const;
  // Bytes of the whole file (8 + header + data) and those already passed to the OS (buffered ones not).
  std::uint64_t file_bytes() const;
  std::uint64_t bytes_written() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
// ---- end of the streaming writer ----------------------------------------------------------------

// A nesting limit for JSON read from files or requests: nlohmann's parser is iterative, but copying,
// dumping and comparing a document recurse once per level. Far beyond any Hugging Face file (they nest
// fewer than 10 levels), far below a stack overflow.
inline constexpr int kMaxJsonDepth = 64;
// Scans `text` (before parsing it) and throws FormatError "<origin>: JSON nesting too deep (expected at
// most 64 levels, got more at byte N)". Brackets inside strings do not count; malformed text is left
// for the parser to report.
void check_json_depth(std::string_view text, const std::string& origin, int max_depth = kMaxJsonDepth);

}  // namespace latentllm::io

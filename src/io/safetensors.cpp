// SafetensorsFile (one memory-mapped, validated file) and TensorStore (a checkpoint directory:
// model.safetensors or the shards of model.safetensors.index.json).
#include <algorithm>
#include <system_error>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.hpp"
#include "io/json_depth.hpp"
#include "io/safetensors_header.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"

namespace latentllm::io {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

struct SafetensorsFile::Impl {
  core::MappedFile file;
  std::vector<TensorView> tensors;                    // file order
  std::unordered_map<std::string, std::size_t> index;  // name -> position in tensors
  std::map<std::string, std::string> metadata;

  explicit Impl(const fs::path& path) : file(path) {}
};

SafetensorsFile::SafetensorsFile(const fs::path& path) : impl_(std::make_unique<Impl>(path)) {
  const auto bytes = impl_->file.bytes();
  auto layout = detail::parse_safetensors_layout(bytes, path.string());
  // Validated: every [begin, end) lies inside the data region that starts after the header.
  const std::byte* data = bytes.data() + 8 + layout.header_size;
  impl_->tensors.reserve(layout.tensors.size());
  for (auto& e : layout.tensors) {
    impl_->index.emplace(e.name, impl_->tensors.size());
    impl_->tensors.push_back(TensorView{std::move(e.name), e.dtype, std::move(e.shape), data + e.begin,
                                        static_cast<std::size_t>(e.end - e.begin)});
  }
  impl_->metadata = std::move(layout.metadata);
}

SafetensorsFile::~SafetensorsFile() = default;

const fs::path& SafetensorsFile::path() const { return impl_->file.path(); }
const std::vector<TensorView>& SafetensorsFile::tensors() const { return impl_->tensors; }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return impl_->metadata; }

void SafetensorsFile::release_pages(const TensorView& t) const { impl_->file.drop_pages(t.data, t.nbytes); }

const TensorView* SafetensorsFile::find(const std::string& name) const {
  const auto it = impl_->index.find(name);
  return it == impl_->index.end() ? nullptr : &impl_->tensors[it->second];
}

// ---------------------------------------------------------------------------------------------
// TensorStore

struct TensorStore::Impl {
  struct Location {
    const TensorView* view;
    const SafetensorsFile* file;
  };
  fs::path dir;
  std::vector<std::unique_ptr<SafetensorsFile>> files;  // heap-held: views stay put when the store moves
  std::unordered_map<std::string, Location> by_name;
  std::vector<std::string> order;  // shard order, then file order
  std::map<std::string, std::string> metadata;

  void add_file(std::unique_ptr<SafetensorsFile> f);
  void open_sharded(const fs::path& index_path);
  const Location& locate(const std::string& name) const;
};

MatrixF SafetensorsFile::matrix(const std::string& name) const {
  const TensorView* t = find(name);
  if (!t || t->shape.size() != 2) {
    throw FormatError(fmt::format("{}: tensor {} (expected a matrix, got {})", path().string(), name,
                                  t ? "another shape" : "none"));
  }
  MatrixF m(t->shape[0], t->shape[1]);
  t->to_f32(std::span<float>(m.data(), static_cast<std::size_t>(m.size())));
  return m;
}

void TensorStore::Impl::add_file(std::unique_ptr<SafetensorsFile> f) {
  for (const auto& t : f->tensors()) {
    const auto [it, inserted] = by_name.emplace(t.name, Location{&t, f.get()});
    if (!inserted) {
      throw FormatError(fmt::format("{}: tensor {} stored twice (in {} and {})", dir.string(), t.name,
                                    it->second.file->path().string(), f->path().string()));
    }
    order.push_back(t.name);
  }
  for (const auto& [k, v] : f->metadata()) metadata.emplace(k, v);  // the first file's value wins
  files.push_back(std::move(f));
}

namespace {

// weight_map of an index file, grouped by shard: shard file name -> tensor names it must hold.
std::map<std::string, std::vector<std::string>> read_weight_map(const fs::path& index_path) {
  const std::string origin = index_path.string();
  const std::string text = core::read_file(index_path);
  check_json_depth(text, origin);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw FormatError(fmt::format("{}: not valid JSON ({})", origin, e.what()));
  }
  const auto wm = doc.is_object() ? doc.find("weight_map") : doc.end();
  if (!doc.is_object() || wm == doc.end() || !wm->is_object() || wm->empty()) {
    throw FormatError(fmt::format("{}: weight_map (expected a non-empty object mapping tensor names to shard files)",
                                  origin));
  }
  std::map<std::string, std::vector<std::string>> shards;
  for (const auto& [name, file] : wm->items()) {
    // Shards live beside the index: a bare file name, never a path that could leave the directory.
    const bool bare = file.is_string() && !file.get_ref<const std::string&>().empty() &&
                      fs::path(file.get<std::string>()).filename() == file.get<std::string>() &&
                      file.get<std::string>() != "." && file.get<std::string>() != "..";
    if (!bare) {
      throw FormatError(fmt::format("{}: weight_map.{} (expected a shard file name in the same directory, got {})",
                                    origin, name, file.dump()));
    }
    shards[file.get<std::string>()].push_back(name);
  }
  return shards;
}

}  // namespace

void TensorStore::Impl::open_sharded(const fs::path& index_path) {
  for (const auto& [shard, names] : read_weight_map(index_path)) {
    const fs::path path = dir / shard;
    if (!is_file(path)) {
      throw IoError(fmt::format("{}: shard {} (listed for tensor {}) does not exist", index_path.string(),
                                path.string(), names.front()));
    }
    auto f = std::make_unique<SafetensorsFile>(path);
    for (const auto& n : names) {
      if (f->find(n) == nullptr) {
        throw FormatError(fmt::format("{}: tensor {} listed in weight_map is missing from shard {}",
                                      index_path.string(), n, path.string()));
      }
    }
    add_file(std::move(f));
  }
}

const TensorStore::Impl::Location& TensorStore::Impl::locate(const std::string& name) const {
  const auto it = by_name.find(name);
  if (it == by_name.end()) throw FormatError(fmt::format("{}: missing tensor {}", dir.string(), name));
  return it->second;
}

TensorStore::TensorStore() : impl_(std::make_unique<Impl>()) {}
TensorStore::TensorStore(TensorStore&&) noexcept = default;
TensorStore& TensorStore::operator=(TensorStore&&) noexcept = default;
TensorStore::~TensorStore() = default;

TensorStore TensorStore::open(const fs::path& dir) {
  TensorStore s;
  s.impl_->dir = dir;
  // As transformers does: a single file takes precedence over an index.
  if (is_file(dir / kSingleFile)) {
    s.impl_->add_file(std::make_unique<SafetensorsFile>(dir / kSingleFile));
  } else if (is_file(dir / kIndexFile)) {
    s.impl_->open_sharded(dir / kIndexFile);
  } else {
    throw IoError(fmt::format("{}: no {} or {} (expected a Hugging Face checkpoint directory)", dir.string(),
                              kSingleFile, kIndexFile));
  }
  return s;
}

bool TensorStore::has(const std::string& name) const { return impl_->by_name.count(name) != 0; }

const TensorView& TensorStore::get(const std::string& name) const { return *impl_->locate(name).view; }

const TensorView& TensorStore::get(const std::string& name, std::span<const std::int64_t> expected_shape) const {
  const auto& loc = impl_->locate(name);
  const auto& shape = loc.view->shape;
  if (!std::equal(shape.begin(), shape.end(), expected_shape.begin(), expected_shape.end())) {
    throw FormatError(fmt::format("{}: tensor {}: shape (expected [{}], got [{}])", loc.file->path().string(), name,
                                  fmt::join(expected_shape, ", "), fmt::join(shape, ", ")));
  }
  return *loc.view;
}

void TensorStore::release_pages(const std::string& name) const {
  const auto& loc = impl_->locate(name);
  loc.file->release_pages(*loc.view);
}

std::vector<std::string> TensorStore::names() const { return impl_->order; }
const fs::path& TensorStore::dir() const { return impl_->dir; }
const std::map<std::string, std::string>& TensorStore::metadata() const { return impl_->metadata; }

}  // namespace latentllm::io

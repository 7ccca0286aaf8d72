// Fetches named weights from a checkpoint for the architecture files: resolves aliases (tied
// embeddings, safetensors "__metadata__" renames), checks shapes against the config and values for
// finiteness, widens to float32, and builds Linear modules (dense, or factored from the `latent`
// section of a latent checkpoint, docs/FORMAT.md). The mapped pages of a widened tensor are dropped
// from the process right after (TensorStore::release_pages): the float32 copy is what the model uses.
//
// Lazy models (model::LoadOptions) keep the store and this loader (WeightSource) to widen a layer
// later; at load they run each layer's construction in `checking` mode, which checks every tensor's
// presence and shape, widens nothing and returns empty weights, so a bad checkpoint fails at load.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/latent_format.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"
#include "model/weight_table.hpp"

namespace latentllm::model {

class WeightLoader {
 public:
  WeightLoader(const io::TensorStore& store, std::map<std::string, io::LatentModule> latent);

  // True when `name` (or its metadata alias) is stored.
  bool has(const std::string& name) const;
  // True when some stored tensor name starts with `prefix`.
  bool has_prefix(const std::string& prefix) const;
  // The stored name of a tensor: itself, or the name "__metadata__" maps it to (TinyStories-656K
  // stores model.embed_tokens.weight as lm_head.weight). Throws FormatError when neither exists.
  std::string resolve(const std::string& name) const;

  // [rows, cols] float copy. FormatError when missing or of another shape, NumericError when not finite.
  MatrixF matrix(const std::string& name, std::int64_t rows, std::int64_t cols) const;
  // A tensor stored with `shape` as a [rows, cols] float copy (rows·cols its values, row-major), e.g. a
  // convolution weight [out, C, kh, kw] as [out, C·kh·kw]; the checks of matrix().
  MatrixF matrix_of(const std::string& name, std::initializer_list<std::int64_t> shape, std::int64_t rows,
                    std::int64_t cols) const;
  // [rows, cols] F16/BF16 kept as stored: a view into the mapping (an owned copy when its bytes are not
  // 2-byte aligned); the checks of matrix(). The tensor must be F16 or BF16 (is16).
  Matrix16 matrix16(const std::string& name, std::int64_t rows, std::int64_t cols) const;
  // True when the tensor `name` is stored as F16 or BF16.
  bool is16(const std::string& name) const;
  // [n] float copy; same checks.
  VectorF vector(const std::string& name, std::int64_t n) const;
  // [rows, cols] embedding or LM head: a float copy (as matrix()), or with `lazy` (set_lazy) the
  // mapped tensor, widened on use (WeightTable).
  WeightTable table(const std::string& name, std::int64_t rows, std::int64_t cols) const;
  // The quantized table of `module` ("lm_head", compress --head-bits) when the latent section lists it
  // as a dense quantized module: its packed codes, read and validated (quant::read_packed) even in
  // checking mode, since the forward holds them; nullopt when not listed so (FormatError as read_packed
  // for codes of another shape).
  std::optional<WeightTable> packed_table(const std::string& module, std::int64_t rows, std::int64_t cols);
  // The linear module `module` ("model.layers.0.self_attn.q_proj") of shape [out, in], with a bias
  // if has_bias; factored when the latent section lists it. With set_stored, its F16/BF16 matrices are
  // kept as stored (16-bit Linear weights: Weight::half()).
  Linear linear(const std::string& module, std::int64_t in, std::int64_t out, bool has_bias);
  // Throws FormatError naming a latent module no architecture file asked for; modules under the
  // `skip` prefixes are another loader's (a LLaVA checkpoint's vision tower and projector).
  void check_latent_used(const std::vector<std::string>& skip = {}) const;
  // Throws FormatError naming the first stored tensors nothing asked for (LoadOptions::allow_unused_tensors),
  // apart from the known-ignorable buffers; with `within`, only the stored names under those prefixes
  // (the language model of a multimodal checkpoint, whose other parts another loader reads).
  void check_tensors_used(const std::vector<std::string>& within = {}) const;

  const std::filesystem::path& dir() const { return store_.dir(); }

  // Key-prefix mapping, set once at load (a checkpoint's layout quirk normalised like CTranslate2's
  // loaders do): a name starting with a rule's `from` is looked up as `to` + the rest, so the language
  // model of a LLaVA checkpoint asks for its usual HF names ("model.norm.weight") and gets
  // "language_model.model.norm.weight". The first matching rule applies; names no rule matches are
  // looked up as they are.
  struct PrefixRule {
    std::string from, to;
  };
  void set_prefix_rules(std::vector<PrefixRule> rules) { rules_ = std::move(rules); }
  const std::vector<PrefixRule>& prefix_rules() const { return rules_; }
  // The checkpoint name a requested name maps to (itself without rules).
  std::string stored_name(const std::string& name) const;

  // Checking mode (see the top): matrix(), vector() and linear() check names and shapes and return
  // empty weights.
  void set_checking(bool on) { checking_ = on; }
  // In checking mode, also widen each matrix and vector to a temporary and check it is finite (one
  // tensor in memory at a time): LoadOptions::scan_finite.
  void set_scan(bool on) { scan_ = on; }
  // table() returns mapped tables.
  void set_lazy(bool on) { lazy_ = on; }
  // linear() keeps F16/BF16 matrices as stored (LoadOptions::Weights::Stored); the bytes counted for
  // them and for the tables are then the stored ones.
  void set_stored(bool on) { stored_ = on; }
  // With set_stored on an eager model: 16-bit matrices and tables of at least min_bytes are copies in
  // huge pages (LoadOptions::huge_pages), their mapped pages dropped.
  void set_huge_pages(std::int64_t min_bytes) {
    huge_pages_ = true;
    huge_min_bytes_ = min_bytes;
  }
  // Float32 bytes of the largest set of 16-bit matrices one linear() gave since the last call: what
  // the forward widens at once (a 16-bit Linear weight, or its A and B).
  std::int64_t take_largest_widened();
  // Drops the mapped pages of l's 16-bit views (a released layer of a lazy model).
  void release_pages(const Linear& l) const;
  // A quantized matrix of `module` (its dense weight or a factor, [rows, cols]) from its three stored
  // tensors, validated by quant::read_packed (FormatError naming the tensor); nullptr in checking mode.
  std::shared_ptr<const quant::PackedMatrix> packed(const std::string& module, io::Factor f, std::int64_t rows,
                                                    std::int64_t cols, const io::LatentModule& lm) const;
  // Float32 bytes of the matrices and vectors asked for since the last call (checking mode included):
  // what they take once widened.
  std::int64_t take_counted_bytes();
  // Float32 bytes of the tables asked for so far (widened or not).
  std::int64_t table_bytes() const { return table_bytes_; }
  // Stored bytes of the largest matrix or vector asked for since the last call.
  std::int64_t take_largest_stored();
  // Stored bytes of the largest table asked for so far.
  std::int64_t largest_table_stored() const { return largest_table_stored_; }

 private:
  const TensorView& view(const std::string& name, std::initializer_list<std::int64_t> shape) const;
  // packed() without the checking mode's shortcut: always the matrix.
  std::shared_ptr<const quant::PackedMatrix> read_packed(const std::string& module, io::Factor f, std::int64_t rows,
                                                         std::int64_t cols, const io::LatentModule& lm) const;
  // The tensor t (F16 or BF16, [rows, cols]) copied into huge pages; its mapped pages dropped.
  Matrix16 huge_copy(const TensorView& t, std::int64_t rows, std::int64_t cols) const;

  const io::TensorStore& store_;
  std::vector<PrefixRule> rules_;
  std::map<std::string, io::LatentModule> latent_;
  std::set<std::string> latent_used_;
  mutable std::set<std::string> used_;  // stored names resolved so far
  bool checking_ = false, lazy_ = false, scan_ = false, stored_ = false, huge_pages_ = false;
  std::int64_t huge_min_bytes_ = 0;
  mutable std::map<std::string, Matrix16> huge_tables_;  // stored name → its copy: a tied embedding and head share it
  mutable std::int64_t counted_bytes_ = 0, table_bytes_ = 0, largest_stored_ = 0, largest_table_stored_ = 0;
  std::int64_t largest_widened_ = 0;
};

// The open checkpoint of a lazy model: the mapped tensors and the loader that widens a layer from them.
struct WeightSource {
  io::TensorStore store;
  WeightLoader loader;
  // Opens dir's safetensors, then parses config's `latent` section (origin names config.json).
  WeightSource(const std::filesystem::path& dir, const nlohmann::json& config, const std::string& origin)
      : store(io::TensorStore::open(dir)), loader(store, io::parse_latent_modules(config, origin)) {}
};

}  // namespace latentllm::model

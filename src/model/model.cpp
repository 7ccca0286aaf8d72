// Model::load (dispatch on the architecture), the windowed NLL used by perplexity, parameter
// accounting and the forward profiler.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <utility>

#include "core/enum_names.hpp"
#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "model/arch.hpp"
#include "model/head.hpp"
#include "model/weights.hpp"
#include "core/parallel.hpp"
#include "model/profile.hpp"

namespace latentllm::model {
namespace {

namespace fs = std::filesystem;

ForwardProfile g_profile;
bool g_profiling = false;

}  // namespace

void Model::layer_forward(int i, MatrixF& h, int T, ForwardObserver* obs) const {
  LayerState s;
  s.resid.swap(h);
  try {
    layer_resume(i, s, T, obs);
  } catch (...) {
    h.swap(s.resid);  // unchanged when the layer threw before its first residual add
    throw;
  }
  h.swap(s.resid);
}

Model::~Model() = default;

std::string Model::stored_name(const std::string& name) const {
  for (const auto& [asked, stored] : stored_prefixes_)
    if (name.starts_with(asked)) return stored + name.substr(asked.size());
  return name;
}

std::string Model::module_name(const std::string& stored) const {
  for (const auto& [asked, prefix] : stored_prefixes_)
    if (stored.starts_with(prefix)) return asked + stored.substr(prefix.size());
  return stored;
}

DecoderLayer& Model::layer(int i) { return const_cast<DecoderLayer&>(std::as_const(*this).layer(i)); }

const DecoderLayer& Model::layer(int i) const {
  const DecoderLayer& L = layers_.at(static_cast<std::size_t>(i));
  if (!loaded_[static_cast<std::size_t>(i)]) {
    throw Error(fmt::format("{}: layer {} is not loaded (expected load_layer({}) before using it in a lazy model)",
                            dir_.string(), i, i));
  }
  return L;
}

const DecoderLayer& Model::layer_spec(int i) const {
  const auto k = static_cast<std::size_t>(i);
  return loaded_.at(k) ? layers_[k] : specs_.at(k);
}

void Model::init_layers(std::shared_ptr<WeightSource> source, const LoadOptions& opt) {
  const bool lazy = opt.lazy;
  WeightLoader& w = source->loader;
  footprint_.weights = opt.weights;
  footprint_.tables = w.table_bytes();
  footprint_.other = w.take_counted_bytes();
  footprint_.largest_table_stored = w.largest_table_stored();
  w.take_largest_stored();
  const int n = static_cast<int>(config_.num_hidden_layers);
  layers_.resize(static_cast<std::size_t>(n));
  loaded_.assign(static_cast<std::size_t>(n), lazy ? 0 : 1);
  w.set_checking(lazy);  // lazy: check names and shapes now, widen later
  for (int i = 0; i < n; ++i) {
    DecoderLayer L = build_layer(w, i);
    if (lazy) specs_.push_back(std::move(L));
    else layers_[static_cast<std::size_t>(i)] = std::move(L);
    footprint_.layers.push_back(w.take_counted_bytes());
  }
  w.set_checking(false);
  footprint_.largest_layer_tensor_stored = w.take_largest_stored();
  footprint_.largest_widened = w.take_largest_widened();
  if (lazy) {
    source_ = std::move(source);
  } else if (opt.weights == LoadOptions::Weights::Stored) {
    mapped_ = std::move(source);
  }
}

void Model::adopt_layers(std::vector<DecoderLayer> layers) {
  layers_ = std::move(layers);
  loaded_.assign(layers_.size(), 1);
  specs_.clear();
  footprint_ = WeightFootprint{};
  for (const DecoderLayer& L : layers_) {
    std::int64_t bytes = 0;
    for (const Linear& l : L.linears)
      bytes += l.bytes();
    for (const auto& [name, v] : L.norms) bytes += 4 * v.size();
    footprint_.layers.push_back(bytes);
  }
}

std::vector<DecoderLayer> Model::take_layers() {
  std::vector<DecoderLayer> out = std::move(layers_);
  layers_.clear();
  loaded_.clear();
  return out;
}

void Model::load_layer(int i) {
  if (layer_loaded(i)) return;
  WeightLoader& w = source_->loader;
  DecoderLayer L = build_layer(w, i);
  w.take_counted_bytes();
  layers_[static_cast<std::size_t>(i)] = std::move(L);
  loaded_[static_cast<std::size_t>(i)] = 1;
}

void Model::release_layer(int i) {
  if (!lazy()) {
    throw Error(fmt::format("{}: release_layer({}) on an eager model (expected a model loaded with "
                            "LoadOptions::lazy, got one that cannot load it again)", dir_.string(), i));
  }
  for (const Linear& l : layers_.at(static_cast<std::size_t>(i)).linears) source_->loader.release_pages(l);
  layers_.at(static_cast<std::size_t>(i)) = DecoderLayer{};
  loaded_[static_cast<std::size_t>(i)] = 0;
}

namespace {
constexpr auto kWeightsNames = core::enum_names<LoadOptions::Weights>(
    core::Named<LoadOptions::Weights>{LoadOptions::Weights::F32, "f32"},
    core::Named<LoadOptions::Weights>{LoadOptions::Weights::Stored, "stored"});
}  // namespace

std::string_view weights_name(LoadOptions::Weights w) { return kWeightsNames.name(w); }

LoadOptions::Weights parse_weights(std::string_view s) { return kWeightsNames.parse(s, "--weights (expected {}, got {})"); }

std::int64_t WeightFootprint::largest_layer() const {
  std::int64_t m = 0;
  for (auto b : layers) m = std::max(m, b);
  return m;
}

std::int64_t WeightFootprint::all_layers() const {
  std::int64_t t = 0;
  for (auto b : layers) t += b;
  return t;
}

double Model::windows_nll(std::span<const std::int32_t> ids, int T) const {
  if (T < 2 || ids.empty() || ids.size() % static_cast<std::size_t>(T) != 0) {
    throw ConfigError(fmt::format("windows_nll: token count {} is not a positive multiple of the window {} (>= 2)",
                                  ids.size(), T));
  }
  MatrixF h;  // [n_seq·T, d]
  embed(ids, T, h);
  for (int i = 0; i < num_layers(); ++i) layer_forward(i, h, T);
  return head_nll(h, ids, T);
}

double Model::head_nll(const MatrixF& h, std::span<const std::int32_t> ids, int T) const {
  if (T < 2 || static_cast<std::size_t>(h.rows()) != ids.size() || h.rows() % T != 0) {
    throw ConfigError(fmt::format("head_nll: {} hidden rows for {} ids (expected equal, a multiple of the window {} "
                                  ">= 2)", h.rows(), ids.size(), T));
  }
  MatrixF x;  // [n, p] the head's input
  final_hidden(h, x);
  const std::int64_t n = h.rows();
  // Row r predicts ids[r + 1] within its window; the last row of a window predicts nothing.
  std::vector<std::int32_t> targets(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < n; ++r)
    targets[static_cast<std::size_t>(r)] = r % T == T - 1 ? -1 : ids[static_cast<std::size_t>(r + 1)];
  std::vector<double> nll(static_cast<std::size_t>(n), 0.0);  // [n]
  const WeightTable& w = lm_head();                           // [V, p]
  const bool prof = detail::profile_active();
  HeadCpuTimes cpu;
  const auto t0 = std::chrono::steady_clock::now();
  fused_head_nll(x, w, targets, nll, prof ? &cpu : nullptr);
  if (prof) {
    // Wall time of the fused head, split between its GEMMs and its log-sum-exp by their CPU time.
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double share = cpu.gemm / std::max(cpu.gemm + cpu.lse, 1e-12);
    auto& p = detail::profile_sink();
    p.head_s += wall * share;
    p.nll_s += wall * (1.0 - share);
    p.head_flops += 2.0 * static_cast<double>(w.size()) * static_cast<double>(n);
  }
  double total = 0;
  for (double v : nll) total += v;
  if (!std::isfinite(total)) throw NumericError(fmt::format("{}: non-finite NLL", dir_.string()));
  return total;
}

EmbedAndHead load_embed_and_head(WeightLoader& w, const std::string& embed_name, const std::string& head_name,
                                 std::int64_t V, std::int64_t p, bool tie) {
  EmbedAndHead out;
  const bool has_embed = w.has(embed_name), has_head = w.has(head_name);
  const std::string head_module = head_name.substr(0, head_name.rfind('.'));  // "lm_head"
  if (auto q = w.packed_table(head_module, V, p)) {
    // Quantized head: the embedding is the stored float table (tied: whichever of the pair is stored).
    if (!has_embed && !has_head) w.resolve(embed_name);  // throws "missing tensor"
    out.embed = w.table(has_embed || !tie ? embed_name : head_name, V, p);
    out.head = std::move(*q);
    return out;
  }
  if (!tie) {
    // Untied, the head is a parameter of its own: HF would initialise a missing one randomly and run
    // a silently wrong model, so both must be stored.
    if (!has_head) {
      throw FormatError(fmt::format("{}: missing tensor {} (expected with tie_word_embeddings false, got {})",
                                    w.dir().string(), head_name, has_embed ? "only " + embed_name : "neither"));
    }
    out.embed = w.table(embed_name, V, p);  // throws "missing tensor" when absent
    out.head = w.table(head_name, V, p);
    return out;
  }
  if (!has_embed && !has_head) w.resolve(embed_name);  // throws "missing tensor"
  out.embed = w.table(has_embed ? embed_name : head_name, V, p);
  return out;
}

void Model::head(const MatrixF& h, MatrixF& logits) const {
  MatrixF x;  // [n, p]
  final_hidden(h, x);
  const WeightTable& w = lm_head();  // [V, p]
  detail::ProfileScope scope(&ForwardProfile::head_s, &ForwardProfile::head_flops,
                             2.0 * static_cast<double>(w.size()) * static_cast<double>(x.rows()));
  head_logits(x, w, logits);  // [n, V]
}

std::int64_t dim_of(const ModelConfig& c, Dim d) {
  switch (d) {
    case Dim::Hidden: return c.hidden_size;
    case Dim::QHeads: return c.num_attention_heads * c.head_dim;
    case Dim::KvHeads: return c.num_key_value_heads * c.head_dim;
    case Dim::Ffn: return c.ffn_width();
  }
  return 0;
}

std::vector<Linear> load_linears(WeightLoader& w, const std::string& prefix, std::span<const ModuleSpec> table,
                                 const ModelConfig& c) {
  std::vector<Linear> out;
  for (const ModuleSpec& s : table) {
    const bool bias = s.bias == BiasSwitch::Qkv ? c.qkv_bias : s.bias == BiasSwitch::O ? c.o_bias : c.mlp_bias;
    Linear l = w.linear(prefix + std::string(s.rel), dim_of(c, s.in), dim_of(c, s.out), bias);
    l.role = s.role;
    l.site = s.site;
    out.push_back(std::move(l));
  }
  return out;
}

void check_hidden(const MatrixF& h, int T, std::int64_t d, const std::filesystem::path& dir) {
  if (T <= 0 || h.cols() != d || h.rows() % T != 0) {
    throw Error(fmt::format("{}: hidden states [{}, {}] (expected [n_seq·{}, {}])", dir.string(), h.rows(), h.cols(),
                            T, d));
  }
}

void set_profiling(bool enabled) { g_profiling = enabled; }
bool profiling_enabled() { return g_profiling; }
ForwardProfile forward_profile() { return g_profile; }
void reset_forward_profile() { g_profile = ForwardProfile{}; }

namespace detail {
ForwardProfile& profile_sink() { return g_profile; }
bool profile_active() { return g_profiling && !core::in_parallel_region(); }
}  // namespace detail

}  // namespace latentllm::model

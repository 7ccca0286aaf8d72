// `latentllm inspect`: architecture, dimensions, parameters per module type, storage dtype,
// tokenizer, and for latent checkpoints the rank of every factored module.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::cli {
namespace {

struct InspectArgs {
  std::string model, positional;  // --model DIR, or DIR
  bool json = false, allow_unused_tensors = false;
};

// "17,735,936"
std::string grouped(std::int64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

// The compressed modules of a sparse checkpoint (compress --method sparse, wanda, sparsegpt, lowrank-sparse),
// stored dense: their non-zero entries counted in the stored tensors, or, for a module of `parts`
// (latent.sparse_parts of lowrank-sparse, whose stored B·A + D is dense), its recorded rank and non-zeros; and
// the bytes a values + positions format would take (eval::lowrank_sparse_storage_bytes, at rank 0
// eval::sparse_storage_bytes).
nlohmann::ordered_json sparse_modules(const model::Model& m, const io::TensorStore& store, int value_bytes,
                                      const nlohmann::json& parts) {
  std::int64_t nnz = 0, factors = 0, dense = 0, bytes = 0;
  for (int i = 0; i < m.num_layers(); ++i)
    for (const auto& l : m.layer_spec(i).linears) {
      std::int64_t k = 0, rank = 0;
      if (const auto p = parts.find(l.name); p != parts.end()) {
        const eval::SparsePart part = eval::read_sparse_part(*p, l.out, l.in, "latent.sparse_parts." + l.name);
        k = part.nonzeros;
        rank = part.rank;
      } else {
        const std::vector<float> w = store.get(m.stored_name(l.name) + ".weight").to_f32();  // [out·in]
        k = static_cast<std::int64_t>(std::count_if(w.begin(), w.end(), [](float x) { return x != 0.0f; }));
      }
      nnz += k;
      factors += eval::factored_params(l.out, l.in, rank, false);
      dense += l.out * l.in;
      bytes += eval::lowrank_sparse_storage_bytes(k, rank, l.out, l.in, value_bytes);
    }
  nlohmann::ordered_json j = {
      {"nonzeros", nnz}, {"dense_params", dense},
      {"sparsity", dense > 0 ? 1.0 - static_cast<double>(nnz) / static_cast<double>(dense) : 0.0},
      {"storage_bytes", bytes}, {"dense_bytes", dense * value_bytes}};
  if (!parts.empty()) j["factor_params"] = factors;
  return j;
}

// The factor forms whose stored tensors hold more than the module's own weights (compress --joint qkv: k_proj
// and v_proj repeat q_proj's A; --split-heads: B expanded with zeros outside its head blocks), from the
// checkpoint's options record.
struct SharedForms {
  bool qkv = false, split_heads = false;
};
SharedForms shared_forms(const model::ModelConfig& c) {
  SharedForms f;
  const auto lat = c.raw.find("latent");
  if (lat == c.raw.end() || !lat->is_object()) return f;
  const auto joint = lat->find("joint");
  f.qkv = joint != lat->end() && joint->is_string() && compress::parse_joint_parts(joint->get<std::string>()).qkv;
  const auto split = lat->find("split_heads");
  f.split_heads = split != lat->end() && split->is_boolean() && split->get<bool>();
  return f;
}

// A module's weights with a shared A counted at q_proj only and a split-head B by its blocks, r·(d'/h + d).
std::int64_t own_params(const model::Linear& l, const SharedForms& f, const model::ModelConfig& c) {
  if (!l.factored() || l.site != model::Site::AttnIn) return l.num_params();
  const bool kv = l.role == model::Role::K || l.role == model::Role::V;
  if (f.qkv && kv) return l.num_params() - l.A.size();
  if (f.split_heads && (kv || l.role == model::Role::Q)) {
    const std::int64_t h = kv ? c.num_key_value_heads : c.num_attention_heads;
    return l.rank() * (l.out / h + l.in) + l.bias.size();
  }
  return l.num_params();
}

nlohmann::ordered_json describe(model::Model& m, const std::string& dir, bool allow_unused_tensors) {
  const auto& c = m.config();
  nlohmann::ordered_json j;
  j["model"] = dir;
  j["architecture"] = c.architecture;
  j["model_type"] = c.model_type;
  j["family"] = m.family();
  j["dims"] = {{"hidden_size", c.hidden_size},
               {"num_hidden_layers", c.num_hidden_layers},
               {"num_attention_heads", c.num_attention_heads},
               {"num_key_value_heads", c.num_key_value_heads},
               {"head_dim", c.head_dim},
               {"ffn", c.ffn_width()},
               {"vocab_size", c.vocab_size},
               {"max_position_embeddings", c.max_position_embeddings}};
  if (c.word_embed_proj_dim != c.hidden_size) j["dims"]["word_embed_proj_dim"] = c.word_embed_proj_dim;
  nlohmann::ordered_json params = nlohmann::ordered_json::object();
  for (const auto& [k, v] : eval::param_breakdown(m)) params[k] = v;
  j["model_params_by_kind"] = params;
  j["model_params"] = eval::num_params(m);
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (!c.multimodal_architecture.empty()) {
    // The language model above is one component of a multimodal checkpoint.
    nlohmann::ordered_json parts = nlohmann::ordered_json::object();
    for (const auto& [k, v] : model::llava_component_params(dir)) parts[k] = v;
    j["multimodal"] = {{"architecture", c.multimodal_architecture}, {"components", parts}};
  }

  std::map<std::string, int> dtypes;  // stored tensors per dtype
  const auto store = io::TensorStore::open(dir);
  for (const auto& name : store.names()) ++dtypes[std::string(dtype_name(store.get(name).dtype))];
  j["torch_dtype"] = c.torch_dtype;
  j["stored_dtypes"] = dtypes;

  try {
    const auto tok = io::load_tokenizer(dir);
    j["tokenizer"] = {{"format", tok->describe()}, {"vocab_size", tok->vocab_size()}};
    if (const auto bos = tok->bos_id()) j["tokenizer"]["bos_id"] = *bos;
    try {
      io::check_tokenizer_vocab(*tok, c.vocab_size, dir);
    } catch (const Error& e) {
      j["tokenizer"]["error"] = e.what();  // described, and what the other commands refuse
    }
  } catch (const Error& e) {
    j["tokenizer"] = {{"error", e.what()}};
  }

  nlohmann::ordered_json latent = nlohmann::ordered_json::array();
  const std::int64_t value_bytes = c.torch_dtype == "float32" ? 4 : 2;  // of a float tensor as stored
  const SharedForms forms = shared_forms(c);
  std::int64_t own_total = 0;
  for (int i = 0; i < m.num_layers(); ++i)
    for (const auto& l : m.layer(i).linears)
      if (l.factored() || l.quantized()) {
        nlohmann::ordered_json e = {{"module", l.name}, {"rank", l.factored() ? l.rank() : 0}, {"in", l.in},
                                    {"out", l.out}, {"junction", l.block_identity ? "block-identity" : "none"},
                                    {"params", l.num_params()}};
        const std::int64_t own = own_params(l, forms, c);
        own_total += own;
        if (own != l.num_params()) e["own_params"] = own;
        if (l.quantized()) {
          e["bits"] = l.bits();
          e["group"] = l.group();
          e["bytes"] = eval::compressed_module_bytes(l, value_bytes);
        }
        latent.push_back(std::move(e));
      }
  const eval::CompressedModules cm = eval::compressed_modules(m, value_bytes);
  if (const auto lat = c.raw.find("latent"); lat != c.raw.end() && lat->is_object() && lat->contains("method") &&
      (*lat)["method"].is_string() && compress::sparsifies(compress::parse_method((*lat)["method"].get<std::string>()))) {
    const nlohmann::json parts = lat->value("sparse_parts", nlohmann::json::object());
    j["sparse_modules"] = sparse_modules(m, store, value_bytes, parts.is_object() ? parts : nlohmann::json::object());
  }
  if (cm.quantized) {  // (only then: the reports of 16-bit checkpoints stay as they were)
    // Bits per original weight of the compressed modules, scales, zero points and biases included.
    j["compressed_modules"] = {{"dense_params", cm.dense_params}, {"bytes", cm.bytes},
                               {"bits_per_weight", cm.bits_per_weight()}};
  }
  if (!c.multimodal_architecture.empty() && c.raw.contains("latent")) {
    // compress --components: the factored modules of the vision tower and the projector.
    auto llava = model::LlavaModel::load(dir, {.lazy = true, .allow_unused_tensors = allow_unused_tensors});
    for (const model::Linear* l : compress::tower_modules(llava, {true, true, true}))
      if (l->factored()) {
        latent.push_back({{"module", l->name}, {"rank", l->rank()}, {"in", l->in}, {"out", l->out},
                          {"junction", l->block_identity ? "block-identity" : "none"}, {"params", l->num_params()}});
      }
  }
  j["latent_modules"] = latent;
  // --joint qkv / --split-heads: the stored factors repeat A or hold B's zeros; their weights counted once.
  if (forms.qkv || forms.split_heads) j["latent_params_counted_once"] = own_total;
  if (const auto h = eval::quantized_head(m)) {  // compress --head-bits
    j["lm_head"] = {{"bits", h->bits}, {"group", h->group}, {"params", h->params}, {"bytes", h->bytes}};
  }
  return j;
}

void print_text(const nlohmann::ordered_json& j) {
  const auto& d = j["dims"];
  std::printf("model         %s\n", j["model"].get<std::string>().c_str());
  std::printf("architecture  %s (family %s)\n", j["architecture"].get<std::string>().c_str(),
              j["family"].get<std::string>().c_str());
  std::printf("dimensions    d %lld, layers %lld, heads %lld, kv heads %lld, d_h %lld, ffn %lld, vocab %lld, positions %lld",
              d["hidden_size"].get<long long>(), d["num_hidden_layers"].get<long long>(),
              d["num_attention_heads"].get<long long>(), d["num_key_value_heads"].get<long long>(),
              d["head_dim"].get<long long>(), d["ffn"].get<long long>(), d["vocab_size"].get<long long>(),
              d["max_position_embeddings"].get<long long>());
  if (d.contains("word_embed_proj_dim")) std::printf(", word_embed_proj_dim %lld", d["word_embed_proj_dim"].get<long long>());
  std::printf("\nparameters\n");
  for (const auto& [k, v] : j["model_params_by_kind"].items())
    std::printf("  %-10s %14s\n", k.c_str(), grouped(v.get<std::int64_t>()).c_str());
  std::printf("  %-10s %14s%s\n", "total", grouped(j["model_params"].get<std::int64_t>()).c_str(),
              j["tie_word_embeddings"].get<bool>() ? "  (LM head tied to the embedding)" : "");
  if (j.contains("multimodal")) {
    std::printf("multimodal    %s; the dimensions and parameters above are its language model's\n",
                j["multimodal"]["architecture"].get<std::string>().c_str());
    for (const auto& [k, v] : j["multimodal"]["components"].items())
      std::printf("  %-10s %14s\n", k.c_str(), grouped(v.get<std::int64_t>()).c_str());
  }
  std::string stored;
  for (const auto& [k, v] : j["stored_dtypes"].items())
    stored += (stored.empty() ? "" : ", ") + k + " x" + std::to_string(v.get<int>());
  std::printf("dtype         %s (torch_dtype), stored: %s\n",
              j["torch_dtype"].get<std::string>().empty() ? "-" : j["torch_dtype"].get<std::string>().c_str(),
              stored.c_str());
  const auto& t = j["tokenizer"];
  if (t.contains("error") && t.contains("format")) {
    std::printf("tokenizer     %s, vocab %lld, unusable with this model: %s\n", t["format"].get<std::string>().c_str(),
                t["vocab_size"].get<long long>(), t["error"].get<std::string>().c_str());
  } else if (t.contains("error")) {
    std::printf("tokenizer     unavailable: %s\n", t["error"].get<std::string>().c_str());
  } else {
    std::printf("tokenizer     %s, vocab %lld, BOS %s\n", t["format"].get<std::string>().c_str(),
                t["vocab_size"].get<long long>(),
                t.contains("bos_id") ? std::to_string(t["bos_id"].get<int>()).c_str() : "none");
  }
  const auto& latent = j["latent_modules"];
  if (j.contains("sparse_modules")) {
    const auto& sp = j["sparse_modules"];
    std::printf("sparse        %s of %s weights non-zero in the compressed modules (sparsity %.4f, stored dense); "
                "as values + positions %s bytes of their dense %s\n",
                grouped(sp["nonzeros"].get<std::int64_t>()).c_str(), grouped(sp["dense_params"].get<std::int64_t>()).c_str(),
                sp["sparsity"].get<double>(), grouped(sp["storage_bytes"].get<std::int64_t>()).c_str(),
                grouped(sp["dense_bytes"].get<std::int64_t>()).c_str());
  }
  if (latent.empty()) {
    if (!j.contains("sparse_modules")) std::printf("latent        none (dense checkpoint)\n");
    return;
  }
  std::printf("latent        %zu factored modules\n", latent.size());
  for (const auto& e : latent) {
    std::printf("  %-48s rank %5lld of [%lld, %lld]  %-14s %s params", e["module"].get<std::string>().c_str(),
                e["rank"].get<long long>(), e["out"].get<long long>(), e["in"].get<long long>(),
                e["junction"].get<std::string>().c_str(), grouped(e["params"].get<std::int64_t>()).c_str());
    if (e.contains("bits")) std::printf(", %d-bit groups of %d", e["bits"].get<int>(), e["group"].get<int>());
    std::printf("\n");
  }
  if (j.contains("lm_head")) {
    const auto& h = j["lm_head"];
    std::printf("lm_head       %d-bit groups of %d: %s bytes for %s weights\n", h["bits"].get<int>(),
                h["group"].get<int>(), grouped(h["bytes"].get<std::int64_t>()).c_str(),
                grouped(h["params"].get<std::int64_t>()).c_str());
  }
  if (j.contains("compressed_modules")) {
    const auto& q = j["compressed_modules"];
    std::printf("compressed    %s bytes for %s weights: %.3f bits per weight\n",
                grouped(q["bytes"].get<std::int64_t>()).c_str(), grouped(q["dense_params"].get<std::int64_t>()).c_str(),
                q["bits_per_weight"].get<double>());
  }
}

}  // namespace

Command add_inspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  auto* sub = app.add_subcommand("inspect", "Architecture, dimensions, parameters, dtype and tokenizer of a checkpoint");
  sub->add_option("--model", args->model, "Model directory (Hugging Face or latent checkpoint)");
  sub->add_option("model", args->positional, "The model directory, as --model");
  sub->add_flag("--json", args->json, "Print one JSON object instead of text");
  sub->add_flag("--allow-unused-tensors", args->allow_unused_tensors,
                "Accept tensors config.json's architecture does not use (by default an error)");
  return {sub, [args] {
            if (!args->model.empty() && !args->positional.empty() && args->model != args->positional) {
              throw ConfigError(fmt::format("inspect: two models (expected one, as --model DIR or DIR, got {} and {})",
                                            args->model, args->positional));
            }
            const std::string dir = args->model.empty() ? args->positional : args->model;
            if (dir.empty()) throw ConfigError("inspect: --model is required (see latentllm inspect --help)");
            const auto m = model::Model::load(dir, {.allow_unused_tensors = args->allow_unused_tensors});
            const auto j = describe(*m, dir, args->allow_unused_tensors);
            if (args->json) {
              std::printf("%s\n", j.dump(2).c_str());
            } else {
              print_text(j);
            }
            return 0;
          },
          Ranks::Root};  // one checkpoint described once
}

}  // namespace latentllm::cli

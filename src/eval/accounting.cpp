// Parameters, MACs/FLOPs and KV-cache sizes (latentllm/eval.hpp): the one place that counts them.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "model/weight_table.hpp"
#include "quant/pack.hpp"

namespace latentllm::eval {

std::int64_t dense_params(std::int64_t out, std::int64_t in) { return out * in; }

std::int64_t factored_params(std::int64_t out, std::int64_t in, std::int64_t rank, bool block_identity) {
  const std::int64_t p = rank * (out + in);
  return block_identity ? p - rank * rank : p;
}

std::int64_t sparse_storage_bytes(std::int64_t nnz, std::int64_t out, std::int64_t in, int value_bytes) {
  const std::int64_t entries = out * in;
  const auto index_bits =
      static_cast<std::int64_t>(std::ceil(std::log2(static_cast<double>(std::max<std::int64_t>(entries, 2)))));
  const std::int64_t position_bits = std::min(entries, nnz * index_bits);
  return nnz * value_bytes + (position_bits + 7) / 8;
}

std::int64_t lowrank_sparse_storage_bytes(std::int64_t nnz, std::int64_t rank, std::int64_t out, std::int64_t in,
                                          int value_bytes) {
  return sparse_storage_bytes(nnz, out, in, value_bytes) + value_bytes * factored_params(out, in, rank, false);
}

std::int64_t dense_macs(std::int64_t out, std::int64_t in, std::int64_t n_tok) { return n_tok * dense_params(out, in); }

std::int64_t factored_macs(std::int64_t out, std::int64_t in, std::int64_t rank, bool block_identity,
                           std::int64_t n_tok) {
  return n_tok * factored_params(out, in, rank, block_identity);
}

std::int64_t linear_macs(const model::Linear& l, std::int64_t n_tok) {
  return n_tok * (l.num_params() - l.bias.size());
}

std::int64_t compressed_module_bytes(const model::Linear& l, std::int64_t value_bytes) {
  if (!l.quantized()) return value_bytes * l.num_params();
  // Its stored matrices: codes, scales and zero points (the bias stays in the storage type).
  return l.bytes() - 4 * (l.bias.size() + static_cast<std::int64_t>(l.perm.size())) + value_bytes * l.bias.size();
}

SparsePart read_sparse_part(const nlohmann::json& entry, std::int64_t out, std::int64_t in, const std::string& context) {
  if (!entry.is_object()) {
    throw FormatError(fmt::format("{}: entry (expected an object with rank and nonzeros, got {})", context, entry.dump()));
  }
  auto field = [&](const char* key, std::int64_t max) {
    const auto it = entry.find(key);
    if (it == entry.end()) return std::int64_t{0};
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > max) {
      throw FormatError(fmt::format("{}: {} (expected an integer in [0, {}], got {})", context, key, max, it->dump()));
    }
    return it->get<std::int64_t>();
  };
  return {field("rank", std::min(out, in)), field("nonzeros", out * in)};
}

std::optional<QuantizedHead> quantized_head(const model::Model& m) {
  const quant::PackedMatrix* q = m.head_weight().packed();
  if (q == nullptr) return std::nullopt;
  return QuantizedHead{q->bits, q->group, q->rows * q->cols, quant::packed_bytes(q->rows, q->cols, q->spec())};
}

CompressedModules compressed_modules(model::Model& m, std::int64_t value_bytes) {
  CompressedModules c;
  for (int i = 0; i < m.num_layers(); ++i) {
    const bool load = !m.layer_loaded(i);
    if (load) m.load_layer(i);
    for (const auto& l : m.layer(i).linears)
      if (l.factored() || l.quantized()) {
        ++c.modules;
        c.dense_params += l.in * l.out;
        c.bytes += compressed_module_bytes(l, value_bytes);
        c.quantized = c.quantized || l.quantized();
      }
    if (load) m.release_layer(i);
  }
  return c;
}

std::vector<std::pair<std::string, std::int64_t>> param_breakdown(const model::Model& m) {
  std::vector<std::pair<std::string, std::int64_t>> out = {{"embed", 0}, {"attn", 0}, {"mlp", 0}, {"norm", 0}};
  auto add = [&](const std::string& key, std::int64_t n) {
    for (auto& [k, v] : out)
      if (k == key) {
        v += n;
        return;
      }
    out.emplace_back(key, n);
  };
  for (int i = 0; i < m.num_layers(); ++i) {
    const model::DecoderLayer& layer = m.layer(i);
    for (const auto& l : layer.linears) {
      add(l.site == model::Site::AttnIn || l.site == model::Site::AttnOut ? "attn" : "mlp", l.num_params());
    }
    for (const auto& [name, v] : layer.norms) add("norm", v.size());
  }
  for (const auto& [k, v] : m.non_layer_params()) add(k, v);
  return out;
}

std::int64_t num_params(const model::Model& m) {
  std::int64_t total = 0;
  for (const auto& [k, v] : param_breakdown(m)) total += v;
  return total;
}

std::int64_t forward_macs(const model::Model& m, std::int64_t n_tok) {
  const auto& c = m.config();
  std::int64_t macs = n_tok * c.vocab_size * c.word_embed_proj_dim;  // LM head
  const std::int64_t q_width = c.num_attention_heads * c.head_dim;
  for (int i = 0; i < m.num_layers(); ++i) {
    for (const auto& l : m.layer(i).linears) macs += linear_macs(l, n_tok);
    macs += 2 * n_tok * n_tok * q_width;  // Q·Kᵀ and A·V over the full square
  }
  return macs;
}

std::int64_t kv_cache_bytes_per_token(const model::Model& m, std::int64_t bytes_per_value) {
  const auto& c = m.config();
  return 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * bytes_per_value;
}

}  // namespace latentllm::eval

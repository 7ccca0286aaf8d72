// The identity a latent checkpoint declares in config.json. Its factored modules are stored as
// <name>.A.weight / <name>.B.weight, which a stock loader (transformers' from_pretrained) would not find,
// initialising those projections at random with warnings only; so the writer replaces `architectures`
// and `model_type` with latentllm's own (a model_type that names the conversion, which transformers'
// AutoConfig prints when it refuses the checkpoint) and keeps the source's in the `latent` section.
// Every reader of config.json restores them (model::parse_config, model::parse_llava_config), so
// latentllm loads these checkpoints and the older ones that kept the source's keys in place, and the
// exports (hf, onnx) write the source's.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace latentllm::io {

inline constexpr const char* kLatentModelType = "latentllm (convert with: latentllm export --format hf)";
inline constexpr const char* kLatentCausalLm = "LatentLlmForCausalLM";
inline constexpr const char* kLatentConditionalGeneration = "LatentLlmForConditionalGeneration";

// `config` (a source model's, with its `latent` section) as a latent checkpoint writes it: architectures
// [kLatentCausalLm] (kLatentConditionalGeneration for a *ForConditionalGeneration source) and model_type
// kLatentModelType, the source's in latent.source_architectures / latent.source_model_type (a key the
// source does not have is not recorded).
nlohmann::json with_latent_identity(nlohmann::json config);

// `config` with the source's architectures and model_type restored from its latent section; a config
// without latent.source_architectures (a dense model, an older latent checkpoint) is returned unchanged.
nlohmann::json with_source_identity(nlohmann::json config);

}  // namespace latentllm::io

namespace latentllm::io {

// ---- The tensor names of a latent module (docs/FORMAT.md "Factored modules", "Quantized tensors") ----
// One pair of functions spells and parses them for every reader and writer of a latent checkpoint, of
// its exports and of the per-layer progress files.

// Which matrix of a module: its dense weight, or one factor of W ≈ B·A.
enum class Factor { Weight, B, A };
// Which stored part of that matrix: its values (float), or, quantized, its packed codes (U8), scales and
// zero points (F16).
enum class Piece { Values, Codes, Scales, Zeros };
// Checkpoint: `<module>.weight`, `.B.weight`, `.A.weight`; quantized `<module>[.B|.A].qweight`, `.scales`,
// `.qzeros`. Progress (the per-layer factor files of a compression, float32 throughout): `<module>.B`,
// `.A`, and quantized `<module>.B.qweight`, … as in a checkpoint.
enum class Naming { Checkpoint, Progress };

std::string latent_tensor_name(std::string_view module, Factor f, Piece p = Piece::Values,
                               Naming naming = Naming::Checkpoint);

struct LatentTensorName {
  std::string module;
  Factor factor = Factor::Weight;
  Piece piece = Piece::Values;
};
// The module, matrix and part a checkpoint tensor name stands for (the inverse of latent_tensor_name with
// Naming::Checkpoint); nullopt for a name that is none of them (a bias, a norm, an embedding).
std::optional<LatentTensorName> parse_latent_tensor_name(std::string_view name);

}  // namespace latentllm::io

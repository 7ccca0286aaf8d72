// The ONNX encoder: a shared module (liblatentllm_onnx.so, src/format/onnx_encoder/) that turns the
// writer's graph description into libonnx's ModelProto, serializes it, and runs libonnx's checker. It
// links Debian's libonnx and libprotobuf, whose symbols clash with the protobuf-lite copy that
// libsentencepiece carries (one process namespace cannot hold both: protobuf aborts on the version
// mismatch), so it is loaded with dlmopen into a link-map namespace of its own and called through a C
// interface; nothing allocated on one side is freed on the other.
//
// The description (format::onnx_graph::Graph::ir()): {"name", "opset", "domains": {domain: version} (the
// other operator sets the nodes use; optional), "metadata": {key: value},
// "inputs"/"outputs": [{"name", "type" (TensorProto.DataType), "dims": [int or symbolic name]}],
// "initializers": [{"name", "type", "dims", "blob": index into the blobs | "external": {"location",
// "offset", "length"}}], "nodes": [{"op", "name", "inputs", "outputs", "attrs": [{"name", "i" | "f" |
// "ints" | "t": {"type", "dims", "values"}}], "domain" (optional)}]}.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace latentllm::format {

// The module's path: $LATENTLLM_ONNX_MODULE when set, else liblatentllm_onnx.so beside the running
// executable, else where this build put it (when it is there), else where `cmake --install` puts it.
std::filesystem::path onnx_module_path();

// Loads the module now (before a long run that ends with an ONNX export): ConfigError as write_onnx_model
// when it cannot.
void load_onnx_module();

// Writes the graph `ir` with the inline initializer bytes `blobs` to `file` (ModelProto, IR version and
// opset as ir says). ConfigError when the module cannot be loaded (what to install), Error with the
// module's message when encoding fails.
void write_onnx_model(const nlohmann::json& ir, const std::vector<std::vector<char>>& blobs,
                      const std::filesystem::path& file);

// onnx::checker::check_model on the file (external data beside it), then, when full, strict shape and
// type inference over the whole graph. Error with the checker's message when the model is invalid.
void check_onnx_model(const std::filesystem::path& file, bool full);

// What the model file holds (for tests and inspection): {"ir_version", "opset", "domains": {domain:
// version}, "nodes", "domain_ops": ["domain::op" of each node outside ONNX's domain], "metadata",
// "inputs"/"outputs": [{"name", "type", "dims"}], "initializers": [{"name", "type", "dims", "external",
// and when external "offset", "length" in the data file}]}.
nlohmann::json describe_onnx_model(const std::filesystem::path& file);

}  // namespace latentllm::format

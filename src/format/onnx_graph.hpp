// The ONNX graph as the writer builds it: nodes with generated value names, weights as initializers in
// the export's storage type (inline, or streamed to one external data file beside the graph), constants
// as Constant nodes, so that the graph's initializers are exactly the checkpoint's parameters (plus
// integer gather indices). Held as a plain description (JSON and byte blobs) that the ONNX encoder
// module turns into libonnx's ModelProto (src/format/onnx_module.hpp: libprotobuf cannot share a process
// namespace with libsentencepiece's bundled protobuf).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/tensor.hpp"

namespace latentllm::format::onnx_graph {

// onnx.proto's TensorProto.DataType values.
enum ElemType : int { kFloat = 1, kUint8 = 2, kInt64 = 7, kBool = 9, kFloat16 = 10, kDouble = 11 };

// One node attribute (an int, a float or ints).
nlohmann::json attr(const std::string& name, std::int64_t v);
nlohmann::json attr(const std::string& name, float v);
nlohmann::json attr(const std::string& name, const std::vector<std::int64_t>& v);

// The initializers' bytes of a graph too large for one protobuf file (2 GiB): appended to `file`, each at
// an offset aligned to 4096 bytes (ORT maps aligned ranges), the tensors naming it by its file name.
class ExternalData {
 public:
  explicit ExternalData(std::filesystem::path file);
  // Appends `bytes`; returns the initializer's external_data entries (location, offset, length).
  nlohmann::json place(std::span<const char> bytes);
  void close();  // flushes and checks the stream (IoError naming the file)

 private:
  std::filesystem::path file_;
  std::ofstream out_;
  std::uint64_t offset_ = 0;
};

// The graph: `ir` (nodes, initializers, inputs, outputs; src/format/onnx_module.hpp describes it) and
// the bytes of the inline initializers.
class Graph {
 public:
  // weights: the storage type of weight initializers (F32 or F16; F16 weights are Cast to float where
  // they are read, which ORT folds once at session start). ext: where initializer bytes go; null: inline.
  Graph(DType weights, ExternalData* ext) : weights_(weights), ext_(ext) {}

  // A node of type `op` over `inputs`; returns its output's name (`out`, or a generated one).
  std::string op(const std::string& type, const std::vector<std::string>& inputs,
                 const std::vector<nlohmann::json>& attrs = {}, const std::string& out = "");
  // A node of an operator set other than ONNX's (`domain` at `version`, imported by the model).
  std::string domain_op(const std::string& domain, std::int64_t version, const std::string& type,
                        const std::vector<std::string>& inputs, const std::vector<nlohmann::json>& attrs = {});
  // A weight: initializer `name` of shape dims holding values (row-major float32, stored in the weight
  // type; NumericError when a value overflows F16). Returns the name of its float32 value.
  std::string weight(const std::string& name, const std::vector<std::int64_t>& dims, std::span<const float> values);
  // An initializer of elem type `type` holding `bytes` as they are (row-major, little-endian), whatever
  // the weight type: the packed codes, scales and zero points of a quantized matrix.
  std::string raw(const std::string& name, int type, const std::vector<std::int64_t>& dims, std::span<const char> bytes);
  // An int64 initializer (gather indices); not a parameter.
  std::string indices(const std::string& name, const std::vector<std::int64_t>& values);
  // Constants (Constant nodes): an int64 vector or scalar, a float scalar, a double vector.
  std::string ints(const std::vector<std::int64_t>& v);
  std::string int_scalar(std::int64_t v);
  std::string scalar(float v);
  std::string doubles(const std::vector<double>& v);

  // Graph inputs and outputs: elem type and dims (a string: symbolic, a number: fixed).
  struct Dim {
    std::string param;
    std::int64_t value = 0;
  };
  void input(const std::string& name, int elem_type, const std::vector<Dim>& dims);
  void output(const std::string& name, int elem_type, const std::vector<Dim>& dims);

  std::size_t initializers() const { return ir_["initializers"].size(); }
  nlohmann::json& ir() { return ir_; }
  const std::vector<std::vector<char>>& blobs() const { return blobs_; }

 private:
  std::string fresh(const std::string& hint);
  void store(nlohmann::json& t, std::span<const char> bytes);
  std::string constant(int type, const std::vector<std::int64_t>& dims, nlohmann::json values);

  DType weights_;
  ExternalData* ext_;
  std::int64_t counter_ = 0;
  nlohmann::json ir_ = {{"nodes", nlohmann::json::array()}, {"initializers", nlohmann::json::array()},
                        {"inputs", nlohmann::json::array()}, {"outputs", nlohmann::json::array()}};
  std::vector<std::vector<char>> blobs_;
};

}  // namespace latentllm::format::onnx_graph

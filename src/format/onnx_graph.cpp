#include "format/onnx_graph.hpp"

#include <cmath>

#include <fmt/format.h>

#include "latentllm/error.hpp"

namespace latentllm::format::onnx_graph {
namespace {

constexpr std::uint64_t kAlign = 4096;
constexpr float kF16Max = 65504.0f;

nlohmann::json value_info(const std::string& name, int elem_type, const std::vector<Graph::Dim>& dims) {
  nlohmann::json d = nlohmann::json::array();
  for (const auto& x : dims) d.push_back(x.param.empty() ? nlohmann::json(x.value) : nlohmann::json(x.param));
  return {{"name", name}, {"type", elem_type}, {"dims", d}};
}

}  // namespace

nlohmann::json attr(const std::string& name, std::int64_t v) { return {{"name", name}, {"i", v}}; }
nlohmann::json attr(const std::string& name, float v) { return {{"name", name}, {"f", v}}; }
nlohmann::json attr(const std::string& name, const std::vector<std::int64_t>& v) {
  return {{"name", name}, {"ints", v}};
}

ExternalData::ExternalData(std::filesystem::path file) : file_(std::move(file)), out_(file_, std::ios::binary) {
  if (!out_) throw IoError(fmt::format("{}: cannot create the external data file", file_.string()));
}

nlohmann::json ExternalData::place(std::span<const char> bytes) {
  static const char kZeros[kAlign] = {};
  const std::uint64_t pad = (kAlign - offset_ % kAlign) % kAlign;
  out_.write(kZeros, static_cast<std::streamsize>(pad));
  out_.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out_) throw IoError(fmt::format("{}: write failed", file_.string()));
  offset_ += pad;
  nlohmann::json e = {{"location", file_.filename().string()}, {"offset", std::to_string(offset_)},
                      {"length", std::to_string(bytes.size())}};
  offset_ += bytes.size();
  return e;
}

void ExternalData::close() {
  out_.flush();
  out_.close();
  if (!out_) throw IoError(fmt::format("{}: write failed", file_.string()));
}

std::string Graph::fresh(const std::string& hint) { return fmt::format("{}_{}", hint, counter_++); }

std::string Graph::op(const std::string& type, const std::vector<std::string>& inputs,
                      const std::vector<nlohmann::json>& attrs, const std::string& out) {
  const std::string name = out.empty() ? fresh(type) : out;
  ir_["nodes"].push_back({{"op", type}, {"name", fresh(type + "_node")}, {"inputs", inputs},
                          {"outputs", {name}}, {"attrs", attrs}});
  return name;
}

std::string Graph::domain_op(const std::string& domain, std::int64_t version, const std::string& type,
                             const std::vector<std::string>& inputs, const std::vector<nlohmann::json>& attrs) {
  const std::string name = op(type, inputs, attrs);
  ir_["nodes"].back()["domain"] = domain;
  ir_["domains"][domain] = version;
  return name;
}

void Graph::store(nlohmann::json& t, std::span<const char> bytes) {
  if (ext_ != nullptr) {
    t["external"] = ext_->place(bytes);
  } else {
    t["blob"] = blobs_.size();
    blobs_.emplace_back(bytes.begin(), bytes.end());
  }
  ir_["initializers"].push_back(std::move(t));
}

std::string Graph::weight(const std::string& name, const std::vector<std::int64_t>& dims,
                          std::span<const float> values) {
  nlohmann::json t = {{"name", name}, {"type", weights_ == DType::F16 ? kFloat16 : kFloat}, {"dims", dims}};
  if (weights_ == DType::F16) {
    std::vector<std::uint16_t> h(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (!(std::abs(values[i]) <= kF16Max)) {
        throw NumericError(fmt::format("{}: value at [{}] overflows F16 (expected |x| <= 65504, got {}); write "
                                       "the export with --dtype f32", name, i, values[i]));
      }
      h[i] = f32_to_f16(values[i]);
    }
    store(t, {reinterpret_cast<const char*>(h.data()), h.size() * 2});
    return op("Cast", {name}, {attr("to", std::int64_t{kFloat})});
  }
  store(t, {reinterpret_cast<const char*>(values.data()), values.size() * 4});
  return name;
}

std::string Graph::raw(const std::string& name, int type, const std::vector<std::int64_t>& dims,
                       std::span<const char> bytes) {
  nlohmann::json t = {{"name", name}, {"type", type}, {"dims", dims}};
  store(t, bytes);
  return name;
}

std::string Graph::indices(const std::string& name, const std::vector<std::int64_t>& values) {
  nlohmann::json t = {{"name", name}, {"type", kInt64}, {"dims", {values.size()}}};
  store(t, {reinterpret_cast<const char*>(values.data()), values.size() * 8});
  return name;
}

std::string Graph::constant(int type, const std::vector<std::int64_t>& dims, nlohmann::json values) {
  return op("Constant", {}, {{{"name", "value"}, {"t", {{"type", type}, {"dims", dims}, {"values", std::move(values)}}}}});
}

std::string Graph::ints(const std::vector<std::int64_t>& v) {
  return constant(kInt64, {static_cast<std::int64_t>(v.size())}, v);
}
std::string Graph::int_scalar(std::int64_t v) { return constant(kInt64, {}, {v}); }
std::string Graph::scalar(float v) { return constant(kFloat, {}, {v}); }
std::string Graph::doubles(const std::vector<double>& v) {
  return constant(kDouble, {static_cast<std::int64_t>(v.size())}, v);
}

void Graph::input(const std::string& name, int elem_type, const std::vector<Dim>& dims) {
  ir_["inputs"].push_back(value_info(name, elem_type, dims));
}

void Graph::output(const std::string& name, int elem_type, const std::vector<Dim>& dims) {
  ir_["outputs"].push_back(value_info(name, elem_type, dims));
}

}  // namespace latentllm::format::onnx_graph

// liblatentllm_onnx.so: the graph description of format::onnx_graph::Graph as libonnx's ModelProto,
// serialized; and libonnx's checker and shape inference over a written model. Loaded with dlmopen by
// src/format/onnx_module.cpp (which documents the description and why it is a module); a C interface,
// every exception caught and returned as a message.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

namespace {

using json = nlohmann::json;

void set_shape(onnx::ValueInfoProto& v, const json& info) {
  v.set_name(info.at("name").get<std::string>());
  auto* tt = v.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(info.at("type").get<int>());
  auto* shape = tt->mutable_shape();
  for (const auto& d : info.at("dims")) {
    if (d.is_string()) {
      shape->add_dim()->set_dim_param(d.get<std::string>());
    } else {
      shape->add_dim()->set_dim_value(d.get<std::int64_t>());
    }
  }
}

void set_tensor(onnx::TensorProto& t, const json& j) {
  const int type = j.at("type").get<int>();
  t.set_data_type(type);
  for (const auto& d : j.at("dims")) t.add_dims(d.get<std::int64_t>());
  for (const auto& v : j.at("values")) {
    switch (type) {
      case onnx::TensorProto_DataType_INT64: t.add_int64_data(v.get<std::int64_t>()); break;
      case onnx::TensorProto_DataType_FLOAT: t.add_float_data(v.get<float>()); break;
      case onnx::TensorProto_DataType_DOUBLE: t.add_double_data(v.get<double>()); break;
      default: throw std::runtime_error("constant of type " + std::to_string(type) + " (expected int64, float, double)");
    }
  }
}

void add_node(onnx::GraphProto& g, const json& n) {
  auto* node = g.add_node();
  node->set_op_type(n.at("op").get<std::string>());
  node->set_name(n.at("name").get<std::string>());
  if (n.contains("domain")) node->set_domain(n["domain"].get<std::string>());
  for (const auto& i : n.at("inputs")) node->add_input(i.get<std::string>());
  for (const auto& o : n.at("outputs")) node->add_output(o.get<std::string>());
  for (const auto& a : n.at("attrs")) {
    auto* at = node->add_attribute();
    at->set_name(a.at("name").get<std::string>());
    if (a.contains("i")) {
      at->set_type(onnx::AttributeProto_AttributeType_INT);
      at->set_i(a["i"].get<std::int64_t>());
    } else if (a.contains("f")) {
      at->set_type(onnx::AttributeProto_AttributeType_FLOAT);
      at->set_f(a["f"].get<float>());
    } else if (a.contains("ints")) {
      at->set_type(onnx::AttributeProto_AttributeType_INTS);
      for (const auto& v : a["ints"]) at->add_ints(v.get<std::int64_t>());
    } else {
      at->set_type(onnx::AttributeProto_AttributeType_TENSOR);
      set_tensor(*at->mutable_t(), a.at("t"));
    }
  }
}

void add_initializer(onnx::GraphProto& g, const json& j, const void* const* blobs, const std::uint64_t* sizes,
                     std::uint64_t n) {
  auto* t = g.add_initializer();
  t->set_name(j.at("name").get<std::string>());
  t->set_data_type(j.at("type").get<int>());
  for (const auto& d : j.at("dims")) t->add_dims(d.get<std::int64_t>());
  if (j.contains("external")) {
    t->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
    for (const auto& [k, v] : j["external"].items()) {
      auto* e = t->add_external_data();
      e->set_key(k);
      e->set_value(v.get<std::string>());
    }
    return;
  }
  const auto b = j.at("blob").get<std::uint64_t>();
  if (b >= n) throw std::runtime_error("initializer " + t->name() + ": blob index out of range");
  t->set_raw_data(blobs[b], sizes[b]);
}

void copy_error(const char* what, char* err, std::uint64_t err_len) {
  if (err_len == 0) return;
  std::strncpy(err, what, err_len - 1);
  err[err_len - 1] = '\0';
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int latentllm_onnx_write(
    const char* ir_json, const void* const* blobs, const std::uint64_t* sizes, std::uint64_t n, const char* path,
    char* err, std::uint64_t err_len) {
  try {
    const json ir = json::parse(ir_json);
    onnx::ModelProto m;
    m.set_ir_version(onnx::IR_VERSION);
    m.set_producer_name(ir.at("producer").get<std::string>());
    auto* opset = m.add_opset_import();
    opset->set_domain("");
    opset->set_version(ir.at("opset").get<std::int64_t>());
    const json domains = ir.value("domains", json::object());
    for (const auto& [domain, version] : domains.items()) {
      auto* o = m.add_opset_import();
      o->set_domain(domain);
      o->set_version(version.get<std::int64_t>());
    }
    for (const auto& [k, v] : ir.at("metadata").items()) {
      auto* p = m.add_metadata_props();
      p->set_key(k);
      p->set_value(v.get<std::string>());
    }
    onnx::GraphProto& g = *m.mutable_graph();
    g.set_name(ir.at("name").get<std::string>());
    for (const auto& v : ir.at("inputs")) set_shape(*g.add_input(), v);
    for (const auto& v : ir.at("outputs")) set_shape(*g.add_output(), v);
    for (const auto& t : ir.at("initializers")) add_initializer(g, t, blobs, sizes, n);
    for (const auto& node : ir.at("nodes")) add_node(g, node);
    std::ofstream out(path, std::ios::binary);
    if (!out || !m.SerializeToOstream(&out) || !out.flush()) throw std::runtime_error("cannot write the ONNX graph");
    return 0;
  } catch (const std::exception& e) {
    copy_error(e.what(), err, err_len);
  }
  return 1;
}

extern "C" __attribute__((visibility("default"))) int latentllm_onnx_check(const char* path, int full, char* err,
                                                                           std::uint64_t err_len) {
  try {
    onnx::checker::check_model(std::string(path));
    if (full != 0) {
      onnx::ModelProto m;
      std::ifstream in(path, std::ios::binary);
      if (!m.ParseFromIstream(&in)) throw std::runtime_error("cannot parse the ONNX graph");
      const onnx::ShapeInferenceOptions strict(/*check_type=*/true, /*error_mode=*/1, /*data_prop=*/false);
      onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(), strict);
    }
    return 0;
  } catch (const std::exception& e) {
    copy_error(e.what(), err, err_len);
  }
  return 1;
}

namespace {

json value_infos(const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& vs) {
  json out = json::array();
  for (const auto& v : vs) {
    json dims = json::array();
    for (const auto& d : v.type().tensor_type().shape().dim()) {
      dims.push_back(d.has_dim_param() ? json(d.dim_param()) : json(d.dim_value()));
    }
    out.push_back({{"name", v.name()}, {"type", v.type().tensor_type().elem_type()}, {"dims", dims}});
  }
  return out;
}

}  // namespace

// What a written model holds, as JSON: opset, the other operator sets ({domain: version}), metadata,
// inputs, outputs (name, type, dims), initializers (name, type, dims, external, and for external ones
// their offset and length in the data file), node count and the op types of nodes outside ONNX's domain
// ("domain::op"). `needed` receives the size the text takes with its final NUL.
extern "C" __attribute__((visibility("default"))) int latentllm_onnx_describe(const char* path, char* out,
                                                                              std::uint64_t out_len,
                                                                              std::uint64_t* needed) {
  try {
    onnx::ModelProto m;
    std::ifstream in(path, std::ios::binary);
    if (!m.ParseFromIstream(&in)) throw std::runtime_error("cannot parse the ONNX graph");
    json j = {{"ir_version", m.ir_version()}, {"nodes", m.graph().node_size()}};
    j["opset"] = 0;
    j["domains"] = json::object();
    for (const auto& o : m.opset_import()) {
      if (o.domain().empty() || o.domain() == "ai.onnx") {
        j["opset"] = o.version();
      } else {
        j["domains"][o.domain()] = o.version();
      }
    }
    j["domain_ops"] = json::array();
    for (const auto& n : m.graph().node())
      if (!n.domain().empty() && n.domain() != "ai.onnx") j["domain_ops"].push_back(n.domain() + "::" + n.op_type());
    j["metadata"] = json::object();
    for (const auto& p : m.metadata_props()) j["metadata"][p.key()] = p.value();
    j["inputs"] = value_infos(m.graph().input());
    j["outputs"] = value_infos(m.graph().output());
    j["initializers"] = json::array();
    for (const auto& t : m.graph().initializer()) {
      json e = {{"name", t.name()}, {"type", t.data_type()},
                {"dims", json(std::vector<std::int64_t>(t.dims().begin(), t.dims().end()))},
                {"external", t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL}};
      for (const auto& kv : t.external_data())
        if (kv.key() == "offset" || kv.key() == "length") e[kv.key()] = std::stoll(kv.value());
      j["initializers"].push_back(std::move(e));
    }
    const std::string text = j.dump();
    *needed = text.size() + 1;
    if (text.size() + 1 > out_len) return 2;
    std::memcpy(out, text.c_str(), text.size() + 1);
    return 0;
  } catch (const std::exception& e) {
    *needed = 0;
    copy_error(e.what(), out, out_len);
  }
  return 1;
}

#include "compress/run/resume.hpp"

#include <array>
#include <fstream>
#include <optional>
#include <vector>

#include "latentllm/checkpoint.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/io.hpp"
#include "latentllm/log.hpp"

namespace latentllm::compress {
namespace {

namespace fs = std::filesystem;

// FNV-1a, 64 bit: a stable digest (std::hash is not specified across implementations).
struct Fnv {
  std::uint64_t h = 1469598103934665603ull;
  void add(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  void add(const std::string& s) { add(s.data(), s.size() + 1); }
};

nlohmann::json report_json(const CompressReport& r) {
  nlohmann::json mods = nlohmann::json::array();
  for (const auto& m : r.modules) mods.push_back(m.to_json());
  nlohmann::json notes = nlohmann::json::array();
  for (const auto& n : r.notes) notes.push_back(note_to_json(n));
  auto losses = [](const std::vector<JointLoss>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& l : v) a.push_back(l.to_json());
    return a;
  };
  return {{"modules", mods}, {"notes", notes}, {"qk", losses(r.qk_losses)}, {"ud", losses(r.ud_losses)},
          {"vo", losses(r.vo_losses)}, {"part_seconds", r.part_seconds}};
}

void restore_report(const nlohmann::json& j, CompressReport& r) {
  for (const auto& m : j.at("modules")) r.modules.push_back(ModuleReport::from_json(m));
  r.notes.clear();
  for (const auto& n : j.at("notes")) r.notes.push_back(note_from_json(n));
  for (const auto& l : j.at("qk")) r.qk_losses.push_back(JointLoss::from_json(l));
  for (const auto& l : j.at("ud")) r.ud_losses.push_back(JointLoss::from_json(l));
  for (const auto& l : j.at("vo")) r.vo_losses.push_back(JointLoss::from_json(l));
  r.part_seconds = j.at("part_seconds").get<std::map<std::string, double>>();
}

}  // namespace

std::string embeddings_digest(const MatrixF& e) {
  Fnv f;
  const std::array<Eigen::Index, 2> shape = {e.rows(), e.cols()};
  f.add(shape.data(), sizeof shape);
  f.add(e.data(), static_cast<std::size_t>(e.size()) * sizeof(float));
  return fmt::format("{:016x}", f.h);
}

std::string run_fingerprint(const model::Model& m, std::span<const std::int32_t> ids, int seqlen,
                            const CompressOptions& opt) {
  Fnv f;
  f.add(ids.data(), ids.size_bytes());
  f.add(&seqlen, sizeof seqlen);
  // Multimodal calibration: the sequences' lengths and their layer-0 inputs (image features included).
  f.add(opt.pipeline.lengths.data(), opt.pipeline.lengths.size() * sizeof(int));
  if (!opt.inputs_digest.empty()) {
    f.add(opt.inputs_digest);
  } else if (const MatrixF* e = opt.pipeline.input_embeddings) {
    f.add(e->data(), static_cast<std::size_t>(e->size()) * sizeof(float));
  }
  f.add(fs::weakly_canonical(m.dir()).string());
  f.add(core::read_file(m.dir() / "config.json"));
  // The options record (CompressOptions::to_json): the one serialization of everything that decides the
  // result, shared with the checkpoint's metadata. Doubles are written shortest round-trip, so equal
  // records are equal options. Global ranks follow from the calibration and these.
  f.add(opt.to_json().dump());
  return fmt::format("{:016x}", f.h);
}

ResumeState::ResumeState(fs::path dir, std::string fingerprint, bool dense_modules)
    : dir_(std::move(dir)), fingerprint_(std::move(fingerprint)), sparse_(dense_modules) {}

namespace {

// progress.json of `dir` checked against `fingerprint`; discarded (null) when the file does not exist.
nlohmann::json read_progress(const fs::path& dir, const std::string& fingerprint) {
  const fs::path progress = dir / "progress.json";
  if (!fs::exists(progress)) return nullptr;
  const auto j = nlohmann::json::parse(core::read_file(progress), nullptr, false);
  if (j.is_discarded() || !j.contains("fingerprint") || !j.contains("layers_done")) {
    throw FormatError(fmt::format("{}: invalid resume state (remove the directory to start over)", progress.string()));
  }
  if (j.at("fingerprint") != fingerprint) {
    throw ConfigError(fmt::format("{}: resume state of a different run (expected fingerprint {}, got {}): the model, "
                                  "calibration or options changed; remove the directory or drop --resume",
                                  progress.string(), fingerprint, j.at("fingerprint").get<std::string>()));
  }
  return j;
}

}  // namespace

void ResumeState::check_fingerprint() const { (void)read_progress(dir_, fingerprint_); }

void ResumeState::save_plan(const RankPlan& plan) const {
  nlohmann::json mods = nlohmann::json::array();
  for (const auto& p : plan.modules) {
    mods.push_back({{"name", p.name}, {"out", p.out}, {"in", p.in}, {"rank", p.rank}, {"params", p.params},
                    {"dense_params", p.dense_params}, {"macs", p.macs}, {"dense_macs", p.dense_macs}});
    if (p.bits > 0) mods.back()["bits"] = p.bits;  // --bpw's choice
  }
  const nlohmann::json j = {{"fingerprint", fingerprint_}, {"ratio", plan.ratio},
                            {"junction", junction_name(plan.junction)}, {"n_tok", plan.n_tok}, {"modules", mods}};
  core::write_text_atomic(dir_ / "plan.json", j.dump(1) + "\n");
}

std::optional<RankPlan> ResumeState::restore_plan() const {
  const fs::path file = dir_ / "plan.json";
  if (!fs::exists(file)) return std::nullopt;
  const auto j = nlohmann::json::parse(core::read_file(file), nullptr, false);
  if (j.is_discarded() || j.value("fingerprint", "") != fingerprint_ || !j.contains("modules")) return std::nullopt;
  try {
    RankPlan plan;
    plan.ratio = j.at("ratio");
    plan.junction = parse_junction(j.at("junction").get<std::string>());
    plan.n_tok = j.at("n_tok");
    for (const auto& p : j.at("modules")) {
      plan.modules.push_back({p.at("name"), p.at("out"), p.at("in"), p.at("rank"), p.at("params"),
                              p.at("dense_params"), p.at("macs"), p.at("dense_macs"), p.value("bits", 0)});
      const int bits = plan.modules.back().bits;
      if (bits != 0 && bits != 2 && bits != 3 && bits != 4 && bits != 8 && bits != 16) {
        throw FormatError(fmt::format("{}: invalid plan (bits of {} (expected 2, 3, 4, 8 or 16, got {}); remove the "
                                      "directory to start over)", file.string(), plan.modules.back().name, bits));
      }
    }
    log_info("resume: the global rank allocation restored from {} (no pre-pass)", file.string());
    return plan;
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: invalid plan ({}; remove the directory to start over)", file.string(), e.what()));
  }
}

int ResumeState::restore(model::Model& m, MatrixF& hidden, MatrixF* dense, CompressReport& report) const {
  const fs::path progress = dir_ / "progress.json";
  const nlohmann::json j = read_progress(dir_, fingerprint_);
  if (j.is_null()) return 0;
  const int done = j.at("layers_done");
  if (done <= 0 || done > m.num_layers()) {
    throw FormatError(fmt::format("{}: layers_done (expected 1..{}, got {})", progress.string(), m.num_layers(), done));
  }
  if (!j.contains("hidden") || !j.at("hidden").is_string() || j.at("hidden") != hidden_file(done - 1)) {
    throw FormatError(fmt::format("{}: hidden (expected \"{}\"; a state of another version: remove the directory "
                                  "to start over)", progress.string(), hidden_file(done - 1)));
  }
  // A lazy model keeps its compressed layers in these files (checkpoint::SaveOptions::layer_factors_dir).
  if (!m.lazy()) for (int i = 0; i < done; ++i) checkpoint::read_layer_factors(layer_file(i), m.layer(i));
  const io::SafetensorsFile file(dir_ / hidden_file(done - 1));
  hidden = file.matrix("hidden");
  if (dense) {
    if (file.find("dense") == nullptr) {
      throw FormatError(fmt::format("{}: no dense hidden states (expected the tensor \"dense\" of an error-compensating "
                                    "run; remove the directory to start over)", (dir_ / hidden_file(done - 1)).string()));
    }
    *dense = file.matrix("dense");
  }
  restore_report(j.at("report"), report);
  log_info("resume: layers 0..{} restored from {}", done - 1, dir_.string());
  return done;
}

void ResumeState::save_layer(const model::Model& m, int layer, const MatrixF& hidden, const MatrixF* dense,
                             const CompressReport& report) const {
  create();
  // The sparse methods rewrite the dense weights: those are the layer's progress.
  checkpoint::write_layer_factors(layer_file(layer), m.layer(layer), sparse_);
  std::vector<io::TensorToWrite> h = {
      {"hidden", DType::F32, {hidden.rows(), hidden.cols()},
       std::span<const float>(hidden.data(), static_cast<std::size_t>(hidden.size()))}};
  if (dense) {
    h.push_back({"dense", DType::F32, {dense->rows(), dense->cols()},
                 std::span<const float>(dense->data(), static_cast<std::size_t>(dense->size()))});
  }
  // The hidden states get a file per layer: progress.json (written last) names the one that matches
  // layers_done, so a kill between the two writes leaves the previous layer's state consistent.
  io::write_safetensors(dir_ / hidden_file(layer), h);
  const nlohmann::json j = {{"fingerprint", fingerprint_}, {"layers_done", layer + 1}, {"hidden", hidden_file(layer)},
                            {"report", report_json(report)}};
  core::write_text_atomic(dir_ / "progress.json", j.dump(1) + "\n");
  std::error_code ec;
  if (layer > 0) fs::remove(dir_ / hidden_file(layer - 1), ec);
}

bool ResumeState::holds_progress(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / "progress.json", ec) || fs::exists(dir / "plan.json", ec);
}

void ResumeState::check_not_discarded(const fs::path& dir, bool resume) {
  if (resume || !holds_progress(dir)) return;
  std::string done = "a global rank plan";
  std::error_code ec;
  if (fs::exists(dir / "progress.json", ec)) {
    const auto j = nlohmann::json::parse(core::read_file(dir / "progress.json"), nullptr, false);
    done = j.is_object() && j.contains("layers_done") && j["layers_done"].is_number_integer()
               ? fmt::format("{} finished layers", j["layers_done"].get<int>())
               : "unreadable progress";
  }
  throw ConfigError(fmt::format("{}: progress of an earlier run exists ({}; expected --resume to continue it, or "
                                "remove the directory to start over)", dir.string(), done));
}

void ResumeState::create() const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw IoError(fmt::format("{}: cannot create the progress directory ({})", dir_.string(), ec.message()));
}

fs::path ResumeState::layer_file(int layer) const { return checkpoint::layer_factors_file(dir_, layer); }

std::string ResumeState::hidden_file(int layer) { return fmt::format("hidden-{}.safetensors", layer); }

}  // namespace latentllm::compress

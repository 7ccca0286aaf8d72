// Compression reports as JSON (the CLI's --json, the resume state).
#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/ranges.h>

#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"

namespace latentllm::compress {
nlohmann::json JointLoss::to_json() const {
  return {{"layer", layer}, {"joint", joint}, {"local", std::isnan(local) ? nlohmann::json() : nlohmann::json(local)}};
}

JointLoss JointLoss::from_json(const nlohmann::json& j) {
  JointLoss l;
  l.layer = j.at("layer");
  l.joint = j.at("joint");
  if (!j.at("local").is_null()) l.local = j.at("local");
  return l;
}

void CompressReport::add_note(const NumericNote& n) {
  if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(n);
}

nlohmann::json note_to_json(const NumericNote& n) {
  return {{"module", n.module}, {"kind", n.kind}, {"detail", n.detail}};
}

NumericNote note_from_json(const nlohmann::json& j) {
  return {j.at("module").get<std::string>(), j.at("kind").get<std::string>(), j.at("detail").get<std::string>()};
}

nlohmann::json ModuleReport::to_json() const {
  return {{"name", name}, {"out", out}, {"in", in}, {"rank", rank}, {"dense_params", dense_params},
          {"params", params}, {"loss", loss}, {"loss_rel", loss_rel}, {"how", how}};
}

ModuleReport ModuleReport::from_json(const nlohmann::json& j) {
  ModuleReport r;
  r.name = j.at("name");
  r.out = j.at("out");
  r.in = j.at("in");
  r.rank = j.at("rank");
  r.dense_params = j.at("dense_params");
  r.params = j.at("params");
  r.loss = j.at("loss");
  r.loss_rel = j.at("loss_rel");
  r.how = j.at("how");
  return r;
}

void CompressReport::merge(CompressReport from) {
  CompressReport& into = *this;
  for (auto& r : from.modules) {
    into.dense_params += r.dense_params;
    into.params += r.params;
    into.modules.push_back(std::move(r));
  }
  for (const auto& n : from.notes) into.add_note(n);
  for (const auto& [part, s] : from.part_seconds) into.part_seconds[part] += s;
  into.jobs.insert(into.jobs.end(), from.jobs.begin(), from.jobs.end());
  into.jobs_at_once = std::max(into.jobs_at_once, from.jobs_at_once);
  into.qk_losses.insert(into.qk_losses.end(), from.qk_losses.begin(), from.qk_losses.end());
  into.vo_losses.insert(into.vo_losses.end(), from.vo_losses.begin(), from.vo_losses.end());
  into.ud_losses.insert(into.ud_losses.end(), from.ud_losses.begin(), from.ud_losses.end());
  into.times.forward += from.times.forward;
  into.times.covariance += from.times.covariance;
  into.times.compress += from.times.compress;
  into.times.consume += from.times.consume;
}

nlohmann::json CompressReport::to_json() const {
  nlohmann::json mods = nlohmann::json::array();
  for (const auto& r : modules) mods.push_back(r.to_json());
  nlohmann::json qk = nlohmann::json::array(), ud = nlohmann::json::array(), vo = nlohmann::json::array();
  for (const auto& l : qk_losses) qk.push_back(l.to_json());
  for (const auto& l : vo_losses) vo.push_back(l.to_json());
  for (const auto& l : ud_losses) ud.push_back(l.to_json());
  nlohmann::json jobs_json = nlohmann::json::array();
  for (const auto& jb : jobs) {
    jobs_json.push_back({{"layer", jb.layer}, {"stage", jb.stage}, {"what", jb.what}, {"rank", jb.rank},
                         {"thread", jb.thread}, {"seconds", jb.seconds}});
    if (!jb.after.empty()) jobs_json.back()["after"] = jb.after;
  }
  nlohmann::json notes_json = nlohmann::json::array();
  for (const auto& n : notes) notes_json.push_back(note_to_json(n));
  nlohmann::json j = {{"method", method_name(method)},
          {"ratio", ratio},
          {"rank_alloc", rank_alloc_name(rank_alloc)},
          {"prepass_seconds", prepass_s},
          {"modules", mods},
          {"attention_map_loss", qk},
          {"mlp_output_loss", ud},
          {"vo_output_loss", vo},
          {"notes", notes_json},
          {"dense_params", dense_params},
          {"params", params},
          {"layers", {{"done", layers_done}, {"total", layers_total}, {"resumed", layers_resumed}}},
          {"stage_seconds", {{"total", total_s},
                       {"calibration_sampling", calib_sample_s},
                       {"forward", times.forward},
                       {"covariance", times.covariance},
                       {"output_statistics", times.consume},
                       {"decompositions", times.compress},
                       {"decompositions_by_part", part_seconds},
                       {"decompositions_by_job", jobs_json},
                       {"decompositions_at_once", jobs_at_once}}},
          {"stage_flops", {{"forward", times.forward_flops}, {"covariance", times.covariance_flops},
                     {"output_statistics", times.consume_flops}}}};
  if (times.dense_forward > 0 || times.cross > 0) {  // error-compensating fits only
    j["stage_seconds"]["dense_forward"] = times.dense_forward;
    j["stage_seconds"]["cross"] = times.cross;
  }
  return j;
}

}  // namespace latentllm::compress

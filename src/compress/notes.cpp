#include "compress/notes.hpp"

#include <algorithm>

#include "latentllm/log.hpp"

namespace latentllm::compress {
namespace {

thread_local NoteCollector* g_current = nullptr;

}  // namespace

NoteCollector::NoteCollector(bool silent) : silent_(silent), outer_(g_current) { g_current = this; }

NoteCollector::~NoteCollector() { g_current = outer_; }

bool NoteCollector::add(NumericNote note) {
  if (std::find(notes_.begin(), notes_.end(), note) != notes_.end()) return false;
  notes_.push_back(std::move(note));
  return true;
}

std::string zero_covariance_detail(std::string_view what) {
  return fmt::format("the {} is zero (the calibration inputs of this module are all zero, or all equal for a module "
                     "with a bias): P = I, the plain SVD of the weight, since every factorization has zero "
                     "activation loss", what);
}

void record_note(std::string_view module, std::string_view kind, std::string detail) {
  NumericNote note{std::string(module), std::string(kind), std::move(detail)};
  const std::string text = note.message();
  if (g_current == nullptr) {
    log_warn("numerics [{}]: {}", kind, text);
  } else if (g_current->add(std::move(note)) && !g_current->silent()) {
    log_warn("numerics [{}]: {}", kind, text);
  }
}

}  // namespace latentllm::compress

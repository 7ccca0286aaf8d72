#include "compress/stages/notes.hpp"

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

std::vector<char> NotesJournal::capture(const std::function<void()>& work) {
  NoteCollector held(/*silent=*/true);
  work();
  graph::Bytes b;
  b.put<std::uint64_t>(held.notes().size());
  for (const NumericNote& n : held.notes()) b.put(n.module), b.put(n.kind), b.put(n.detail);
  return std::move(b.data());
}

void NotesJournal::replay(const std::vector<const std::vector<char>*>& recorded) {
  for (const std::vector<char>* r : recorded) {
    if (r->empty()) continue;
    graph::Bytes b(*r);
    auto n = b.get<std::uint64_t>();
    for (; n > 0; --n) {
      NumericNote note;
      b.get(note.module), b.get(note.kind), b.get(note.detail);
      record_note(note.module, note.kind, std::move(note.detail));
    }
  }
}

void NotesJournal::record(const std::vector<const std::vector<char>*>& recorded, const std::function<void()>& then) {
  NoteCollector collect;  // into the report, in order
  replay(recorded);
  if (then) then();
  for (const NumericNote& note : collect.notes()) report_.add_note(note);
}

}  // namespace latentllm::compress

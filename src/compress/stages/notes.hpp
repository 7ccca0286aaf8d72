// Recording numerical fallbacks (NumericNote, latentllm/compress.hpp) from deep inside the
// decompositions without threading a sink through every signature.
//
// record_note() logs the note as a warning and appends it to the innermost NoteCollector alive on
// this thread (none: logged only, so a fallback is never silent). The driver opens one collector per
// compression stage and moves its notes into the run's report. Identical notes (the same module,
// kind and detail, e.g. from the iterations of joint up-down) are kept and logged once per collector.
// A decomposition runs on one thread (the graph's tasks each on one of the pool's threads, each inside a
// capture of its own), so a thread-local stack suffices.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.hpp"
#include "latentllm/compress.hpp"

namespace latentllm::compress {

void record_note(std::string_view module, std::string_view kind, std::string detail);

// The detail of a "zero-covariance" note (the local and the joint solvers fall back alike).
std::string zero_covariance_detail(std::string_view what);

class NoteCollector {
 public:
  // silent: collect without logging, for computations whose result is not kept (the separate
  // compressions the driver only compares the joint ones against).
  explicit NoteCollector(bool silent = false);
  ~NoteCollector();
  NoteCollector(const NoteCollector&) = delete;
  NoteCollector& operator=(const NoteCollector&) = delete;

  const std::vector<NumericNote>& notes() const { return notes_; }
  bool add(NumericNote note);  // false when an identical note is already there
  bool silent() const { return silent_; }

 private:
  std::vector<NumericNote> notes_;
  bool silent_;
  NoteCollector* outer_;
};

// The task graph's journal (graph::Journal): what a task records is its numerical notes, captured
// silently on its owner and replayed on every rank; a record of the run adds them to `report`.
class NotesJournal final : public graph::Journal {
 public:
  explicit NotesJournal(CompressReport& report) : report_(report) {}
  std::vector<char> capture(const std::function<void()>& work) override;
  void replay(const std::vector<const std::vector<char>*>& recorded) override;
  void record(const std::vector<const std::vector<char>*>& recorded, const std::function<void()>& then) override;

 private:
  CompressReport& report_;
};

}  // namespace latentllm::compress

// Processes of one run (MPI ranks): a run started by mpirun / srun splits its calibration windows and
// evaluation windows across K processes and combines their statistics so that every result is
// byte-identical for any K (docs/SCALE.md, "Many processes"). Without MPI, or started as a plain
// process, there is one rank and nothing here communicates.
#pragma once

#include <cstdint>
#include <string>

namespace latentllm::dist {

// Whether this build can run under MPI (the CMake option LATENTLLM_MPI).
bool built_with_mpi();
// Starts the ranks when the process was launched by an MPI launcher (mpirun, srun: its environment
// says so), otherwise does nothing: a plain process is rank 0 of 1. Call once, first thing in main.
void init(int* argc, char*** argv);
// Ends MPI after a run every rank finished (no-op without it).
void finalize();
// Ends every rank of the run at once, after this rank printed its error: the others may be waiting
// in a collective that would never complete. Does not return; without MPI it exits with `code`.
[[noreturn]] void abort_all(int code);

int rank();  // this process's rank, 0..size()-1
int size();  // the ranks of the run (K)
inline bool is_root() { return rank() == 0; }
// "rank 1 of 3" for messages, empty with one rank.
std::string rank_label();

// What this rank is doing ("layer 3 (model.layers.3)"), for the message it prints when the launcher
// stops it because another rank failed or was killed (SIGTERM under K > 1 ranks).
void set_activity(const std::string& what);
// What the user can do after such a stop, appended to that message (compress: "finished layers stay
// in the progress directory: ..."); empty (the default) when the run leaves nothing to continue from.
void set_stop_advice(const std::string& advice);

// Bytes this rank sent and received through collectives, and the seconds spent in them (not counting
// the waits of small broadcasts for their root, which wait for its work, not for the network).
struct Traffic {
  std::int64_t bytes = 0;
  double seconds = 0;
};
Traffic traffic();

}  // namespace latentllm::dist

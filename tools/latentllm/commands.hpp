// Subcommand registry: each subcommand lives in its own file and registers itself here.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace latentllm::cli {

// How a command uses the ranks of an mpirun / srun launch (README "Many processes").
enum class Ranks {
  Split,  // every rank runs it on its share of the work, one result for any number of ranks
  Root,   // one piece of work (a prompt, a file): rank 0 runs it, the others end at once and wait
};

struct Command {
  CLI::App* app;                // the parsed subcommand
  std::function<int()> run;     // runs it; returns the exit code
  Ranks ranks = Ranks::Split;
};

// Adds every subcommand to `app`.
void register_commands(CLI::App& app);
// Runs the subcommand the user selected (a Ranks::Root command on rank 0 only: the other ranks return 0
// at once and wait for it in dist::finalize, which MPI_Abort ends if rank 0 fails).
int run_selected(CLI::App& app);
// The one-line message of an option-parser error, in the form of every other error (docs/ERRORS.md,
// "Command line"): an unknown command or option named with what was expected, a bad value with the
// option's name.
std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv);

// One per subcommand file (tools/latentllm/<name>.cpp).
Command add_inspect(CLI::App& app);
Command add_ppl(CLI::App& app);
Command add_compress(CLI::App& app);
Command add_sweep(CLI::App& app);
Command add_generate(CLI::App& app);
Command add_eval(CLI::App& app);
Command add_serve(CLI::App& app);
Command add_export(CLI::App& app);

}  // namespace latentllm::cli

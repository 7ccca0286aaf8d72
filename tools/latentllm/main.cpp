// latentllm command-line entry point: parses the subcommand, installs the stderr logger, and turns
// library exceptions and option-parser errors into one message and exit status 1. Only this file exits.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "commands.hpp"
#include "latentllm/dist.hpp"
#include "latentllm/error.hpp"
#include "latentllm/resources.hpp"
#include "latentllm/version.hpp"

namespace {

// Under K > 1 ranks the message names the rank, and the whole run ends now: the other ranks may be
// waiting for this one in a collective (dist::abort_all).
int fail(const std::string& message, int code = 1, const char* kind = "error") {
  const std::string rank = latentllm::dist::rank_label();
  std::fprintf(stderr, "latentllm: %s: %s%s%s\n", kind, rank.c_str(), rank.empty() ? "" : ": ", message.c_str());
  std::fflush(stderr);
  if (latentllm::dist::size() > 1) latentllm::dist::abort_all(code);
  return code;
}

int run(int argc, char** argv);

}  // namespace

int main(int argc, char** argv) {
  latentllm::dist::init(&argc, &argv);  // the ranks of an mpirun / srun launch; a plain process is rank 0 of 1
  const int code = run(argc, argv);
  latentllm::dist::finalize();
  return code;
}

namespace {

int run(int argc, char** argv) {
  latentllm::core::reuse_large_allocations();  // page faults otherwise dominate joint up-down
  CLI::App app{"latentllm: training-free compression of Hugging Face LLMs into latent models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "latentllm " + std::string(latentllm::version()) + " (commit " +
                                       std::string(latentllm::git_commit()) + ")");
  latentllm::cli::register_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // Parser errors follow the same contract as every other error (docs/ERRORS.md, "Command line").
    return fail(latentllm::cli::parse_error_message(app, e, argc, argv));
  }
  try {
    return latentllm::cli::run_selected(app);
  } catch (const latentllm::Error& e) {
    return fail(e.what());
  } catch (const std::exception& e) {
    return fail(e.what(), 2, "internal error");
  }
}

}  // namespace

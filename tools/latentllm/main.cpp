// latentllm command-line entry point: parses the subcommand, installs the stderr logger, and turns
// library exceptions and option-parser errors into one message and exit status 1. Only this file exits.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "commands.hpp"
#include "latentllm/error.hpp"
#include "latentllm/resources.hpp"

namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "latentllm: error: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  latentllm::core::reuse_large_allocations();  // page faults otherwise dominate joint up-down
  CLI::App app{"latentllm: training-free compression of Hugging Face LLMs into latent models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "latentllm 0.1.0");
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
    std::fprintf(stderr, "latentllm: internal error: %s\n", e.what());
    return 2;
  }
}

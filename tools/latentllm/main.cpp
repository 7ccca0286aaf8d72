// latentllm command-line entry point: parses the subcommand, installs the stderr logger, and turns
// library exceptions into one message and a non-zero exit. Only this file exits.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "latentllm/error.hpp"
#include "latentllm/resources.hpp"

int main(int argc, char** argv) {
  latentllm::core::reuse_large_allocations();  // page faults otherwise dominate joint up-down
  CLI::App app{"latentllm: training-free compression of Hugging Face LLMs into latent models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "latentllm 0.1.0");
  latentllm::cli::register_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return latentllm::cli::run_selected(app);
  } catch (const latentllm::Error& e) {
    std::fprintf(stderr, "latentllm: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "latentllm: internal error: %s\n", e.what());
    return 2;
  }
}

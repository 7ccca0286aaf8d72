// latentllm command-line entry point: parses the subcommand, installs the stderr logger, and turns
// library exceptions into one message and a non-zero exit. Only this file exits.
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "latentllm/error.hpp"

int main(int argc, char** argv) {
  // Compression allocates many short-lived [f, n] double matrices of tens of MiB. glibc serves
  // blocks above its mmap threshold (at most 32 MiB by default) with fresh zeroed pages each time,
  // so the kernel's page faults dominated; keep such blocks in the heap for reuse instead.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
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

#include "commands.hpp"

#include "latentllm/error.hpp"

namespace latentllm::cli {

Command add_ppl(CLI::App& app) {
  auto* sub = app.add_subcommand("ppl", "(not yet implemented)");
  return {sub, [] () -> int { throw ConfigError("ppl: not yet implemented"); }};
}

}  // namespace latentllm::cli

#include "commands.hpp"

#include "latentllm/error.hpp"

namespace latentllm::cli {

Command add_inspect(CLI::App& app) {
  auto* sub = app.add_subcommand("inspect", "(not yet implemented)");
  return {sub, [] () -> int { throw ConfigError("inspect: not yet implemented"); }};
}

}  // namespace latentllm::cli

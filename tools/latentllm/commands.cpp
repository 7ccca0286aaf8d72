#include "commands.hpp"

#include "latentllm/error.hpp"

namespace latentllm::cli {
namespace {
std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace

void register_commands(CLI::App& app) {
  registry().push_back(add_inspect(app));
  registry().push_back(add_ppl(app));
  registry().push_back(add_compress(app));
  registry().push_back(add_sweep(app));
  registry().push_back(add_generate(app));
}

int run_selected(CLI::App& app) {
  for (auto& c : registry())
    if (c.app->parsed()) return c.run();
  (void)app;
  throw ConfigError("no subcommand selected");
}

}  // namespace latentllm::cli

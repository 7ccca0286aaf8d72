#include "commands.hpp"

#include <regex>

#include <fmt/format.h>

#include "latentllm/dist.hpp"
#include "latentllm/error.hpp"
#include "options.hpp"

namespace latentllm::cli {
namespace {
std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

std::string command_names(const CLI::App& app) {
  std::string s;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    s += (s.empty() ? "" : ", ") + sub->get_name();
  return s;
}

// The subcommand named on the command line (the first argument that is not an option), or null.
const CLI::App* named_command(const CLI::App& app, int argc, char** argv, std::string* first) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') continue;
    if (first) *first = arg;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      if (sub->get_name() == arg) return sub;
    return nullptr;
  }
  return nullptr;
}

// "a number" for an option of type FLOAT, ...: what the value should have been.
std::string expected_value(const CLI::App* sub, const std::string& name) {
  const CLI::Option* opt = sub ? sub->get_option_no_throw(name) : nullptr;
  const std::string type = opt ? opt->get_type_name() : "";
  if (type.rfind("FLOAT", 0) == 0) return "a number";
  if (type.rfind("INT", 0) == 0) return "an integer";
  if (type.rfind("UINT", 0) == 0) return "a non-negative integer";
  return "a value";
}

}  // namespace

void register_commands(CLI::App& app) {
  registry().push_back(add_inspect(app));
  registry().push_back(add_ppl(app));
  registry().push_back(add_compress(app));
  registry().push_back(add_sweep(app));
  registry().push_back(add_generate(app));
  registry().push_back(add_eval(app));
  registry().push_back(add_serve(app));
  registry().push_back(add_export(app));
}

int run_selected(CLI::App& app) {
  for (auto& c : registry()) {
    if (!c.app->parsed()) continue;
    if (c.ranks == Ranks::Root && dist::size() > 1) {
      if (!dist::is_root()) {
        dist::set_activity(fmt::format("the wait for rank 0 to run {}", c.app->get_name()));
        return 0;
      }
      run_on_root_only(c.app->get_name());
    }
    return c.run();
  }
  throw ConfigError(fmt::format("a command is required (expected one of {})", command_names(app)));
}

std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  std::string first;
  const CLI::App* sub = named_command(app, argc, argv, &first);
  const std::string what = e.what();
  if (!sub) {
    if (first.empty()) return fmt::format("a command is required (expected one of {})", command_names(app));
    return fmt::format("unknown command (expected one of {}, got {})", command_names(app), first);
  }
  const std::string cmd = sub->get_name();
  std::smatch m;
  if (std::regex_match(what, m, std::regex("The following arguments? (?:was|were) not expected: (.*)"))) {
    return fmt::format("{}: unknown option or argument (expected the options of latentllm {} --help, got {})", cmd,
                       cmd, m[1].str());
  }
  if (std::regex_match(what, m, std::regex("Could not convert: (\\S+) = (.*)"))) {
    return fmt::format("{}: invalid value (expected {}, got {})", m[1].str(), expected_value(sub, m[1].str()),
                       m[2].str());
  }
  if (std::regex_match(what, m, std::regex("(\\S+): (.*) not in \\{(.*)\\}"))) {
    return fmt::format("{}: unknown value (expected one of {}, got {})", m[1].str(),
                       std::regex_replace(m[3].str(), std::regex(","), ", "), m[2].str());
  }
  if (std::regex_match(what, m, std::regex("(\\S+): At Most 1 required but received (\\d+)"))) {
    return fmt::format("{}: given {} times (expected at most once)", m[1].str(), m[2].str());
  }
  if (std::regex_match(what, m, std::regex("(\\S+): \\d+ required \\S+ missing"))) {
    return fmt::format("{}: value missing (expected {} after it)", m[1].str(), expected_value(sub, m[1].str()));
  }
  if (std::regex_match(what, m, std::regex("(\\S+) is required"))) {
    return fmt::format("{}: {} is required (see latentllm {} --help)", cmd, m[1].str(), cmd);
  }
  return fmt::format("{}: {}", cmd, what);  // any other CLI11 error, with the command it concerns
}

}  // namespace latentllm::cli

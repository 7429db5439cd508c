// CommandRegistry: parse, map CLI11 errors to one-line messages and exit code 2, dispatch.
#include "cli/cli.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "common/log.h"
#include "engine/model/synthetic.h"

namespace kvserve::cli {

CommandRegistry::CommandRegistry(CLI::App* app) : app_(app) {
  app_->add_option("--log-level", log_level_, "Log level on stderr: trace, debug, info, warn, error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app_->fallthrough();  // subcommands accept the global options too
}

CLI::App* CommandRegistry::Add(const std::string& name, const std::string& description,
                               std::function<int()> run) {
  CLI::App* sub = app_->add_subcommand(name, description);
  commands_.push_back({sub, std::move(run)});
  return sub;
}

int CommandRegistry::ParseAndRun(int argc, char** argv) {
  app_->require_subcommand(1);
  try {
    app_->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app_->exit(e);  // --help
    // The subcommand the user was typing, if any, so the message says where to look.
    std::string where = "kvserve";
    for (const CLI::App* sub : app_->get_subcommands()) where += " " + sub->get_name();
    if (where == "kvserve" && !app_->remaining().empty()) {
      std::string names;
      for (const Command& c : commands_) names += (names.empty() ? "" : ", ") + c.sub->get_name();
      std::fprintf(stderr, "kvserve: unknown command '%s' (commands: %s; see 'kvserve --help')\n",
                   app_->remaining().front().c_str(), names.c_str());
      return kExitUsageError;
    }
    std::fprintf(stderr, "%s: %s (see '%s --help')\n", where.c_str(), e.what(), where.c_str());
    return kExitUsageError;
  }
  LogConfig log;
  log.level = log_level_;
  if (!InitLogging(log)) return ReportError("", "unknown log level '" + log_level_ + "'", kExitUsageError);
  for (const Command& c : commands_) {
    if (c.sub->parsed()) return c.run();
  }
  return kExitUsageError;  // unreachable: require_subcommand(1)
}

int ReportError(std::string_view command, std::string_view message, int exit_code) {
  std::fprintf(stderr, "kvserve%s%.*s: %.*s\n", command.empty() ? "" : " ", static_cast<int>(command.size()),
               command.data(), static_cast<int>(message.size()), message.data());
  return exit_code;
}

int ReportError(std::string_view command, const Status& status) {
  const bool usage = status.code() == StatusCode::kInvalidArgument ||
                     status.code() == StatusCode::kOutOfRange;
  return ReportError(command, status.message(), usage ? kExitUsageError : kExitRuntimeError);
}

int LoadModel(std::string_view command, const std::string& spec, const ModelLoadOptions& options,
              std::unique_ptr<Model>* model) {
  if (IsSyntheticSpec(spec)) {
    StatusOr<SyntheticOptions> parsed = ParseSyntheticSpec(spec, options);
    if (!parsed.ok()) return ReportError(command, parsed.status().message(), kExitUsageError);
  }
  StatusOr<std::unique_ptr<Model>> loaded = Model::Load(spec, options);
  if (!loaded.ok()) {
    const std::string& message = loaded.status().message();
    // Reader errors name the problem (tensor, key, offset); say which file it was.
    std::string line = message.find(spec) == std::string::npos
                           ? "cannot load model '" + spec + "': " + message
                           : "cannot load model: " + message;
    return ReportError(command, line, kExitRuntimeError);
  }
  *model = std::move(loaded).value();
  return kExitOk;
}

}  // namespace kvserve::cli

// The `kvserve` command line: a tiny registry of subcommands on top of CLI11.
//
// Each subcommand lives in its own file (server/cli_<name>.cpp) and exposes one
// `Register<Name>Command(CommandRegistry&)` that adds a CLI11 subcommand, binds its options
// to a struct it owns and registers the function that runs it. main() registers every
// subcommand, parses, and runs the one that was chosen. New subcommands (serve, plan,
// bench-serve, ...) are a new file and one line in main.cpp.
//
// Exit codes: 0 success, 1 runtime error (model missing or corrupt, forward failure),
// 2 usage error (bad or missing option). Errors are one line on stderr:
// "kvserve <command>: <message>". Main thread only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/model/weights.h"

namespace CLI {
class App;
}

namespace kvserve::cli {

enum ExitCode : int { kExitOk = 0, kExitRuntimeError = 1, kExitUsageError = 2 };

class CommandRegistry {
 public:
  // The top-level app (owned by the caller; must outlive the registry).
  explicit CommandRegistry(CLI::App* app);

  CLI::App& app() { return *app_; }

  // Adds subcommand `name` and returns it for options to be bound; `run` is called when the
  // user chose it and returns the process exit code.
  CLI::App* Add(const std::string& name, const std::string& description,
                std::function<int()> run);

  // Parses argv, installs the stderr logger (--log-level, accepted before or after the
  // subcommand) and runs the chosen subcommand. Returns the exit code.
  [[nodiscard]] int ParseAndRun(int argc, char** argv);

 private:
  struct Command {
    CLI::App* sub;
    std::function<int()> run;
  };
  CLI::App* app_;
  std::vector<Command> commands_;
  std::string log_level_ = "warn";
};

// Prints "kvserve <command>: <message>" to stderr and returns kExitUsageError for statuses a
// user's options cause (INVALID_ARGUMENT, OUT_OF_RANGE), kExitRuntimeError otherwise.
int ReportError(std::string_view command, const Status& status);
// Same, with an explicit exit code.
int ReportError(std::string_view command, std::string_view message, int exit_code);

// Loads `spec` (GGUF path or synthetic:<preset>[:<dtype>]) into *model. On failure prints a
// line naming the file and the problem and returns the exit code (2 for an unknown synthetic
// preset or weight type, 1 for a missing, unreadable or corrupt file); 0 on success.
[[nodiscard]] int LoadModel(std::string_view command, const std::string& spec,
                            const ModelLoadOptions& options, std::unique_ptr<Model>* model);

// Subcommands (one file each).
void RegisterGenerateCommand(CommandRegistry& registry);
void RegisterMaskbenchCommand(CommandRegistry& registry);
void RegisterMkmodelCommand(CommandRegistry& registry);
void RegisterServeCommand(CommandRegistry& registry);
void RegisterSoakCommand(CommandRegistry& registry);
void RegisterBenchServeCommand(CommandRegistry& registry);
void RegisterPlanCommand(CommandRegistry& registry);
void RegisterKvSensitivityCommand(CommandRegistry& registry);
void RegisterHealthcheckCommand(CommandRegistry& registry);

}  // namespace kvserve::cli

// kvserve: the command-line entry point. Registers every subcommand (one file each, see
// cli/cli.h), parses argv and runs the chosen one.
#include <CLI/CLI.hpp>

#include "cli/cli.h"

int main(int argc, char** argv) {
  CLI::App app{"kvserve: an LLM text-generation server over a paged KV cache"};
  app.option_defaults()->always_capture_default();
  kvserve::cli::CommandRegistry registry(&app);
  kvserve::cli::RegisterGenerateCommand(registry);
  kvserve::cli::RegisterMkmodelCommand(registry);
  kvserve::cli::RegisterServeCommand(registry);
  kvserve::cli::RegisterSoakCommand(registry);
  kvserve::cli::RegisterBenchServeCommand(registry);
  kvserve::cli::RegisterPlanCommand(registry);
  kvserve::cli::RegisterKvSensitivityCommand(registry);
  kvserve::cli::RegisterHealthcheckCommand(registry);
  kvserve::cli::RegisterMaskbenchCommand(registry);
  return registry.ParseAndRun(argc, argv);
}

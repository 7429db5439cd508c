// `kvserve kv-sensitivity`: quantizes the KV cache of one layer at a time (the others at
// F16), measures the error of next-token distributions on sample text against an all-F16
// cache, and prints which layers to keep at higher precision (a --kv-keep value).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tools/kv_sensitivity/kv_sensitivity.h"
#include "cli/cli.h"
#include "cli/engine_options.h"

namespace kvserve::cli {
namespace kv_sensitivity_command {

constexpr char kCommand[] = "kv-sensitivity";

struct SensitivityOptions {
  std::string model = "synthetic:tiny";
  std::string kv_dtype = "int4c";
  std::string text_file;
  int tokens = 256;
};

int RunSensitivity(const SensitivityOptions& o) {
  const std::optional<KvDtype> dtype = ParseKvDtype(o.kv_dtype);
  if (!dtype || !IsQuantized(*dtype)) {
    return ReportError(kCommand, "--kv-dtype must be int8 or int4c", kExitUsageError);
  }
  std::string text;
  if (!o.text_file.empty()) {
    std::ifstream in(o.text_file);
    if (!in) return ReportError(kCommand, "cannot read '" + o.text_file + "'", kExitRuntimeError);
    std::ostringstream all;
    all << in.rdbuf();
    text = all.str();
  }
  std::unique_ptr<Model> model;
  if (const int rc = LoadModel(kCommand, o.model, ModelLoadOptions{}, &model); rc != kExitOk) return rc;
  StatusOr<KvSensitivityReport> report = MeasureKvSensitivity(*model, *dtype, text, o.tokens);
  if (!report.ok()) return ReportError(kCommand, report.status());
  std::printf("%s", FormatKvSensitivityReport(*report).c_str());
  return kExitOk;
}

}  // namespace kv_sensitivity_command

void RegisterKvSensitivityCommand(CommandRegistry& registry) {
  using namespace kv_sensitivity_command;
  auto options = std::make_shared<SensitivityOptions>();
  CLI::App* sub = registry.Add(kCommand, "Which layers lose most when their KV cache is quantized",
                               [options] { return RunSensitivity(*options); });
  sub->add_option("-m,--model", options->model, "GGUF file or synthetic:<preset>[:<dtype>]");
  sub->add_option("--kv-dtype", options->kv_dtype, "Quantized type to test: int8 or int4c")
      ->check(KvDtypeCheck({"int8", "int4c"}))
      ->capture_default_str();
  sub->add_option("--text", options->text_file, "Sample text file (default: built-in English text)");
  sub->add_option("--tokens", options->tokens, "Tokens of sample text to use")->check(CLI::Range(8, 1 << 20));
}

}  // namespace kvserve::cli

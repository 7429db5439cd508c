// `kvserve mkmodel`: writes a synthetic model (the very tensors `--model synthetic:<preset>`
// builds in memory: same generator, same seed) to a GGUF file, then re-opens the file to
// check it parses and prints what it holds.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/model/gguf.h"
#include "engine/model/synthetic.h"
#include "cli/cli.h"

namespace kvserve::cli {
namespace mkmodel_command {

constexpr char kCommand[] = "mkmodel";

struct MkmodelOptions {
  std::string preset;
  int layers = 0;
  std::string dtype = "f16";
  uint64_t seed = ModelLoadOptions{}.seed;  // the seed synthetic:<preset> uses
  std::string output;
  VocabSource vocab;  // path empty: the preset's built-in vocabulary
  std::string chat_template_file;
};

int RunMkmodel(const MkmodelOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  // Fail before minutes of weight generation, not after.
  const std::filesystem::path parent = std::filesystem::absolute(o.output).parent_path();
  if (!std::filesystem::is_directory(parent)) {
    return ReportError(kCommand, "cannot write '" + o.output + "': " + parent.string() + " is not a directory",
                       kExitRuntimeError);
  }
  SyntheticOptions so;
  so.preset = *FindSyntheticPreset(o.preset);  // checked by the option's validator
  so.dtype = *ParseGgmlType(o.dtype);
  so.num_layers = o.layers;
  so.seed = o.seed;
  if (!o.vocab.path.empty()) {
    VocabSource source = o.vocab;
    if (!o.chat_template_file.empty()) {
      std::ifstream in(o.chat_template_file);
      if (!in) return ReportError(kCommand, "cannot read " + o.chat_template_file, kExitUsageError);
      source.chat_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    StatusOr<Vocab> vocab = LoadVocabForSynthetic(source);
    if (!vocab.ok()) return ReportError(kCommand, vocab.status().message(), kExitUsageError);
    so.preset.vocab_size = static_cast<int>(vocab->tokens.size());
    so.vocab = std::move(vocab).value();
  }
  StatusOr<GgufWriter> writer = MakeSyntheticGguf(so);
  if (!writer.ok()) return ReportError(kCommand, writer.status().message(), kExitUsageError);
  if (Status s = writer->WriteFile(o.output); !s.ok()) return ReportError(kCommand, s.message(), kExitRuntimeError);

  StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(o.output);
  if (!file.ok()) {
    return ReportError(kCommand, "wrote '" + o.output + "' but cannot read it back: " + file.status().message(),
                       kExitRuntimeError);
  }
  uint64_t params = 0;
  for (const GgufTensorInfo& t : (*file)->tensors()) params += t.num_elements;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s: synthetic %s, %d layers, dim %d, %d heads (%d KV), FFN %d, vocab %d, %s matrices; "
              "%zu tensors, %.1f M parameters, %.1f MiB, seed %llu (%.1f s)\n",
              o.output.c_str(), std::string(so.preset.name).c_str(),
              o.layers > 0 ? o.layers : so.preset.num_layers, so.preset.dim, so.preset.num_heads,
              so.preset.num_kv_heads, so.preset.ffn_dim, so.preset.vocab_size,
              std::string(GgmlTypeName(so.dtype)).c_str(), (*file)->tensors().size(), params / 1e6,
              (*file)->file_size() / 1048576.0, static_cast<unsigned long long>(o.seed), seconds);
  return kExitOk;
}

}  // namespace mkmodel_command

void RegisterMkmodelCommand(CommandRegistry& registry) {
  using namespace mkmodel_command;
  auto o = std::make_shared<MkmodelOptions>();
  CLI::App* sub = registry.Add(kCommand, "Write a synthetic Llama-shaped model with seeded random weights to GGUF",
                               [o] { return RunMkmodel(*o); });
  std::vector<std::string> presets;
  for (const SyntheticPreset& p : SyntheticPresets()) presets.emplace_back(p.name);
  sub->add_option("--preset", o->preset, "Model shape")->required()->check(CLI::IsMember(presets));
  sub->add_option("--layers", o->layers, "Number of layers (0 = the preset's)")->check(CLI::Range(0, 1024));
  sub->add_option("--dtype", o->dtype, "Matrix type (norms are always f32)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k"}));
  sub->add_option("--seed", o->seed, "Weight seed (the default is the one synthetic:<preset> uses)");
  sub->add_option("-o,--output", o->output, "Output file (.gguf)")->required();
  sub->add_option("--vocab", o->vocab.path, "Take the vocabulary from this GGUF (e.g. a vocab-only one) instead "
                                            "of the preset's")
      ->check(CLI::ExistingFile);
  sub->add_option("--control-token", o->vocab.control, "With --vocab: a control token to append unless the "
                                                       "vocabulary has it (repeatable)");
  sub->add_option("--bos", o->vocab.bos, "With --vocab: the text of the beginning-of-sequence token");
  sub->add_option("--eos", o->vocab.eos, "With --vocab: the text of the end-of-sequence token");
  sub->add_option("--chat-template", o->chat_template_file, "With --vocab: a file with the chat template "
                                                            "(Jinja text) to store")
      ->check(CLI::ExistingFile);
}

}  // namespace kvserve::cli

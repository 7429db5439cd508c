// `kvserve maskbench [--vocab FILE.gguf] [--threads N] [--time-limit-s S] PATH...`: MaskBench
// (tools/maskbench) over files and folders of MaskBench JSON files. One JSON line per file
// (file, status, ttfm_us, num_tokens, tbm_us_max; detail when it did not pass), then a summary
// line with the counts per status and the TBM and TTFM percentiles. Each file runs on one
// thread (--threads runs files side by side); times are wall-clock microseconds.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "cli/cli.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_vocab.h"
#include "tools/maskbench/maskbench.h"

namespace kvserve::cli {
namespace maskbench_command {

constexpr char kCommand[] = "maskbench";

struct Options {
  std::string vocab;
  std::string model = "synthetic:tiny";
  int threads = 1;
  double time_limit_s = 60;
  bool cold = false;
  std::vector<std::string> paths;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  return v[i];
}

int Run(const Options& o) {
  std::unique_ptr<Tokenizer> own_tokenizer;
  std::unique_ptr<Model> model;
  const Tokenizer* tokenizer = nullptr;
  if (!o.vocab.empty()) {
    auto file = GgufFile::Open(o.vocab);
    if (!file.ok()) return ReportError(kCommand, file.status());
    auto vocab = LoadVocab(**file);
    if (!vocab.ok()) return ReportError(kCommand, vocab.status());
    auto tok = Tokenizer::Create(std::move(vocab).value());
    if (!tok.ok()) return ReportError(kCommand, tok.status());
    own_tokenizer = std::move(tok).value();
    tokenizer = own_tokenizer.get();
  } else {
    if (const int rc = LoadModel(kCommand, o.model, ModelLoadOptions{}, &model); rc != kExitOk) return rc;
    tokenizer = &model->tokenizer();
  }
  std::vector<std::string> files;
  for (const std::string& p : o.paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(p)) {
        if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path().string());
      }
    } else if (std::filesystem::exists(p, ec)) {
      files.push_back(p);
    } else {
      return ReportError(kCommand, "no such file or folder: " + p, kExitUsageError);
    }
  }
  std::sort(files.begin(), files.end());
  const TokenTrie trie(*tokenizer);
  MaskBenchOptions options;
  options.time_limit_s = o.time_limit_s;
  if (!o.cold) options.shared_masks = std::make_shared<SharedMaskCache>();
  std::vector<MaskBenchResult> results(files.size());
  std::atomic<size_t> next{0};
  std::mutex out_mu;
  auto worker = [&] {
    for (size_t i = next++; i < files.size(); i = next++) {
      results[i] = RunMaskBenchFile(files[i], *tokenizer, trie, options);
      const MaskBenchResult& r = results[i];
      nlohmann::ordered_json line = {{"file", r.file}, {"status", r.status}, {"ttfm_us", std::round(r.ttfm_us)},
                                     {"num_tokens", r.num_tokens}, {"tbm_us_max", std::round(r.tbm_us_max)}};
      if (!r.detail.empty()) line["detail"] = r.detail;
      std::lock_guard lock(out_mu);
      std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      std::fflush(stdout);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, o.threads); ++t) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  std::map<std::string, int> counts = {{"passing", 0}, {"compile_error", 0}, {"validation_error", 0},
                                       {"invalidation_error", 0}, {"timeout", 0}};
  std::vector<double> tbm, ttfm;
  for (const MaskBenchResult& r : results) {
    ++counts[r.status];
    tbm.insert(tbm.end(), r.tbm_us.begin(), r.tbm_us.end());
    if (r.status != "compile_error" && r.status != "read_error") ttfm.push_back(r.ttfm_us);
  }
  nlohmann::ordered_json summary = {{"files", files.size()}};
  for (const auto& [status, n] : counts) summary[status] = n;
  nlohmann::ordered_json tbm_p, ttfm_p;
  for (auto [name, p] : {std::pair{"p50", 50.0}, {"p75", 75.0}, {"p90", 90.0}, {"p95", 95.0}, {"p99", 99.0}, {"p999", 99.9}}) {
    tbm_p[name] = std::round(Percentile(tbm, p) * 10) / 10;
  }
  tbm_p["max"] = std::round(Percentile(tbm, 100));
  for (auto [name, p] : {std::pair{"p50", 50.0}, {"p90", 90.0}, {"p99", 99.0}}) ttfm_p[name] = std::round(Percentile(ttfm, p));
  ttfm_p["max"] = std::round(Percentile(ttfm, 100));
  summary["tbm_us"] = tbm_p;
  summary["ttfm_us"] = ttfm_p;
  std::printf("%s\n", nlohmann::ordered_json{{"summary", summary}}.dump().c_str());
  return counts["invalidation_error"] > 0 ? kExitRuntimeError : kExitOk;
}

}  // namespace maskbench_command

void RegisterMaskbenchCommand(CommandRegistry& registry) {
  auto o = std::make_shared<maskbench_command::Options>();
  CLI::App* sub = registry.Add(maskbench_command::kCommand,
                               "MaskBench: JSON Schema token masks checked on valid and invalid instances",
                               [o] { return maskbench_command::Run(*o); });
  sub->add_option("paths", o->paths, "MaskBench JSON files or folders of them")->required();
  sub->add_option("--vocab", o->vocab, "a GGUF file whose vocabulary tokenizes the instances");
  sub->add_option("--model", o->model, "without --vocab: the model whose tokenizer to use")->capture_default_str();
  sub->add_option("--threads", o->threads, "files checked side by side (each on one thread)")->capture_default_str();
  sub->add_option("--time-limit-s", o->time_limit_s, "per file; past it the file is a timeout")->capture_default_str();
  sub->add_flag("--cold", o->cold,
                "no trie walks shared between files (the engine shares them between requests): each schema pays its own");
}

}  // namespace kvserve::cli

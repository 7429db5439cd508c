// `kvserve plan`: how many sequences fit in a memory budget next to a model's weights, for
// every KV-cache dtype (and a layered setting with --kv-keep, a compacted one with
// --kv-compact-dtype). Reads only the model's shape: a GGUF file is mapped, never loaded; a
// synthetic preset is not built. The engine sizes its pool with the same planner functions
// (cache/capacity_planner.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include "cache/capacity_planner.h"
#include "engine/backend/backend_factory.h"
#include "engine/model/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic.h"
#include "engine/model/weights.h"
#include "cli/cli.h"
#include "cli/engine_options.h"

namespace kvserve::cli {
namespace plan_command {

constexpr char kCommand[] = "plan";

struct PlanOptions {
  std::string model;
  std::string memory;
  std::string reserve = "0";
  int ctx = 2048;
  std::string kv_dtype = "all";
  std::string kv_keep;
  std::string kv_keep_dtype = "f16";
  int block_size = 0;  // 0: DefaultBlockSize per KV dtype
  std::string kv_compact_dtype = "none";
  CompactionPlan compaction;
};

struct ModelShape {
  KvSpecConfig kv;        // layers, kv heads, head dim
  int64_t weight_bytes = 0;
  std::string description;
};

// Weight bytes as the CPU kernels hold them in the default compute mode (int8).
int64_t ServedBytes(const GgufTensorInfo& t) {
  return CpuWeightBytes(t.type, static_cast<int64_t>(t.num_elements), static_cast<int64_t>(t.nbytes));
}

StatusOr<ModelShape> ReadShape(const std::string& spec) {
  ModelShape s;
  if (IsSyntheticSpec(spec)) {
    ASSIGN_OR_RETURN(SyntheticOptions o, ParseSyntheticSpec(spec, ModelLoadOptions{}));
    const SyntheticPreset& p = o.preset;
    LlamaShape shape{p.vocab_size, p.dim, o.num_layers > 0 ? o.num_layers : p.num_layers, p.num_heads,
                     p.num_kv_heads, 0, p.ffn_dim, false};
    const double bits = o.dtype == GgmlType::kF32    ? 32
                        : o.dtype == GgmlType::kQ8_0 ? 8.5
                        : o.dtype == GgmlType::kQ4_0 ? 4.5
                                                     : 16;
    s.weight_bytes = EstimateLlamaWeightBytes(shape, bits);
    s.kv.num_layers = static_cast<int>(shape.num_layers);
    s.kv.num_kv_heads = p.num_kv_heads;
    s.kv.head_dim = p.dim / p.num_heads;
    s.description = spec;
    return s;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(spec));
  ASSIGN_OR_RETURN(ModelConfig config, ReadModelConfig(*file));
  for (const GgufTensorInfo& t : file->tensors()) s.weight_bytes += ServedBytes(t);
  s.kv.num_layers = config.num_layers;
  s.kv.num_kv_heads = config.num_kv_heads;
  s.kv.head_dim = config.head_dim;
  s.description = spec + " (" + config.Describe() + ")";
  return s;
}

int RunPlan(const PlanOptions& o) {
  StatusOr<ModelShape> shape = ReadShape(o.model);
  if (!shape.ok()) return ReportError(kCommand, shape.status());
  StatusOr<int64_t> memory = ParseByteSize(o.memory);
  StatusOr<int64_t> reserve = ParseByteSize(o.reserve);
  if (!memory.ok()) return ReportError(kCommand, "--memory: " + memory.status().message(), kExitUsageError);
  if (!reserve.ok()) return ReportError(kCommand, "--reserve: " + reserve.status().message(), kExitUsageError);
  CapacityPlanConfig c;
  c.kv = shape->kv;
  c.kv.block_size = o.block_size;
  c.weight_bytes = shape->weight_bytes;
  c.memory_bytes = *memory;
  c.reserve_bytes = *reserve;
  c.context_tokens = o.ctx;
  std::vector<KvDtype> dtypes;
  if (o.kv_dtype == "all") {
    for (KvDtype d : AllKvDtypes()) {
      if (d != KvDtype::kInt4) dtypes.push_back(d);  // not offered (KvDtypeCheck)
    }
  } else if (std::optional<KvDtype> d = ParseKvDtype(o.kv_dtype)) {
    dtypes = {*d};
    c.kv.dtype = *d;
  } else {
    return ReportError(kCommand, "--kv-dtype: unknown type '" + o.kv_dtype + "'", kExitUsageError);
  }
  if (!o.kv_keep.empty()) {
    std::optional<KvDtype> keep = ParseKvDtype(o.kv_keep_dtype);
    if (!keep) return ReportError(kCommand, "--kv-keep-dtype: unknown type '" + o.kv_keep_dtype + "'", kExitUsageError);
    StatusOr<std::vector<KvSpecConfig::Keep>> kept = ParseKvKeep(o.kv_keep);
    if (!kept.ok()) return ReportError(kCommand, kept.status());
    c.kv.keep = *kept;
    c.kv.keep_dtype = *keep;
    if (o.kv_dtype == "all") c.kv.dtype = KvDtype::kInt8;  // the layered row quantizes the rest
  }
  StatusOr<std::vector<CapacityPlanRow>> rows = PlanCapacityTable(c, dtypes);
  if (!rows.ok()) return ReportError(kCommand, rows.status());
  double balanced_share = 0;
  int64_t balanced_seqs = 0;
  bool never_compacted = false;
  if (o.kv_compact_dtype != "none") {
    CompactionPlan compaction = o.compaction;
    compaction.dtype = *ParseKvDtype(o.kv_compact_dtype);
    CapacityPlanConfig main = c;
    if (o.kv_dtype == "all" && o.kv_keep.empty()) main.kv.dtype = KvDtype::kF16;  // the server's default
    StatusOr<CapacityPlanRow> row = PlanCapacityCompacted(main, compaction);
    if (!row.ok()) return ReportError(kCommand, "--kv-compact-dtype: " + row.status().message(), kExitUsageError);
    never_compacted = row->compact_bytes_per_sequence == 0;
    // The share at which both regions run out together for this context.
    balanced_share = std::clamp(static_cast<double>(row->compact_bytes_per_sequence) /
                                    static_cast<double>(row->kv_bytes_per_sequence), 0.01, 0.99);
    compaction.share = balanced_share;
    balanced_seqs = PlanCapacityCompacted(main, compaction)->max_sequences;
    rows->push_back(*std::move(row));
  }
  std::printf("model:    %s\nweights:  %s\nmemory:   %s (reserve %s)\ncontext:  %d tokens per sequence\n\n%s",
              shape->description.c_str(), FormatBytes(static_cast<double>(shape->weight_bytes)).c_str(),
              FormatBytes(static_cast<double>(*memory)).c_str(), FormatBytes(static_cast<double>(*reserve)).c_str(),
              o.ctx, FormatCapacityPlan(*rows).c_str());
  if (o.kv_compact_dtype != "none") {
    std::printf("\nlast row: old context compacted every %lld tokens, newest %lld kept, %.0f%% of the KV memory for\n"
                "compacted blocks; worst-case blocks per sequence, so max seqs is a lower bound.\n",
                static_cast<long long>(o.compaction.every_tokens), static_cast<long long>(o.compaction.keep_tokens),
                100 * o.compaction.share);
    if (never_compacted) {
      std::printf("%d-token sequences never fill a block past --kv-compact-keep %lld: the region only costs memory\n",
                  o.ctx, static_cast<long long>(o.compaction.keep_tokens));
    } else {
      std::printf("For %d-token sequences --kv-compact-share %.2f fills both regions together: %lld sequences\n", o.ctx,
                  balanced_share, static_cast<long long>(balanced_seqs));
    }
  }
  return kExitOk;
}

}  // namespace plan_command

void RegisterPlanCommand(CommandRegistry& registry) {
  using namespace plan_command;
  auto options = std::make_shared<PlanOptions>();
  CLI::App* sub = registry.Add(kCommand, "How many sequences of a context length fit in a memory budget, per KV dtype",
                               [options] { return RunPlan(*options); });
  sub->add_option("-m,--model", options->model, "GGUF file or synthetic:<preset>[:<dtype>] (only its shape is read)")
      ->required();
  sub->add_option("--memory", options->memory, "Memory for the server, e.g. 40GiB, 80GB, 24G")->required();
  sub->add_option("--reserve", options->reserve, "Memory kept for activations and runtime, e.g. 2GiB");
  sub->add_option("--ctx", options->ctx, "Tokens per sequence")->check(CLI::PositiveNumber);
  sub->add_option("--kv-dtype", options->kv_dtype, "all, or one of f32, f16, bf16, int8, int4c")
      ->check(KvDtypeCheck({"all", "f32", "f16", "bf16", "int8", "int4c"}));
  sub->add_option("--kv-keep", options->kv_keep, "Layered precision row: layers=0,1 or heads=L:H,... kept at --kv-keep-dtype");
  sub->add_option("--kv-keep-dtype", options->kv_keep_dtype, "Element type of the --kv-keep layers or heads");
  sub->add_option("--block-size", options->block_size, "KV block size in tokens (default 16; 32 with int4c)")->check(CLI::Range(1, 1024));
  sub->add_option("--kv-compact-dtype", options->kv_compact_dtype,
                  "Adds a row with old context compacted to this dtype (as serve's flag; the row's main dtype is "
                  "--kv-dtype, f16 for all)")
      ->check(KvDtypeCheck({"none", "int8", "int4c"}));
  sub->add_option("--kv-compact-share", options->compaction.share, "Share of the KV memory for compacted blocks")
      ->check(CLI::Range(0.01, 0.99));
  sub->add_option("--kv-compact-every", options->compaction.every_tokens, "Tokens a sequence computes between compactions")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--kv-compact-keep", options->compaction.keep_tokens, "Newest tokens of a sequence kept at --kv-dtype")
      ->check(CLI::Range(0, 1 << 24));
}

}  // namespace kvserve::cli

#include "bench/kv_schemes.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "cache/kv_codec.h"
#include "common/check.h"
#include "common/fp16.h"
#include "tools/kv_sensitivity/kv_sensitivity.h"

namespace kvserve {
namespace {

enum class Mode {
  kTokenSym,     // per-token groups, scale = max|x| / (2^(b-1) - 1)     (kvserve before issue 16)
  kTokenAsym,    // per-token groups, scale + bias over [min, max]       (kvserve now)
  kHadamardSym,  // rotate the row by a normalized Walsh-Hadamard, then kTokenSym (QuaRot)
  kHadamardAsym, // rotate, then kTokenAsym
  kAnchor,       // row 0 of each block kept in f16; later rows: kTokenAsym of (row - row 0)
  kChannelF16,   // per-channel scale + bias over a full block; the filling block stays f16 (KIVI)
  kChannelInt8,  // per-channel over a full block, re-encoded from rows staged as 8-bit kTokenAsym
  kChannelSame,  // per-channel over a full block, re-encoded from rows staged at the same bits
};

struct Candidate {
  const char* name;
  Mode key;
  Mode value;
};

constexpr Candidate kCandidates[] = {
    {"per-token symmetric (before)", Mode::kTokenSym, Mode::kTokenSym},
    {"per-token asymmetric (shipped)", Mode::kTokenAsym, Mode::kTokenAsym},
    {"Hadamard + symmetric", Mode::kHadamardSym, Mode::kHadamardSym},
    {"Hadamard + asymmetric", Mode::kHadamardAsym, Mode::kHadamardAsym},
    {"K: f16 block anchor + asymmetric residual; V: asymmetric", Mode::kAnchor, Mode::kTokenAsym},
    {"K: per-channel in a block, f16 tail (KIVI); V: asymmetric", Mode::kChannelF16, Mode::kTokenAsym},
    {"K: per-channel, tail staged at 8 bits; V: asymmetric", Mode::kChannelInt8, Mode::kTokenAsym},
    {"K: per-channel, tail staged at the same bits; V: asymmetric", Mode::kChannelSame, Mode::kTokenAsym},
};

float RoundF16(float x) { return F16ToF32(F32ToF16(x)); }

// Quantize-dequantize n values x[0], x[stride], ... with an f16 scale (and bias): the
// symmetric scheme kvserve had before, and per-channel groups (a stride through a block).
void FakeQuantize(float* x, int n, int stride, int bits, bool asymmetric) {
  float lo = x[0], hi = x[0], amax = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i * stride]);
    hi = std::max(hi, x[i * stride]);
    amax = std::max(amax, std::fabs(x[i * stride]));
  }
  if (asymmetric) {
    const int half = 1 << (bits - 1);
    const float scale = RoundF16((hi - lo) / static_cast<float>(2 * half - 1));
    const float bias = RoundF16(lo + half * scale);
    const float inv = scale != 0 ? 1 / scale : 0;
    for (int i = 0; i < n; ++i) {
      const float q = std::clamp(std::nearbyint((x[i * stride] - bias) * inv), -half * 1.0f, half - 1.0f);
      x[i * stride] = q * scale + bias;
    }
  } else {
    const float max_q = static_cast<float>((1 << (bits - 1)) - 1);
    const float scale = RoundF16(amax / max_q);
    const float inv = scale != 0 ? 1 / scale : 0;
    for (int i = 0; i < n; ++i) {
      x[i * stride] = std::clamp(std::nearbyint(x[i * stride] * inv), -max_q, max_q) * scale;
    }
  }
}

// In-place normalized Walsh-Hadamard transform (its own inverse). REQUIRES n a power of two.
void Hadamard(float* x, int n) {
  CHECK_EQ(n & (n - 1), 0) << "Hadamard needs a power-of-two head dim";
  for (int h = 1; h < n; h *= 2) {
    for (int i = 0; i < n; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float s = 1 / std::sqrt(static_cast<float>(n));
  for (int i = 0; i < n; ++i) x[i] *= s;
}

// Per-token asymmetric groups are what the cache stores: run the row through the real codec
// (cache/kv_codec.h), one group per row.
void CodecRoundTrip(float* row, int hd, int bits) {
  const KvDtype d = bits == 8 ? KvDtype::kInt8 : KvDtype::kInt4;
  std::vector<uint8_t> data(KvRowDataBytes(d, hd));
  uint16_t params[kKvParamsPerGroup];
  EncodeKvRow(d, row, hd, hd, data.data(), params);
  DecodeKvRow(d, data.data(), params, hd, hd, row);
}

void Apply(Mode mode, int bits, float* rows, int offset, int block_size, int hd) {
  float* row = rows + static_cast<size_t>(offset) * hd;
  switch (mode) {
    case Mode::kTokenSym: FakeQuantize(row, hd, 1, bits, /*asymmetric=*/false); return;
    case Mode::kTokenAsym: CodecRoundTrip(row, hd, bits); return;
    case Mode::kHadamardSym:
    case Mode::kHadamardAsym:
      Hadamard(row, hd);
      if (mode == Mode::kHadamardAsym) {
        CodecRoundTrip(row, hd, bits);
      } else {
        FakeQuantize(row, hd, 1, bits, /*asymmetric=*/false);
      }
      Hadamard(row, hd);
      return;
    case Mode::kAnchor:
      if (offset == 0) {
        for (int i = 0; i < hd; ++i) row[i] = RoundF16(row[i]);
        return;
      }
      for (int i = 0; i < hd; ++i) row[i] -= rows[i];
      FakeQuantize(row, hd, 1, bits, true);
      for (int i = 0; i < hd; ++i) row[i] += rows[i];
      return;
    case Mode::kChannelF16:
    case Mode::kChannelInt8:
    case Mode::kChannelSame:
      if (mode == Mode::kChannelF16) {
        for (int i = 0; i < hd; ++i) row[i] = RoundF16(row[i]);
      } else {
        FakeQuantize(row, hd, 1, mode == Mode::kChannelInt8 ? 8 : bits, true);
      }
      if (offset == block_size - 1) {
        for (int c = 0; c < hd; ++c) FakeQuantize(rows + c, block_size, hd, bits, true);
      }
      return;
  }
}

// K + V bytes per token and kv head at head dim 128, block 16, over F16's 512.
double BytesRatio(const Candidate& c, int bits) {
  constexpr double kHd = 128, kBlock = 16;
  auto side = [&](Mode m) {
    const double data = kHd * bits / 8;
    switch (m) {
      case Mode::kTokenSym:
      case Mode::kHadamardSym: return data + 2;
      case Mode::kTokenAsym:
      case Mode::kHadamardAsym: return data + 4;
      case Mode::kAnchor: return data + 4 + kHd * 2 / kBlock;
      default: return data + kHd * 4 / kBlock;  // per-channel scale + bias per block
    }
  };
  return (side(c.key) + side(c.value)) / (4 * kHd);
}

}  // namespace

std::vector<NamedKvStoreHook> CandidateHooks(int bits) {
  std::vector<NamedKvStoreHook> hooks;
  for (const Candidate& c : kCandidates) {
    hooks.push_back({c.name, [c, bits](int kind, float* rows, int offset, int block_size, int hd) {
                       Apply(kind == 0 ? c.key : c.value, bits, rows, offset, block_size, hd);
                     }});
  }
  return hooks;
}

std::string CandidateSchemesTable(const Model& model, const std::vector<ScoredText>& texts) {
  const int V = model.config().vocab_size;
  auto scored_logits = [&](const KvStoreHook& hook) {
    KvSpecConfig kv;
    kv.dtype = KvDtype::kF32;
    std::vector<float> all;
    for (const auto& [tokens, prompt] : texts) {
      auto logits = TeacherForcedLogits(model, kv, tokens, hook);
      CHECK(logits.ok()) << logits.status().ToString();
      all.insert(all.end(), logits->begin() + (prompt - 1) * V, logits->begin() + (tokens.size() - 1) * V);
    }
    return all;
  };
  const std::vector<float> base = scored_logits({});
  std::string out =
      "| candidate (K / V) | bits | bytes / token x f16 at head dim 128 | TF top-1 = f32 | TF mean KL |\n"
      "|---|---|---|---|---|\n";
  for (int bits : {4, 8}) {
    const std::vector<NamedKvStoreHook> hooks = CandidateHooks(bits);
    for (size_t i = 0; i < hooks.size(); ++i) {
      const KvErrorStats e = CompareLogits(base, scored_logits(hooks[i].hook), V);
      out += fmt::format("| {} | {} | {:.3f} | {:.1f} % | {:.2e} |\n", hooks[i].name, bits,
                         BytesRatio(kCandidates[i], bits), 100 * e.top1_agreement, e.mean_kl);
    }
  }
  return out;
}

}  // namespace kvserve

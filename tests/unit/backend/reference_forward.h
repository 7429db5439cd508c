// A deliberately naive Llama forward pass for tests: dense, contiguous, double-precision
// accumulation, recomputing the whole sequence. The paged backends must agree with it. Also
// Q/K/V biases (qwen2), per-head Q/K norms (qwen3) and Gemma's scaled embeddings and GELU
// gate; not windows, soft-capping or post-norms (gemma2, phi3).
#pragma once

#include <cmath>
#include <vector>

#include "engine/model/weights.h"

namespace kvserve::testing {

// Logits of every position of `tokens` (token i at position positions[i], default i),
// [tokens.size()][vocab].
inline std::vector<std::vector<float>> ReferenceLogits(const Model& model, const std::vector<int32_t>& tokens,
                                                       std::vector<int> positions = {}) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  const int T = static_cast<int>(tokens.size());
  if (positions.empty()) {
    for (int i = 0; i < T; ++i) positions.push_back(i);
  }
  auto dequant = [](const WeightMatrix& m) {
    std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) DequantizeRow(m.type, m.row(r), &out[r * m.cols], m.cols);
    return out;
  };
  auto matvec = [](const std::vector<float>& W, int64_t rows, int64_t cols, const std::vector<double>& x) {
    std::vector<double> y(rows);
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t k = 0; k < cols; ++k) s += W[r * cols + k] * x[k];
      y[r] = s;
    }
    return y;
  };
  auto rmsnorm = [&](const std::vector<double>& x, const float* g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double scale = 1.0 / std::sqrt(ss / x.size() + c.rms_norm_eps);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * scale * g[i];
    return out;
  };
  auto head_norm = [&](std::vector<double>& v, int heads, const float* g) {  // qwen3
    for (int h = 0; h < heads; ++h) {
      std::vector<double> one(v.begin() + h * c.head_dim, v.begin() + (h + 1) * c.head_dim);
      one = rmsnorm(one, g);
      std::copy(one.begin(), one.end(), v.begin() + h * c.head_dim);
    }
  };
  auto add_bias = [](std::vector<double>& v, const float* b) {
    if (b != nullptr) {
      for (size_t i = 0; i < v.size(); ++i) v[i] += b[i];
    }
  };
  auto rope = [&](std::vector<double>& v, int heads, int pos) {
    const int half = c.rope_dim / 2;
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < half; ++i) {
        const double factor = c.rope_freq_factors.empty() ? 1.0 : c.rope_freq_factors[i];
        const double theta = pos * static_cast<double>(c.rope_freq_scale) *
                             std::pow(static_cast<double>(c.rope_freq_base), -2.0 * i / c.rope_dim) / factor;
        const bool neox = c.rope_layout == RopeLayout::kNeox;
        const int i0 = h * c.head_dim + (neox ? i : 2 * i);
        const int i1 = h * c.head_dim + (neox ? i + half : 2 * i + 1);
        const double x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * std::cos(theta) - x1 * std::sin(theta);
        v[i1] = x0 * std::sin(theta) + x1 * std::cos(theta);
      }
    }
  };

  std::vector<float> emb = dequant(w.token_embd);
  std::vector<std::vector<double>> x(T, std::vector<double>(c.dim));
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < c.dim; ++i) {
      x[t][i] = emb[static_cast<size_t>(tokens[t]) * c.dim + i] * (c.scale_embeddings ? std::sqrt(double(c.dim)) : 1.0);
    }

  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const auto wq = dequant(L.wq), wk = dequant(L.wk), wv = dequant(L.wv), wo = dequant(L.wo);
    const auto wg = dequant(L.w_gate), wu = dequant(L.w_up), wd = dequant(L.w_down);
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (int t = 0; t < T; ++t) {
      const auto xn = rmsnorm(x[t], L.attn_norm);
      q[t] = matvec(wq, c.q_dim(), c.dim, xn);
      k[t] = matvec(wk, c.kv_dim(), c.dim, xn);
      v[t] = matvec(wv, c.kv_dim(), c.dim, xn);
      add_bias(q[t], L.bq);
      add_bias(k[t], L.bk);
      add_bias(v[t], L.bv);
      if (L.q_norm != nullptr) {
        head_norm(q[t], c.num_heads, L.q_norm);
        head_norm(k[t], c.num_kv_heads, L.k_norm);
      }
      rope(q[t], c.num_heads, positions[t]);
      rope(k[t], c.num_kv_heads, positions[t]);
    }
    const int n_rep = c.num_heads / c.num_kv_heads;
    for (int t = 0; t < T; ++t) {
      std::vector<double> att(c.q_dim(), 0.0);
      for (int h = 0; h < c.num_heads; ++h) {
        const int g = h / n_rep;
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double d = 0;
          for (int i = 0; i < c.head_dim; ++i) d += q[t][h * c.head_dim + i] * k[j][g * c.head_dim + i];
          s[j] = d / std::sqrt(static_cast<double>(c.head_dim));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int j = 0; j <= t; ++j)
          for (int i = 0; i < c.head_dim; ++i) att[h * c.head_dim + i] += s[j] / sum * v[j][g * c.head_dim + i];
      }
      const auto o = matvec(wo, c.dim, c.q_dim(), att);
      for (int i = 0; i < c.dim; ++i) x[t][i] += o[i];
      const auto xn = rmsnorm(x[t], L.ffn_norm);
      auto gate = matvec(wg, c.ffn_dim, c.dim, xn);
      const auto up = matvec(wu, c.ffn_dim, c.dim, xn);
      for (int i = 0; i < c.ffn_dim; ++i) {
        const double g = gate[i];
        gate[i] = (c.gelu_gate ? 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)))
                               : g / (1.0 + std::exp(-g))) * up[i];
      }
      const auto down = matvec(wd, c.dim, c.ffn_dim, gate);
      for (int i = 0; i < c.dim; ++i) x[t][i] += down[i];
    }
  }
  const auto out = dequant(w.output);
  std::vector<std::vector<float>> logits(T);
  for (int t = 0; t < T; ++t) {
    const auto xn = rmsnorm(x[t], w.output_norm);
    const auto y = matvec(out, c.vocab_size, c.dim, xn);
    logits[t].assign(y.begin(), y.end());
  }
  return logits;
}

}  // namespace kvserve::testing

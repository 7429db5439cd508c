// Test vectors from ggml's own quantizers and decoders (the oracle for kvserve's decoders).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include "ggml.h"

static uint64_t s = 0x9E3779B97F4A7C15ull;
static float uniform(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return (s >> 11) * (1.0 / 9007199254740992.0); }
static float normal(void) { float u = uniform() + 1e-12f, v = uniform(); return sqrtf(-2 * logf(u)) * cosf(6.2831853f * v); }

int main(int argc, char** argv) {
  const char* dir = argv[1];
  // ggml_init fills ggml's f16 -> f32 table, which its decoders read.
  struct ggml_init_params params = {1 << 20, NULL, false};
  struct ggml_context* ctx = ggml_init(params);
  const enum ggml_type types[] = {GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K,
                                  GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};
  const int rows = 3, cols = 512;
  float src[3 * 512];
  for (int i = 0; i < rows * cols; ++i) {
    // Rows of different scales and skews, a few outliers: every scale and min code is used.
    const int r = i / cols;
    src[i] = (r == 0 ? 0.02f : r == 1 ? 1.5f : 40.0f) * normal() + (r == 2 ? 7.0f : 0.0f);
    if (uniform() < 0.01f) src[i] *= 8;
  }
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); ++t) {
    const size_t row_bytes = ggml_row_size(types[t], cols);
    uint8_t* q = malloc(rows * row_bytes);
    float* out = malloc(sizeof(float) * rows * cols);
    ggml_quantize_chunk(types[t], src, q, 0, rows, cols, NULL);
    ggml_get_type_traits(types[t])->to_float(q, out, (int64_t)rows * cols);
    char path[512];
    snprintf(path, sizeof path, "%s/%s.blocks", dir, ggml_type_name(types[t]));
    FILE* f = fopen(path, "wb"); fwrite(q, 1, rows * row_bytes, f); fclose(f);
    snprintf(path, sizeof path, "%s/%s.f32", dir, ggml_type_name(types[t]));
    f = fopen(path, "wb"); fwrite(out, sizeof(float), rows * cols, f); fclose(f);
    printf("%s: %zu bytes per row of %d\n", ggml_type_name(types[t]), row_bytes, cols);
    free(q); free(out);
  }
  ggml_free(ctx);
  return 0;
}

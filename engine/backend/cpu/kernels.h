// CPU compute kernels behind a table of function pointers, one table per instruction set
// (AVX-512 with and without BF16/VNNI, AVX2+FMA+F16C with and without AVX-VNNI, generic C++),
// chosen at run time from the CPU's features so one binary runs on any x86-64. Every table
// computes the same function; tests compare each table with the generic one and with the
// reference codecs.
//
// Stateless; thread-safe. Callers parallelise (OpenMP) over row ranges / attention units.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include "cache/kv_spec.h"
#include "engine/backend/compute_dtype.h"
#include "engine/model/weights.h"

namespace kvserve::cpu {

// A weight matrix re-laid out for the kernels: rows in panels of kPanelRows, each panel
// k-major ([cols][kPanelRows] values), so one vector load gives column k of 16 rows and a
// product needs no horizontal sums. Q8_0 panels hold, per 32-column block, the 16 rows' f16
// scales then [32][16] int8 values; Q4_0 panels the scales then [16][16] bytes, each the
// row's GGUF byte (values k and k + 16 as nibbles): the weights keep their file's size.
// Q4_K panels hold per 64-column chunk the rows' two sub-block scales and offsets in f32,
// then their 32 GGUF bytes (0.75 bytes per weight; the file's 0.5625 packs the scales in 6
// bits). Q6_K panels hold per 16-column sub-block the rows' f32 scales (d * scale), then
// [16][16] int8 values q - 32 (1.25 bytes per weight; the file's 0.82 packs them in 6 bits).
// Q5_K panels hold per 32-column sub-block the rows' f32 scales and offsets, then [32][16]
// int8 values 0..31 (1.25 bytes per weight; the file's 0.69).
// The types read but never written are packed from their integer form (ggml_decoders.h) into
// these layouts: Q5_0 and IQ4_NL as Q8_0's (1.06 bytes per weight), Q4_1 and Q5_1 as Q5_K's,
// Q3_K and IQ4_XS as Q6_K's (1.25), Q2_K in offset-16 panels: per 16-column sub-block the
// rows' f32 scales and offsets, then [16][16] int8 values (1.5 bytes per weight).
// BF16 pair panels (ComputeDtype::kBF16 for F32/F16/BF16 matrices) hold [cols / 2][16][2]
// BF16 values: for each pair of columns, the 16 rows' two values side by side, as `vdpbf16ps`
// reads them (an odd column count gets a zero column).
// Integer-dot panels (ComputeDtype kInt8 and kBF16, for every quantized type) multiply int8
// activations (QuantizedActivations) with the weights' integer codes: value = scale * u +
// offset with u an unsigned code, per group of G = 16 (Q6_K, Q2_K, Q3_K) or 32 columns (the
// rest); the types with offsets of their own (Q4_1, Q5_1) store them, the others have
// offset = -zero * scale with their kind's zero point (below). Per group the 16 rows' f32
// scales, their f32 offsets if stored, then the codes. K panels (Q2_K-Q6_K) keep the
// blocks' own integers: per 256 columns the rows' f32 d (and -dmin), then per group the rows'
// int8 sub-scales sc (and uint8 mins m), then the codes; value = d * sc * u - dmin * m (Q6_K:
// d * sc * (u - 32)), summed exactly in int32 over the 256 columns. The codes: 4 consecutive columns of a
// row in 4 bytes (as `vpdpbusd` reads them): byte codes (Q8_0) [G / 4][16][4]; 4- to 6-bit
// codes per 8 columns c a chunk of [16][4] bytes whose low nibbles are the codes' low 4 bits
// of columns 8c..8c+3 and high nibbles those of 8c+4..8c+7, then the 5-bit types' fifth bit
// in 8 bytes for the first field and 8 for the second, bit r * 4 + j that of row r, column j
// of the field, or Q6_K's top two bits in 32 bytes: those of byte i = r * 4 + j of field h
// in byte i % 32, bits 4 * (i / 32) + 2h and the next (rows 0-7 in the low nibbles, 8-15 in
// the high ones: a load and a shift give each byte its bits); 2- and 3-bit codes (Q2_K, Q3_K) likewise per 16
// columns with four 2-bit fields per byte (bits 2h, 2h + 1: columns 16c + 4h .. + 3) and Q3_K's
// third bit in 4 x 8 bytes. Bytes per weight: Q4_0 0.625, Q4_1 0.75, Q4_K 0.59, Q5_0 0.75,
// Q5_1 0.875, Q5_K 0.72, Q8_0 1.125, IQ4_NL/IQ4_XS 0.625, Q6_K 0.83, Q2_K 0.41, Q3_K 0.45.
// Rows past `rows` in the last panel are zero.
inline constexpr int kPanelRows = 16;

// Indices into KernelTable::matmul: 0 f32, 1 f16, 2 bf16, 3 q8_0, 4 q4_0, 5 q4_k panels, BF16
// pair panels, 7 q6_k, 8 q5_k and 9 offset-16 panels; then the integer-dot panels (zero
// points in brackets): 10 4-bit codes per 32 with offsets (Q4_1), 11 5-bit codes per 32 with
// offsets (Q5_1), 12 byte codes per 32 [128] (Q8_0), 13 K panels of 2-bit codes per 16 with
// mins (Q2_K), 14 K panels of 6-bit codes per 16 [32] (Q6_K), 15 4-bit codes per 32 [8]
// (Q4_0), 16 5-bit codes per 32 [16] (Q5_0), 17 K panels of 3-bit codes per 16 [4] (Q3_K),
// 18 and 19 K panels of 4- and 5-bit codes per 32 with mins (Q4_K, Q5_K), 20 4-bit indices
// into the IQ4 codebook per 32 [128] (IQ4_NL, IQ4_XS; the kernel looks them up with vpshufb).
inline constexpr int kBf16PairKind = 6;
inline constexpr int kOffset16Kind = 9;
inline constexpr int kFirstDotKind = 10;
inline constexpr int kNumMatMulKinds = 21;

// Activations quantized for the integer-dot panels, per token and block of 32 or 256 columns
// as llama.cpp quantizes them for the same weights (Q8_0 for 32-value types, Q8_K for the
// 256-value K and IQ4_XS types): block 32, q = x * (127 / max|x|) and d = max|x| / 127
// rounded to F16; block 256, q = min(127, x * (-127 / m)) with m the value of largest
// magnitude and d = 1 / (-127 / m); q rounded to nearest even, all 0 where the block is zero. Also
// the sums of q per 16 columns. The same bits on every CPU.
class QuantizedActivations {
 public:
  // REQUIRES: block is 32 or 256, cols % block == 0. `threads` OpenMP threads share the
  // tokens (the caller decides when a batch is worth it).
  void Quantize(const float* x, int64_t ldx, int num_tokens, int64_t cols, int block, int threads = 1);
  int block() const { return block_; }
  const int8_t* q(int t) const { return q_.data() + t * cols_; }
  const float* d(int t) const { return d_.data() + t * (cols_ / block_); }
  const int32_t* sums(int t) const { return sums_.data() + t * (cols_ / 16); }

 private:
  int64_t cols_ = 0;
  int block_ = 32;
  std::vector<int8_t> q_;
  std::vector<float> d_;
  std::vector<int32_t> sums_;
};

class PackedMatrix {
 public:
  PackedMatrix() = default;
  // Packs rows of any type DequantizeRow reads except Q8_K (CHECK-fails on it); with kBF16,
  // F32/F16/BF16 rows become BF16 pair panels.
  // With kInt8 or kBF16, quantized rows become integer-dot panels.
  explicit PackedMatrix(const WeightMatrix& w, ComputeDtype compute = ComputeDtype::kF32);

  GgmlType type() const { return type_; }
  // The KernelTable::matmul entry that reads these panels.
  int kind() const { return kind_; }
  // BF16 pair panels: their products take the activations rounded by RoundToBf16.
  bool takes_bf16() const { return kind_ == kBf16PairKind; }
  // Integer-dot panels: their products take the activations as QuantizedActivations in
  // blocks of activation_block() (llama.cpp's choice: 256 for 256-value types, else 32; K
  // panels need 256).
  bool takes_int8() const { return kind_ >= kFirstDotKind; }
  int activation_block() const;
  // Q8_0 panels none of whose values is -128 (llama.cpp's quantizer never writes it): a
  // product may then take the signs from the activations (Isa::kActivationSign).
  bool codes_symmetric() const { return codes_symmetric_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t num_panels() const { return num_panels_; }
  size_t nbytes() const { return static_cast<size_t>(num_panels_) * panel_bytes_; }
  const uint8_t* panel(int64_t p) const { return data_.get() + static_cast<size_t>(p) * panel_bytes_; }

 private:
  void AllocateZeroed();  // nbytes() of zeros, 64-byte aligned
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  GgmlType type_ = GgmlType::kF32;
  int kind_ = 0;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  int64_t num_panels_ = 0;
  size_t panel_bytes_ = 0;
  bool codes_symmetric_ = false;
  std::unique_ptr<uint8_t, Free> data_;
};

// y[t * ldy + r] = dot(x[t * ldx + 0 .. cols), row r of w), for t < num_tokens. BF16 pair
// panels read xb instead: x rounded by RoundToBf16 (ldxb >= cols rounded up to even), and
// integer-dot panels xq: x quantized.
struct MatMulArgs {
  const PackedMatrix* w = nullptr;
  const float* x = nullptr;
  int64_t ldx = 0;
  int num_tokens = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  const uint16_t* xb = nullptr;
  int64_t ldxb = 0;
  const QuantizedActivations* xq = nullptr;
};

// xb[t * ldxb + k] = x[t * ldx + k] rounded to BF16 (nearest even, NaN kept quiet, BF16
// subnormals flushed to signed zero as vdpbf16ps reads them), for k < cols; a zero at
// k = cols when cols is odd. The same bits on every CPU.
void RoundToBf16(const float* x, int64_t ldx, int num_tokens, int64_t cols, uint16_t* xb, int64_t ldxb);
// Computes the rows of panels [panel_begin, panel_end) of y. Each output accumulates over the
// columns in order with the same operations whatever the number of tokens, so a token's
// result never depends on the other tokens of the step.
using MatMulRangeFn = void (*)(const MatMulArgs& args, int64_t panel_begin, int64_t panel_end);

// One KV segment's rows (see kv_spec.h): `data` = [n][row bytes], `scales` = [n][groups].
struct KvRows {
  const uint8_t* data = nullptr;
  const uint16_t* scales = nullptr;
  int n = 0;
};
// Float rows (F32, F16, BF16): scores[j] = dot(q, row j) for j < rows.n.
using KvDotFn = void (*)(const float* q, const KvRows& rows, int head_dim, float* scores);
// Float rows: acc[d] += sum_j p[j] * row j[d].
using KvAxpyFn = void (*)(const float* p, const KvRows& rows, int head_dim, float* acc);
// Quantized rows decoded to F32 out[rows.n][head_dim], the bits of the codec's DecodeKvRow
// (fused multiply-adds; the generic table multiplies and adds apart, one rounding more).
using KvDecodeFn = void (*)(const KvRows& rows, int head_dim, int group_size, float* out);
// Quantized rows read in place: the bits of KvDecodeFn followed by the F32 KvDotFn / KvAxpyFn
// (values decoded in registers). REQUIRES: kv_in_place(head_dim, group_size).
using KvQuantDotFn = void (*)(const float* q, const KvRows& rows, int head_dim, int group_size, float* scores);
using KvQuantAxpyFn = void (*)(const float* p, const KvRows& rows, int head_dim, int group_size, float* acc);

struct KernelTable {
  std::string_view isa;
  // Indexed by PackedMatrix::kind().
  MatMulRangeFn matmul[kNumMatMulKinds];
  // Indexed by static_cast<int>(dtype) of the float dtypes (kv_spec.h: F32, F16, BF16).
  // Attention decodes a quantized block's rows to F32 once per query tile and reads them as F32
  // rows, or (a single query) reads them in place with the same bits, so every query of a tile
  // and every batch size does the same arithmetic.
  KvDotFn kv_dot[3];
  KvAxpyFn kv_axpy[3];
  KvDecodeFn kv_decode_int8, kv_decode_int4;
  KvQuantDotFn kv_dot_int8, kv_dot_int4;
  KvQuantAxpyFn kv_axpy_int8, kv_axpy_int4;
  // Whether kv_dot_int8/int4 and kv_axpy_int8/int4 take rows of this shape (head dim 64 or 128
  // in one group).
  bool (*kv_in_place)(int head_dim, int group_size);
  // INT4C keys of a full block (kv_spec.h) decoded to F32 out[n][head_dim], the bits of the
  // codec's DecodeKvKeyRowPerChannel: the rows' codes `data`, params[head_dim][2] {scale, bias}.
  // REQUIRES: head_dim <= kMaxChannelKeyHeadDim.
  void (*kv_decode_channel)(const uint8_t* data, int n, const uint16_t* params, int head_dim, int group_size,
                            float* out);
  // scores[j] = exp(scores[j] - max) for j < n (a polynomial, within 1e-6 relative; scores
  // below max - 87, -inf included, give exactly 0); returns their sum.
  float (*exp_sub_sum)(float* scores, int n, float max);
  // The largest of x[0..n), n >= 1 (-inf when all are).
  float (*max)(const float* x, int n);
  // out[i] = x[i] in F16, rounded to nearest even: F32ToF16's bits (a NaN stays a NaN).
  void (*to_f16)(const float* x, int n, uint16_t* out);
  // gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g) (e^-|g| within 1e-6 relative,
  // as exp_sub_sum's).
  void (*silu_mul)(float* gate, const float* up, int64_t n);
  // One block (32 or 256 values) of QuantizedActivations::Quantize: q[0 .. block), *d and the
  // sums per 16 (the same bits from every table).
  void (*quantize_block)(const float* src, int block, int8_t* q, float* d, int32_t* sums);
};

// The panels of F32 mode: 0 f32, 1 f16, 2 bf16, 3 q8_0, 4 q4_0, 5 q4_k, 7 q6_k, 8 q5_k, and
// for the integer-form types the kind that holds them (see above); -1 for types the kernels do
// not take.
int WeightKind(GgmlType type);
// The integer-dot panel kind of a quantized type; -1 for F32/F16/BF16 and Q8_K.
int DotKind(GgmlType type);
// Per-kind layout of the integer-dot panels, and their packing (kernels_dot.cpp).
size_t DotPanelBytes(int kind, int64_t cols);
void PackDotRows(const WeightMatrix& w, int kind, uint8_t* data, size_t panel_bytes);
// A Q4_K, Q5_K, Q6_K, Q2_K or Q3_K row of n values as its blocks hold it: codes u[0..n)
// (value = d * sc * u - dmin * m; Q6_K d * sc * (u - 32), Q3_K d * sc * (u - 4)), per group
// of 32 (Q6_K, Q2_K, Q3_K: 16) the sub-scale sc and min m (Q6_K, Q3_K: none), per 256 values d
// and -dmin (Q6_K, Q3_K: d only).
void SuperCodes(GgmlType type, const uint8_t* row, int64_t n, uint8_t* u, int8_t* sc, uint8_t* m, float* d,
                float* ndmin);

// The best table for this CPU (overridable with KVSERVE_ISA=avx512bf16|avx512|avxvnni|avx2|generic).
const KernelTable& Kernels();
// A specific table, or nullptr when this CPU cannot run it. isa: "avx512bf16" (AVX-512 with
// vdpbf16ps and integer dots on vpdpbusd), "avx512" (both emulated), "avxvnni" (AVX2 with its
// integer dots on AVX-VNNI's vpdpbusd), "avx2", "generic".
const KernelTable* KernelsFor(std::string_view isa);
// Whether this CPU multiplies BF16 pairs natively (AVX512-BF16).
bool CpuHasBf16Dot();
// Multiply-adds per second of vdpbf16ps over those of F32 FMAs, measured on this core in
// about 10 ms (registers only). REQUIRES: CpuHasBf16Dot(). Zen 4 runs a vdpbf16ps at an FMA's
// rate (2x the multiply-adds); some Intel cores at a quarter of it (0.5x).
double Bf16DotSpeedup();
// --compute-dtype auto: kBF16 where native BF16 products measure at least 1.5x F32's rate
// (measured once per process), else kInt8.
ComputeDtype AutoComputeDtype();

// Per-ISA tables, defined in kernels_<isa>.cpp.
const KernelTable& GenericKernels();
const KernelTable& Avx2Kernels();
const KernelTable& AvxVnniKernels();
const KernelTable& Avx512Kernels();
const KernelTable& Avx512Bf16Kernels();

}  // namespace kvserve::cpu

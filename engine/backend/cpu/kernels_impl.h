// Kernel templates shared by every instruction set. Include this file exactly once per
// kernels_<isa>.cpp, inside that file's own namespace, after defining a traits struct `Isa`:
//
//   using V;                      // a vector of L floats
//   static constexpr int L;       // lanes (1, 8 or 16)
//   static constexpr int kTokenTile, kFloatTokenTile, kPanelTile, kPanelTileDecode;  // register tile shapes
//   V Zero(); V Set1(float); V Load(const float*); void Store(float*, V);
//   V LoadF16(const uint16_t*); V LoadBf16(const uint16_t*); V LoadI8(const int8_t*);
//   void StoreF16(uint16_t*, V);  // L values rounded to F16, nearest even
//   V LoadU4Lo(const uint8_t*), LoadU4Hi(const uint8_t*);  // (nibble - 8) of L bytes
//   V Fma(V a, V b, V c) /* a*b + c */; V Mul(V, V); float Reduce(V); float F16(uint16_t);
//   V LoadN/LoadF16N/LoadBf16N/LoadI8N(p, n), void StoreN(p, V, n)  // first n < L lanes, rest 0
//   using VP;                     // L pairs of BF16 values
//   VP LoadPairs(const uint16_t*); VP SetPair(const uint16_t*);  // 2L values; one pair to all
//   V DotPairs(V acc, VP w, VP x);  // per lane: acc += w1 * x1, then acc += w0 * x0 (vdpbf16ps)
//   static constexpr int kBf16TokenTile, kBf16PanelTile;
//   V Add(V, V); V Max(V, V); float ReduceMax(V); V RoundNearest(V); V Div(V, V);
//   V IfNonNegative(V x, V a, V b);  // per lane: x >= 0 ? a : b
//   V Scale2(V y, V n);             // y * 2^n for integer-valued n in [-126, 127]
//   V ZeroWhereLess(V y, V x, float bound);  // lanes where !(x >= bound) become 0
//   V ReduceRows(const V (&rows)[L]);  // lane r = the sum of rows[r]'s lanes
//   using VI;                     // L int32 lanes; as codes, L rows x 4 bytes
//   VI ZeroI(); VI SetI(int32_t); VI AddI(VI, VI); VI SubI(VI, VI); VI MulI(VI, VI);
//   VI Pairs(const uint8_t* a, const uint8_t* b);  // lane r: int16 a[r] low, b[r] high (int8 in)
//   VI MaddI(VI acc, VI a, VI b);  // acc += the products of a's and b's int16 halves
//   using VT; VT Table16(const uint8_t*); VI Lookup16(VT, VI);  // bytes below 16 -> table[byte]
//   VI LoadCodes(const uint8_t*); void LoadNibbles(const uint8_t*, VI* lo, VI* hi);
//   VI Set4(const int8_t* x);     // x[0..4) in every lane
//   void AddBits(const uint8_t* mask, int v, int bit, VI* w);  // byte i of w += bit where bit
//                                 // v * 4L + i of the little-endian mask is set
//   void AddCrumbs(const uint8_t* c, int v, VI* lo, VI* hi);  // Q6_K's top bits (kernels.h)
//                                 // times 16 into the bytes v * 4L + i of both fields
//   using VS;                     // short sums: per lane kShortProducts products of bytes
//   static constexpr int kShortMax, kShortProducts;  // a VS lane holds sums up to kShortMax
//   VS MulS(VI w, VI x);          // u8 w_j * s8 x_j summed kShortProducts per lane
//   VS DotS(VS s, VI w, VI x);    // s + MulS(w, x)
//   VI Widen(VI acc, VS s);       // acc += s, per L-lane int32 sums of 4 columns
//   VI ScaleOf(const uint8_t*); VI WidenBy(VI acc, VS s, VI scale);  // acc += s * (int8 scale)
//   using Wide; Wide PrepareWide(VI w); VS MulWideS(Wide w, VI x); VS DotWideS(VS s, Wide w, VI x);
//   static constexpr int kWideOffset;  // for any byte w: s += (w_j - kWideOffset) * x_j, w
//                                 // prepared once per tile and used for every token of it
//   static constexpr bool kActivationSign;  // with it: VI AbsBytes(VI x); VS MulActS(Wide w,
//                                 // VI x, VI absx): MulWideS's products for codes 1..255, the
//                                 // sign from x (one token, no abs of w; runs of one step)
//   V ToFloat(VI);
//
// Tails shorter than L use the partial loads, so every function handles any length (head
// dims below L, e.g. 8, are common in small models).
// (No include guard on purpose.)

using V = Isa::V;
constexpr int L = Isa::L;

// ---- Float rows (KV cache rows): chunk loaders ----------------------------------------

struct RowF32 {
  static V Load(const uint8_t* row, int64_t k) { return Isa::Load(reinterpret_cast<const float*>(row) + k); }
  static V LoadTail(const uint8_t* row, int64_t k, int n) {
    return Isa::LoadN(reinterpret_cast<const float*>(row) + k, n);
  }
};

struct RowF16 {
  static V Load(const uint8_t* row, int64_t k) { return Isa::LoadF16(reinterpret_cast<const uint16_t*>(row) + k); }
  static V LoadTail(const uint8_t* row, int64_t k, int n) {
    return Isa::LoadF16N(reinterpret_cast<const uint16_t*>(row) + k, n);
  }
};

struct RowBf16 {
  static V Load(const uint8_t* row, int64_t k) { return Isa::LoadBf16(reinterpret_cast<const uint16_t*>(row) + k); }
  static V LoadTail(const uint8_t* row, int64_t k, int n) {
    return Isa::LoadBf16N(reinterpret_cast<const uint16_t*>(row) + k, n);
  }
};

static_assert(kPanelRows % L == 0, "a panel column splits into whole vectors");
constexpr int kVecs = kPanelRows / L;  // vectors per panel column

inline V LoadXTail(const float* x, int n) { return Isa::LoadN(x, n); }

// ---- Matrix products over packed panels ---------------------------------------------------

// Column k, vector v of a float-typed panel.
struct PanelF32 {
  static constexpr int kBytes = 4;
  static V Load(const uint8_t* panel, int64_t k, int v) {
    return Isa::Load(reinterpret_cast<const float*>(panel) + k * kPanelRows + v * L);
  }
};
struct PanelF16 {
  static constexpr int kBytes = 2;
  static V Load(const uint8_t* panel, int64_t k, int v) {
    return Isa::LoadF16(reinterpret_cast<const uint16_t*>(panel) + k * kPanelRows + v * L);
  }
};
struct PanelBf16 {
  static constexpr int kBytes = 2;
  static V Load(const uint8_t* panel, int64_t k, int v) {
    return Isa::LoadBf16(reinterpret_cast<const uint16_t*>(panel) + k * kPanelRows + v * L);
  }
};

// Writes acc (rows of panel p, vector v) for token t, dropping rows past the matrix.
inline void StorePanelRows(const MatMulArgs& a, int t, int64_t p, int v, V acc) {
  const int64_t r0 = p * kPanelRows + v * L;
  float* y = a.y + t * a.ldy + r0;
  if (r0 + L <= a.w->rows()) {
    Isa::Store(y, acc);
    return;
  }
  alignas(64) float buf[L];
  Isa::Store(buf, acc);
  for (int i = 0; r0 + i < a.w->rows() && i < L; ++i) y[i] = buf[i];
}

// A tile of RT tokens x RP panels: its panels, token rows and zeroed accumulators; and the
// accumulators written to y.
// xs are the F32 rows (X = float) or the BF16 ones (X = uint16_t).
template <int RT, int RP, class X>
inline void StartTile(const MatMulArgs& a, int t0, int64_t p0, const uint8_t* (&panels)[RP], const X* (&xs)[RT],
                      V (&acc)[RT][RP][kVecs]) {
  for (int p = 0; p < RP; ++p) panels[p] = a.w->panel(p0 + p);
  for (int t = 0; t < RT; ++t) {
    if constexpr (std::is_same_v<X, float>) {
      xs[t] = a.x + (t0 + t) * a.ldx;
    } else {
      xs[t] = a.xb + (t0 + t) * a.ldxb;
    }
  }
  for (int t = 0; t < RT; ++t)
    for (int p = 0; p < RP; ++p)
      for (int v = 0; v < kVecs; ++v) acc[t][p][v] = Isa::Zero();
}
template <int RT, int RP>
inline void StoreTile(const MatMulArgs& a, int t0, int64_t p0, const V (&acc)[RT][RP][kVecs]) {
  for (int t = 0; t < RT; ++t)
    for (int p = 0; p < RP; ++p)
      for (int v = 0; v < kVecs; ++v) StorePanelRows(a, t0 + t, p0 + p, v, acc[t][p][v]);
}

// RT tokens x RP panels of F32/F16/BF16 weights: acc += w[k] * x[k] for k in order. The panels
// stream from memory once per step and the hardware prefetcher alone left a core short of its
// share of the bandwidth (F16 150m: one stream 1.15x faster with the prefetch,
// bench/results/float_prefetch.md), so each panel is asked for kPrefetchAhead bytes before its
// use. (The integer-dot kernels are compute bound here: a prefetch changed nothing for Q4_K.)
inline constexpr int64_t kPrefetchAhead = 2048;
template <class P, int RT, int RP>
inline void FloatPanelTile(const MatMulArgs& a, int t0, int64_t p0) {
  const int64_t K = a.w->cols();
  const uint8_t* panels[RP];
  const float* xs[RT];
  V acc[RT][RP][kVecs];
  StartTile<RT, RP>(a, t0, p0, panels, xs, acc);
  constexpr int64_t kColumn = kPanelRows * P::kBytes;
  for (int64_t k = 0; k < K; ++k) {
    V w[RP][kVecs];
    for (int p = 0; p < RP; ++p) {
      __builtin_prefetch(panels[p] + k * kColumn + kPrefetchAhead);
      for (int v = 0; v < kVecs; ++v) w[p][v] = P::Load(panels[p], k, v);
    }
    for (int t = 0; t < RT; ++t) {
      const V xb = Isa::Set1(xs[t][k]);
      for (int p = 0; p < RP; ++p)
        for (int v = 0; v < kVecs; ++v) acc[t][p][v] = Isa::Fma(w[p][v], xb, acc[t][p][v]);
    }
  }
  StoreTile<RT, RP>(a, t0, p0, acc);
}

// RT tokens x RP BF16 pair panels: per pair of columns, acc = DotPairs(acc, w pair, x pair).
template <int RT, int RP>
inline void Bf16PairTile(const MatMulArgs& a, int t0, int64_t p0) {
  const int64_t pairs = (a.w->cols() + 1) / 2;
  const uint8_t* panels[RP];
  const uint16_t* xs[RT];
  V acc[RT][RP][kVecs];
  StartTile<RT, RP>(a, t0, p0, panels, xs, acc);
  for (int64_t k = 0; k < pairs; ++k) {
    typename Isa::VP w[RP][kVecs];
    for (int p = 0; p < RP; ++p) {
      const uint16_t* column = reinterpret_cast<const uint16_t*>(panels[p]) + k * kPanelRows * 2;
      for (int v = 0; v < kVecs; ++v) w[p][v] = Isa::LoadPairs(column + v * L * 2);
    }
    for (int t = 0; t < RT; ++t) {
      const typename Isa::VP xp = Isa::SetPair(xs[t] + 2 * k);
      for (int p = 0; p < RP; ++p)
        for (int v = 0; v < kVecs; ++v) acc[t][p][v] = Isa::DotPairs(acc[t][p][v], w[p][v], xp);
    }
  }
  StoreTile<RT, RP>(a, t0, p0, acc);
}

// Quantized panels (kernels.h): per block of kCols columns the 16 rows' scales, then the
// values. Q8_0: f16 scales, [32][16] int8. Q4_0: f16 scales, [16][16] bytes, byte k of a row
// holding its values k (low nibble) and k + 16 (high nibble), each (nibble - 8) as in the
// GGUF block. Q6_K: per 16 columns, f32 scales, [16][16] int8.
struct Q8Block {
  static constexpr int kCols = 32;
  static constexpr size_t kScaleBytes = kPanelRows * 2;
  static constexpr size_t kBytes = kScaleBytes + 32 * kPanelRows;
  static V Scale(const uint8_t* block, int v) { return Isa::LoadF16(reinterpret_cast<const uint16_t*>(block) + v * L); }
  static V Load(const uint8_t* values, int k, int v) {
    return Isa::LoadI8(reinterpret_cast<const int8_t*>(values) + k * kPanelRows + v * L);
  }
};
struct Q4Block {
  static constexpr int kCols = 32;
  static constexpr size_t kScaleBytes = kPanelRows * 2;
  static constexpr size_t kBytes = kScaleBytes + 16 * kPanelRows;
  static V Scale(const uint8_t* block, int v) { return Q8Block::Scale(block, v); }
  static V Load(const uint8_t* values, int k, int v) {
    return k < 16 ? Isa::LoadU4Lo(values + k * kPanelRows + v * L)
                  : Isa::LoadU4Hi(values + (k - 16) * kPanelRows + v * L);
  }
};
// Q5_K: per 32 columns, f32 scales d * sc, f32 offsets -dmin * m, [32][16] int8 values
// 0..31 (the nibble and the fifth bit).
struct Q5KBlock {
  static constexpr int kCols = 32;
  static constexpr bool kOffset = true;
  static constexpr size_t kScaleBytes = kPanelRows * 8;
  static constexpr size_t kBytes = kScaleBytes + 32 * kPanelRows;
  static V Scale(const uint8_t* block, int v) { return Isa::Load(reinterpret_cast<const float*>(block) + v * L); }
  static V Offset(const uint8_t* block, int v) {
    return Isa::Load(reinterpret_cast<const float*>(block) + kPanelRows + v * L);
  }
  static V Load(const uint8_t* values, int k, int v) { return Q8Block::Load(values, k, v); }
};
// Offset-16 panels (Q2_K): per 16 columns, f32 scales, f32 offsets, [16][16] int8 values.
struct Offset16Block {
  static constexpr int kCols = 16;
  static constexpr bool kOffset = true;
  static constexpr size_t kScaleBytes = kPanelRows * 8;
  static constexpr size_t kBytes = kScaleBytes + 16 * kPanelRows;
  static V Scale(const uint8_t* block, int v) { return Q5KBlock::Scale(block, v); }
  static V Offset(const uint8_t* block, int v) { return Q5KBlock::Offset(block, v); }
  static V Load(const uint8_t* values, int k, int v) { return Q8Block::Load(values, k, v); }
};
struct Q6KBlock {
  static constexpr int kCols = 16;
  static constexpr size_t kScaleBytes = kPanelRows * 4;
  static constexpr size_t kBytes = kScaleBytes + 16 * kPanelRows;
  static V Scale(const uint8_t* block, int v) { return Isa::Load(reinterpret_cast<const float*>(block) + v * L); }
  static V Load(const uint8_t* values, int k, int v) { return Q8Block::Load(values, k, v); }
};

// Per token, the sums of x over each group of columns (32 for Q4_K and Q5_K, 16 for
// offset-16 panels), in order: the offsets multiply them (PrepareGroupSums).
inline thread_local std::vector<float> group_xsums;

inline void PrepareGroupSums(const MatMulArgs& a, int group) {
  const int64_t groups = a.w->cols() / group;
  group_xsums.resize(static_cast<size_t>(a.num_tokens * groups));
  for (int t = 0; t < a.num_tokens; ++t) {
    for (int64_t g = 0; g < groups; ++g) {
      float s = 0.0f;
      for (int l = 0; l < group; ++l) s += a.x[t * a.ldx + g * group + l];
      group_xsums[t * groups + g] = s;
    }
  }
}

// Quantized panels: per block, sum = sum_k q[k] * x[k] in order, then acc += sum * scale (and,
// for blocks with offsets, acc += sum(x over the block) * offset).
template <class B, int RT, int RP>
inline void QuantPanelTile(const MatMulArgs& a, int t0, int64_t p0) {
  const int64_t blocks = a.w->cols() / B::kCols;
  const uint8_t* panels[RP];
  const float* xs[RT];
  V acc[RT][RP][kVecs];
  StartTile<RT, RP>(a, t0, p0, panels, xs, acc);
  for (int64_t b = 0; b < blocks; ++b) {
    V sum[RT][RP][kVecs];
    for (int t = 0; t < RT; ++t)
      for (int p = 0; p < RP; ++p)
        for (int v = 0; v < kVecs; ++v) sum[t][p][v] = Isa::Zero();
    for (int k = 0; k < B::kCols; ++k) {
      V w[RP][kVecs];
      for (int p = 0; p < RP; ++p) {
        const uint8_t* values = panels[p] + b * B::kBytes + B::kScaleBytes;
        for (int v = 0; v < kVecs; ++v) w[p][v] = B::Load(values, k, v);
      }
      for (int t = 0; t < RT; ++t) {
        const V xb = Isa::Set1(xs[t][b * B::kCols + k]);
        for (int p = 0; p < RP; ++p)
          for (int v = 0; v < kVecs; ++v) sum[t][p][v] = Isa::Fma(w[p][v], xb, sum[t][p][v]);
      }
    }
    for (int p = 0; p < RP; ++p) {
      for (int v = 0; v < kVecs; ++v) {
        const V scale = B::Scale(panels[p] + b * B::kBytes, v);
        for (int t = 0; t < RT; ++t) acc[t][p][v] = Isa::Fma(sum[t][p][v], scale, acc[t][p][v]);
        if constexpr (requires { B::kOffset; }) {
          const V offset = B::Offset(panels[p] + b * B::kBytes, v);
          for (int t = 0; t < RT; ++t) {
            acc[t][p][v] = Isa::Fma(Isa::Set1(group_xsums[(t0 + t) * blocks + b]), offset, acc[t][p][v]);
          }
        }
      }
    }
  }
  StoreTile<RT, RP>(a, t0, p0, acc);
}

// Q4_K panels (kernels.h): per 64-column chunk, [2][16] f32 sub-block scales d * sc, [2][16]
// f32 offsets 8 * d * sc - dmin * m, then [32][16] bytes (byte l of a row: its value l in the
// low nibble, 32 + l in the high one). A 32-column sub-block adds
// scale * sum((q - 8) * x) + offset * sum(x), so the nibbles load as Q4_0's do.
constexpr size_t kQ4KChunkBytes = 4 * 4 * kPanelRows + 32 * kPanelRows;


template <int RT, int RP>
inline void Q4KPanelTile(const MatMulArgs& a, int t0, int64_t p0) {
  const int64_t chunks = a.w->cols() / 64;
  const float* xsums[RT];
  for (int t = 0; t < RT; ++t) xsums[t] = group_xsums.data() + (t0 + t) * (chunks * 2);
  const uint8_t* panels[RP];
  const float* xs[RT];
  V acc[RT][RP][kVecs];
  StartTile<RT, RP>(a, t0, p0, panels, xs, acc);
  for (int64_t c = 0; c < chunks; ++c) {
    for (int h = 0; h < 2; ++h) {  // sub-block 2c + h: the low nibbles, then the high ones
      const int64_t k0 = c * 64 + 32 * h;
      V sum[RT][RP][kVecs];
      for (int t = 0; t < RT; ++t) {
        for (int p = 0; p < RP; ++p)
          for (int v = 0; v < kVecs; ++v) sum[t][p][v] = Isa::Zero();
      }
      for (int l = 0; l < 32; ++l) {
        V w[RP][kVecs];
        for (int p = 0; p < RP; ++p) {
          const uint8_t* nibbles = panels[p] + c * kQ4KChunkBytes + 4 * 4 * kPanelRows + l * kPanelRows;
          for (int v = 0; v < kVecs; ++v) {
            w[p][v] = h == 0 ? Isa::LoadU4Lo(nibbles + v * L) : Isa::LoadU4Hi(nibbles + v * L);
          }
        }
        for (int t = 0; t < RT; ++t) {
          const V xb = Isa::Set1(xs[t][k0 + l]);
          for (int p = 0; p < RP; ++p)
            for (int v = 0; v < kVecs; ++v) sum[t][p][v] = Isa::Fma(w[p][v], xb, sum[t][p][v]);
        }
      }
      for (int p = 0; p < RP; ++p) {
        const float* scale = reinterpret_cast<const float*>(panels[p] + c * kQ4KChunkBytes) + h * kPanelRows;
        const float* offset = scale + 2 * kPanelRows;
        for (int v = 0; v < kVecs; ++v) {
          const V sv = Isa::Load(scale + v * L), ov = Isa::Load(offset + v * L);
          for (int t = 0; t < RT; ++t) {
            acc[t][p][v] = Isa::Fma(sum[t][p][v], sv, acc[t][p][v]);
            acc[t][p][v] = Isa::Fma(Isa::Set1(xsums[t][2 * c + h]), ov, acc[t][p][v]);
          }
        }
      }
    }
  }
  StoreTile<RT, RP>(a, t0, p0, acc);
}

// Register tile shapes: tokens per tile with several tokens, panels per tile then, and panels
// per tile for a single token.
struct IsaTiles {
  static constexpr int kTokenTile = Isa::kTokenTile;
  static constexpr int kPanelTile = Isa::kPanelTile;
  static constexpr int kPanelTileDecode = Isa::kPanelTileDecode;
};

struct Q4KKernel : IsaTiles {
  static void Prepare(const MatMulArgs& a) { PrepareGroupSums(a, 32); }
  template <int RT, int RP>
  static void Tile(const MatMulArgs& a, int t0, int64_t p0) { Q4KPanelTile<RT, RP>(a, t0, p0); }
};

template <class P>
struct FloatKernel : IsaTiles {
  static constexpr int kTokenTile = Isa::kFloatTokenTile;
  template <int RT, int RP>
  static void Tile(const MatMulArgs& a, int t0, int64_t p0) { FloatPanelTile<P, RT, RP>(a, t0, p0); }
};
struct Bf16PairKernel {
  static constexpr int kTokenTile = Isa::kBf16TokenTile;
  static constexpr int kPanelTile = Isa::kBf16PanelTile;
  static constexpr int kPanelTileDecode = Isa::kPanelTileDecode;
  template <int RT, int RP>
  static void Tile(const MatMulArgs& a, int t0, int64_t p0) { Bf16PairTile<RT, RP>(a, t0, p0); }
};
template <class B>
struct QuantKernel : IsaTiles {
  template <int RT, int RP>
  static void Tile(const MatMulArgs& a, int t0, int64_t p0) { QuantPanelTile<B, RT, RP>(a, t0, p0); }
};
// Blocks with offsets: their kCols-column sums of x first.
template <class B>
struct OffsetKernel : QuantKernel<B> {
  static void Prepare(const MatMulArgs& a) { PrepareGroupSums(a, B::kCols); }
};

#include "engine/backend/cpu/kernels_impl_dot.h"

// Every token tile over panels [p0, p0 + RP): the panels stay in cache while all tokens use
// them, so a step reads its weights from memory once.
// The last `rest` < kTokenTile tokens in one tile of that many.
template <class Kn, int RP, int N>
inline void RestTile(const MatMulArgs& a, int64_t p0, int t, int rest) {
  if constexpr (N > 0) {
    if (rest == N) {
      Kn::template Tile<N, RP>(a, t, p0);
    } else {
      RestTile<Kn, RP, N - 1>(a, p0, t, rest);
    }
  }
}

template <class Kn, int RP>
inline void TokenTiles(const MatMulArgs& a, int64_t p0) {
  constexpr int kT = Kn::kTokenTile;
  int t = 0;
  for (; t + kT <= a.num_tokens; t += kT) Kn::template Tile<kT, RP>(a, t, p0);
  RestTile<Kn, RP, kT - 1>(a, p0, t, a.num_tokens - t);
}

template <class Kn>
void MatMulPanels(const MatMulArgs& a, int64_t p_begin, int64_t p_end) {
  // One token reads each weight once (memory bound): more panels at once keep more loads in
  // flight. Several tokens reuse each loaded column (compute bound): fewer panels, more tokens.
  constexpr int RP = Kn::kPanelTile;
  constexpr int RPD = Kn::kPanelTileDecode;
  if constexpr (requires { Kn::Prepare(a); }) Kn::Prepare(a);
  int64_t p = p_begin;
  if (a.num_tokens == 1) {
    for (; p + RPD <= p_end; p += RPD) Kn::template Tile<1, RPD>(a, 0, p);
  } else {
    for (; p + RP <= p_end; p += RP) TokenTiles<Kn, RP>(a, p);
  }
  for (; p < p_end; ++p) TokenTiles<Kn, 1>(a, p);
}

#include "engine/backend/cpu/kernels_impl_attention.h"

inline KernelTable MakeTable(std::string_view isa) {
  KernelTable t{};
  t.isa = isa;
  t.matmul[0] = &MatMulPanels<FloatKernel<PanelF32>>;
  t.matmul[1] = &MatMulPanels<FloatKernel<PanelF16>>;
  t.matmul[2] = &MatMulPanels<FloatKernel<PanelBf16>>;
  t.matmul[3] = &MatMulPanels<QuantKernel<Q8Block>>;
  t.matmul[4] = &MatMulPanels<QuantKernel<Q4Block>>;
  t.matmul[5] = &MatMulPanels<Q4KKernel>;
  t.matmul[kBf16PairKind] = &MatMulPanels<Bf16PairKernel>;
  t.matmul[7] = &MatMulPanels<QuantKernel<Q6KBlock>>;
  t.matmul[8] = &MatMulPanels<OffsetKernel<Q5KBlock>>;
  t.matmul[kOffset16Kind] = &MatMulPanels<OffsetKernel<Offset16Block>>;
  t.matmul[10] = &MatMulPanels<DotKernel<32, 4, -1>>;
  t.matmul[11] = &MatMulPanels<DotKernel<32, 5, -1>>;
  t.matmul[12] = &MatMulPanels<DotKernel<32, 8, 128>>;
  t.matmul[13] = &MatMulPanels<SuperDotKernel<16, 2, -1>>;
  t.matmul[14] = &MatMulPanels<SuperDotKernel<16, 6, 32>>;
  t.matmul[15] = &MatMulPanels<DotKernel<32, 4, 8>>;
  t.matmul[16] = &MatMulPanels<DotKernel<32, 5, 16>>;
  t.matmul[17] = &MatMulPanels<SuperDotKernel<16, 3, 4>>;
  t.matmul[18] = &MatMulPanels<SuperDotKernel<32, 4, -1>>;
  t.matmul[19] = &MatMulPanels<SuperDotKernel<32, 5, -1>>;
  t.matmul[20] = &MatMulPanels<DotKernel<32, 4, 128, true>>;
  t.kv_dot[static_cast<int>(KvDtype::kF32)] = &KvDot<KvDtype::kF32>;
  t.kv_dot[static_cast<int>(KvDtype::kF16)] = &KvDot<KvDtype::kF16>;
  t.kv_dot[static_cast<int>(KvDtype::kBF16)] = &KvDot<KvDtype::kBF16>;
  t.kv_axpy[static_cast<int>(KvDtype::kF32)] = &KvAxpy<KvDtype::kF32>;
  t.kv_axpy[static_cast<int>(KvDtype::kF16)] = &KvAxpy<KvDtype::kF16>;
  t.kv_axpy[static_cast<int>(KvDtype::kBF16)] = &KvAxpy<KvDtype::kBF16>;
  t.kv_decode_int8 = &KvDecode<KvDtype::kInt8>;
  t.kv_decode_int4 = &KvDecode<KvDtype::kInt4>;
  t.kv_dot_int8 = &KvDotQuant<KvDtype::kInt8>;
  t.kv_dot_int4 = &KvDotQuant<KvDtype::kInt4>;
  t.kv_axpy_int8 = &KvAxpyQuant<KvDtype::kInt8>;
  t.kv_axpy_int4 = &KvAxpyQuant<KvDtype::kInt4>;
  t.kv_in_place = &KvInPlaceShape;
  t.kv_decode_channel = &KvDecodeChannel;
  t.exp_sub_sum = &ExpSubSum;
  t.max = &MaxOf;
  t.to_f16 = &ToF16;
  t.silu_mul = &SiluMul;
  t.quantize_block = &QuantizeActivationBlock;
  return t;
}

// The integer-dot matrix products (kernels.h's integer-dot and K panels) and the quantization
// of their activations, for kernels_impl.h:
// included there, inside the ISA's namespace, after the tile helpers they use.
// (No include guard on purpose.)

// f(std::integral_constant<int, i>{}) for i = 0 .. N - 1: a loop whose index is a constant.
template <int N, class F>
inline void Unrolled(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }(
      std::make_integer_sequence<int, N>{});
}

// Isa as a type that depends on B, so calls to what only some tables define (Isa::MulActS)
// are checked only where a branch on B keeps them.
template <bool B>
struct IsaIf {
  using T = Isa;
};

// The IQ4 codebook moved to unsigned bytes (value + 128), as IQ4 nibbles look it up.
struct Iq4Book {
  uint8_t v[16];
};
inline constexpr Iq4Book kIq4Book = [] {
  Iq4Book b{};
  for (int i = 0; i < 16; ++i) b.v[i] = static_cast<uint8_t>(kIq4Values[i] + 128);
  return b;
}();

// The register type of a tile's codes: Isa::VI, or Isa::Wide for wide codes (below). (A
// specialisation, since vector types lose their attributes as template arguments.)
template <bool kWide>
struct CodeRegister {
  using T = Isa::VI;
};
template <>
struct CodeRegister<true> {
  using T = Isa::Wide;
};

// Integer-dot panels (kernels.h): the codes of G columns, kBits bits each (8: bytes; 4-6:
// 4-bit nibbles plus kBits - 4 bit planes; 2-3: 2-bit crumbs plus kBits - 2 planes; kBook:
// 4-bit indices into kIq4Book), and their exact sums with the activations. Codes that reach
// 128 and above (bytes, book values) are wide: each ISA prepares them once per tile for its
// products (Isa::PrepareWide), which may sum them less an offset (kSumOffset).
template <int G, int kBits, bool kBook = false>
struct DotCodes {
  using VI = typename Isa::VI;
  static constexpr bool kPacked = kBits < 8;            // several codes per byte
  static constexpr bool kWide = !kPacked || kBook;
  static constexpr int kSumOffset = kWide ? Isa::kWideOffset : 0;
  using W = typename CodeRegister<kWide>::T;
  using VS = typename Isa::VS;
  static constexpr int kLow = kBits < 4 ? 2 : 4;        // bits per field of a packed byte
  static constexpr int kFields = kPacked ? 8 / kLow : 1;  // fields per byte
  static constexpr int kPlanes = kPacked ? kBits - kLow : 0;
  static constexpr int kChunkCols = 4 * kFields;  // columns per 4 * kPanelRows bytes of low bits
  static constexpr size_t kChunkBytes = 4 * kPanelRows + 8 * kFields * kPlanes;
  static constexpr size_t kBytes = G / kChunkCols * kChunkBytes;
  // The products a short-sum lane takes per step are each at most kMaxCode * 127 in magnitude
  // (activations are within +-127): kRun steps stay within kShortMax before they are widened.
  static constexpr int64_t kMaxCode = kWide ? (Isa::kWideOffset != 0 ? 128 : 255) : (1 << kBits) - 1;
  static constexpr int kRun =
      static_cast<int>(std::max<int64_t>(1, Isa::kShortMax / (Isa::kShortProducts * kMaxCode * 127)));
  static constexpr int kSteps = G / kChunkCols * kFields;  // short-sum steps per group
  // The steps of a run as the kernel takes them: whole chunks (all fields of a chunk's bytes),
  // or one step when a run is shorter than a chunk; a group is a whole number of runs.
  static constexpr int kRunSteps = kRun >= kSteps ? kSteps : kRun >= kFields ? kRun / kFields * kFields : 1;
  static constexpr int kRunChunks = std::max(1, kRunSteps / kFields);
  static_assert(kSteps % kRunSteps == 0 && kFields % std::min(kRunSteps, kFields) == 0);
  // Sums unrolls kBlock chunks together (at most kMaxUnroll); kWholeRuns: a run ends in its
  // block. (Class constants: clang 14 rejects a local constexpr read in a nested generic lambda.)
  static constexpr int kMaxUnroll = 4;
  static constexpr int kBlock = kRunChunks <= kMaxUnroll ? kRunChunks : 1;
  static constexpr bool kWholeRuns = kBlock == kRunChunks;

  // w[p][v][h]: the codes of chunk c of panel p, vector v, field h, prepared for the products.
  template <int RP>
  static void LoadChunk(const uint8_t* const (&codes)[RP], int c, W (&w)[RP][kVecs][kFields]) {
    [[maybe_unused]] const typename Isa::VT book = Isa::Table16(kIq4Book.v);
    for (int p = 0; p < RP; ++p) {
      const uint8_t* chunk = codes[p] + c * kChunkBytes;
      for (int v = 0; v < kVecs; ++v) {
        VI u[kFields];
        if constexpr (!kPacked) {
          u[0] = Isa::LoadCodes(chunk + v * L * 4);
        } else {
          if constexpr (kLow == 4) {
            Isa::LoadNibbles(chunk + v * L * 4, &u[0], &u[1]);
          } else {
            Isa::LoadCrumbs(chunk + v * L * 4, u);
          }
          if constexpr (kBook) {
            for (int h = 0; h < kFields; ++h) u[h] = Isa::Lookup16(book, u[h]);
          }
          if constexpr (kBits == 6) {
            Isa::AddCrumbs(chunk + 4 * kPanelRows, v, &u[0], &u[1]);
          } else {
            // Plane b: 8 bytes of bit kLow + b per field h (the codes of columns 4h .. 4h + 3).
            for (int b = 0; b < kPlanes; ++b) {
              for (int h = 0; h < kFields; ++h) {
                Isa::AddBits(chunk + 4 * kPanelRows + 8 * (kFields * b + h), v, (1 << kLow) << b, &u[h]);
              }
            }
          }
        }
        for (int h = 0; h < kFields; ++h) {
          if constexpr (kWide) {
            w[p][v][h] = Isa::PrepareWide(u[h]);
          } else {
            w[p][v][h] = u[h];
          }
        }
      }
    }
  }

  // isum[t][p] += sum_k (u[k] - kSumOffset) * xq[k0 + k] for token t0 + t, the codes of panel p
  // at codes[p]; kScaled: times scale[p] (Isa::ScaleOf), folded into the widening. The chunks
  // of a run are unrolled at compile time: its first step is the products alone (Isa::MulS),
  // the others add to them (Isa::DotS), its last widens the sums. A run longer than kMaxUnroll
  // chunks (a whole group of byte codes with VNNI) goes in blocks of one chunk, widened after
  // the last. (Unrolling all 8 chunks of a byte-code group made Q8_0 up to 1.6x slower.)
  // kActSign: wide codes times activations with their signs moved onto the codes
  // (Isa::kActivationSign; REQUIRES no code 0).
  template <int RT, int RP, bool kScaled = false, bool kActSign = false>
  static void Sums(const QuantizedActivations& xq, int t0, int64_t k0, const uint8_t* const (&codes)[RP],
                   VI (&isum)[RT][RP][kVecs], const VI (*scale)[kVecs] = nullptr) {
    using ActIsa = typename IsaIf<kActSign>::T;
    static_assert(!kActSign || kRunSteps == 1, "Isa::MulActS starts a run of one step");
    VS ssum[RT][RP][kVecs];  // the current run's short sums
    const auto widen = [&](int t, int p, int v) {
      if constexpr (kScaled) {
        isum[t][p][v] = Isa::WidenBy(isum[t][p][v], ssum[t][p][v], scale[p][v]);
      } else {
        isum[t][p][v] = Isa::Widen(isum[t][p][v], ssum[t][p][v]);
      }
    };
    // Chunks c0 .. c0 + kBlock - 1; kOpens: c0 starts a run that spans blocks.
    const auto block = [&]<bool kOpens>(int c0) {
      Unrolled<kBlock>([&](auto ci) {
        const int c = c0 + ci;
        W w[RP][kVecs][kFields];
        LoadChunk<RP>(codes, c, w);
        Unrolled<kFields>([&](auto h) {
          constexpr int step = ci * kFields + h;  // within the block
          constexpr bool kFirst = kWholeRuns ? step % kRunSteps == 0 : kOpens && step == 0;
          constexpr bool kLast = kWholeRuns && (step + 1) % kRunSteps == 0;
          for (int t = 0; t < RT; ++t) {
            const VI xb = Isa::Set4(xq.q(t0 + t) + k0 + c * kChunkCols + 4 * h);
            [[maybe_unused]] VI xa;
            if constexpr (kActSign) xa = ActIsa::AbsBytes(xb);
            for (int p = 0; p < RP; ++p) {
              for (int v = 0; v < kVecs; ++v) {
                VS& ss = ssum[t][p][v];
                if constexpr (kActSign) {
                  ss = ActIsa::MulActS(w[p][v][h], xb, xa);
                } else if constexpr (kFirst && kWide) {
                  ss = Isa::MulWideS(w[p][v][h], xb);
                } else if constexpr (kFirst) {
                  ss = Isa::MulS(w[p][v][h], xb);
                } else if constexpr (kWide) {
                  ss = Isa::DotWideS(ss, w[p][v][h], xb);
                } else {
                  ss = Isa::DotS(ss, w[p][v][h], xb);
                }
                if constexpr (kLast) widen(t, p, v);
              }
            }
          }
        });
      });
    };
    block.template operator()<true>(0);
    for (int c0 = kBlock; c0 < G / kChunkCols; c0 += kBlock) block.template operator()<kWholeRuns>(c0);
    if constexpr (!kWholeRuns) {
      for (int t = 0; t < RT; ++t)
        for (int p = 0; p < RP; ++p)
          for (int v = 0; v < kVecs; ++v) widen(t, p, v);
    }
  }
};

// The sum of token t's quantized activations over columns [k0, k0 + G).
template <int G>
inline int32_t ActivationSum(const QuantizedActivations& xq, int t, int64_t k0) {
  const int32_t* sums = xq.sums(t) + k0 / 16;
  return G == 32 ? sums[0] + sums[1] : sums[0];
}

// A tile's panels and zeroed accumulators.
template <int RT, int RP>
inline void StartDotTile(const MatMulArgs& a, int64_t p0, const uint8_t* (&panels)[RP], V (&acc)[RT][RP][kVecs]) {
  for (int p = 0; p < RP; ++p) panels[p] = a.w->panel(p0 + p);
  for (int t = 0; t < RT; ++t)
    for (int p = 0; p < RP; ++p)
      for (int v = 0; v < kVecs; ++v) acc[t][p][v] = Isa::Zero();
}

// Integer-dot panels with f32 scales per group; kZero the zero point (-1: offsets stored).
// Per group: acc += float(isum - kZero * sum_k xq[k]) * (scale * d), or with offsets
// acc += float(isum) * (scale * d) and acc += offset * (d * sum_k xq[k]); d is the scale of
// the activations' block that holds the group.
template <int G, int kBits, int kZero, bool kBook = false>
struct DotKernel : IsaTiles {
  using VI = typename Isa::VI;
  using Codes = DotCodes<G, kBits, kBook>;
  static_assert(kZero >= 0 || Codes::kSumOffset == 0, "stored offsets take sums of the codes themselves");
  // The sums are of u - kSumOffset: what remains of the zero point.
  static constexpr int kZeroLeft = kZero - Codes::kSumOffset;
  static constexpr size_t kHeader = (kZero < 0 ? 8 : 4) * kPanelRows;
  static constexpr size_t kBytes = kHeader + Codes::kBytes;

  template <int RT, int RP>
  static void Tile(const MatMulArgs& a, int t0, int64_t p0) {
    if constexpr (RT == 1 && kBits == 8 && Isa::kActivationSign) {
      if (a.w->codes_symmetric()) return SignedTile<RT, RP, true>(a, t0, p0);
    }
    SignedTile<RT, RP, false>(a, t0, p0);
  }

  // kActSign: the single-token byte-code products with the activations' signs (Isa::MulActS).
  template <int RT, int RP, bool kActSign>
  static void SignedTile(const MatMulArgs& a, int t0, int64_t p0) {
    const QuantizedActivations& xq = *a.xq;
    const int64_t groups = a.w->cols() / G;
    const uint8_t* panels[RP];
    V acc[RT][RP][kVecs];
    StartDotTile<RT, RP>(a, p0, panels, acc);
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* codes[RP];
      for (int p = 0; p < RP; ++p) codes[p] = panels[p] + g * kBytes + kHeader;
      VI isum[RT][RP][kVecs];
      for (int t = 0; t < RT; ++t)
        for (int p = 0; p < RP; ++p)
          for (int v = 0; v < kVecs; ++v) isum[t][p][v] = Isa::ZeroI();
      Codes::template Sums<RT, RP, false, kActSign>(xq, t0, g * G, codes, isum);
      V dx[RT], dsum[RT];
      VI zsum[RT];
      for (int t = 0; t < RT; ++t) {
        const float d = xq.d(t0 + t)[g * G / xq.block()];
        const int32_t qsum = ActivationSum<G>(xq, t0 + t, g * G);
        dx[t] = Isa::Set1(d);
        if constexpr (kZero < 0) {
          dsum[t] = Isa::Set1(d * static_cast<float>(qsum));
        } else {
          zsum[t] = Isa::SetI(kZeroLeft * qsum);
        }
      }
      for (int p = 0; p < RP; ++p) {
        const float* header = reinterpret_cast<const float*>(panels[p] + g * kBytes);
        for (int v = 0; v < kVecs; ++v) {
          const V scale = Isa::Load(header + v * L);
          for (int t = 0; t < RT; ++t) {
            if constexpr (kZero < 0) {
              acc[t][p][v] = Isa::Fma(Isa::ToFloat(isum[t][p][v]), Isa::Mul(scale, dx[t]), acc[t][p][v]);
              acc[t][p][v] = Isa::Fma(Isa::Load(header + kPanelRows + v * L), dsum[t], acc[t][p][v]);
            } else {
              VI x = isum[t][p][v];
              if constexpr (kZeroLeft != 0) x = Isa::SubI(x, zsum[t]);
              acc[t][p][v] = Isa::Fma(Isa::ToFloat(x), Isa::Mul(scale, dx[t]), acc[t][p][v]);
            }
          }
        }
      }
    }
    StoreTile<RT, RP>(a, t0, p0, acc);
  }
};

// K-type integer-dot panels (kernels.h): per super-block of 256 columns the rows' f32 d (and
// -dmin), per group their integer sub-scales sc (and mins m), as ggml's K blocks hold them.
// Per super-block, exactly in int32: S = sum_j sc_j * isum_j, the sub-scales folded into the
// widening of the short sums (Isa::WidenBy), and M = sum_j m_j * qsum_j (with a zero point:
// sc_j * qsum_j), two groups per int16 multiply-add; then acc += float(S - kZero * M) * (d * dx),
// or with offsets acc += float(S) * (d * dx) + float(M) * (-dmin * dx), dx the activations'
// scale of the super-block (blocks of 256).
template <int G, int kBits, int kZero>
struct SuperDotKernel : IsaTiles {
  using VI = typename Isa::VI;
  using Codes = DotCodes<G, kBits>;
  static_assert(Codes::kSumOffset == 0);
  static_assert(256 / G % 2 == 0, "groups pair up");
  static constexpr bool kOffsets = kZero < 0;
  static constexpr size_t kHeader = (kOffsets ? 8 : 4) * kPanelRows;
  static constexpr size_t kGroupHeader = (kOffsets ? 2 : 1) * kPanelRows;
  static constexpr size_t kGroupBytes = kGroupHeader + Codes::kBytes;
  static constexpr size_t kBytes = kHeader + 256 / G * kGroupBytes;
  // The group header's bytes that multiply the activation sums: m, or sc with a zero point.
  static constexpr size_t kSumFactors = kOffsets ? kPanelRows : 0;

  template <int RT, int RP>
  static void Tile(const MatMulArgs& a, int t0, int64_t p0) {
    const QuantizedActivations& xq = *a.xq;
    const int64_t supers = a.w->cols() / 256;
    const uint8_t* panels[RP];
    V acc[RT][RP][kVecs];
    StartDotTile<RT, RP>(a, p0, panels, acc);
    for (int64_t s = 0; s < supers; ++s) {
      VI sacc[RT][RP][kVecs], macc[RT][RP][kVecs];
      for (int t = 0; t < RT; ++t)
        for (int p = 0; p < RP; ++p)
          for (int v = 0; v < kVecs; ++v) sacc[t][p][v] = macc[t][p][v] = Isa::ZeroI();
      for (int j = 0; j < 256 / G; j += 2) {
        const uint8_t* group[2][RP];
        for (int h = 0; h < 2; ++h) {
          const uint8_t* codes[RP];
          VI scale[RP][kVecs];
          for (int p = 0; p < RP; ++p) {
            group[h][p] = panels[p] + s * kBytes + kHeader + (j + h) * kGroupBytes;
            codes[p] = group[h][p] + kGroupHeader;
            for (int v = 0; v < kVecs; ++v) scale[p][v] = Isa::ScaleOf(group[h][p] + v * L);
          }
          Codes::template Sums<RT, RP, true>(xq, t0, s * 256 + (j + h) * G, codes, sacc, scale);
        }
        VI qpair[RT];  // the two groups' activation sums (each within +-32 * 127) as int16 pairs
        for (int t = 0; t < RT; ++t) {
          const uint32_t q0 = static_cast<uint32_t>(ActivationSum<G>(xq, t0 + t, s * 256 + j * G));
          const uint32_t q1 = static_cast<uint32_t>(ActivationSum<G>(xq, t0 + t, s * 256 + (j + 1) * G));
          qpair[t] = Isa::SetI(static_cast<int32_t>((q0 & 0xFFFF) | q1 << 16));
        }
        for (int p = 0; p < RP; ++p) {
          for (int v = 0; v < kVecs; ++v) {
            const VI f = Isa::Pairs(group[0][p] + kSumFactors + v * L, group[1][p] + kSumFactors + v * L);
            for (int t = 0; t < RT; ++t) macc[t][p][v] = Isa::MaddI(macc[t][p][v], f, qpair[t]);
          }
        }
      }
      for (int p = 0; p < RP; ++p) {
        const float* header = reinterpret_cast<const float*>(panels[p] + s * kBytes);
        for (int v = 0; v < kVecs; ++v) {
          const V d = Isa::Load(header + v * L);
          for (int t = 0; t < RT; ++t) {
            const V dx = Isa::Set1(xq.d(t0 + t)[s]);
            VI x = sacc[t][p][v];
            if constexpr (!kOffsets) x = Isa::SubI(x, Isa::MulI(macc[t][p][v], Isa::SetI(kZero)));
            acc[t][p][v] = Isa::Fma(Isa::ToFloat(x), Isa::Mul(d, dx), acc[t][p][v]);
            if constexpr (kOffsets) {
              const V ndmin = Isa::Load(header + kPanelRows + v * L);
              acc[t][p][v] = Isa::Fma(Isa::ToFloat(macc[t][p][v]), Isa::Mul(ndmin, dx), acc[t][p][v]);
            }
          }
        }
      }
    }
    StoreTile<RT, RP>(a, t0, p0, acc);
  }
};

// KernelTable::quantize_block: one block of QuantizedActivations::Quantize. Exact operations
// only, so every table gives the same bits; the compiler vectorizes the loops with the table's
// ISA (Quantize: 3.6% -> 2.0% of a 512-token Q4_K_M prefill with AVX2).
inline void QuantizeActivationBlock(const float* src, int block, int8_t* q, float* d, int32_t* sums) {
  // |x| as bits orders like |x| (NaN and infinity above every finite value), and its max
  // reduces in vector registers (16 lanes: independent chains, not one compare-select chain
  // through every value); m is then the first value of that magnitude.
  int32_t lanes[16] = {};
  for (int j = 0; j < block; j += 16) {
    for (int i = 0; i < 16; ++i) lanes[i] = std::max(lanes[i], std::bit_cast<int32_t>(src[j + i]) & 0x7FFFFFFF);
  }
  uint32_t abits = 0;
  for (int i = 0; i < 16; ++i) abits = std::max(abits, static_cast<uint32_t>(lanes[i]));
  const bool finite = abits < 0x7F800000u;
  const float amax = std::bit_cast<float>(abits);
  float max = 0.0f;
  for (int j = 0; j < block && finite && amax > 0.0f; ++j) {
    if (std::fabs(src[j]) == amax) {
      max = src[j];
      break;
    }
  }
  // Q8_0's and Q8_K's formulas (ggml's reference quantizers).
  float id;
  if (block == 32) {
    *d = F16ToF32(F32ToF16(amax / 127.0f));  // Q8_0 keeps its scale in F16
    id = amax >= std::numeric_limits<float>::min() ? 127.0f / amax : 0.0f;
  } else {
    id = amax >= std::numeric_limits<float>::min() ? -127.0f / max : 0.0f;
    *d = id != 0.0f ? 1.0f / id : 0.0f;
  }
  // A non-finite block stores zeros (converting its NaN products to int8 would be undefined),
  // and its NaN scale makes the products NaN.
  if (!finite) {
    *d = NAN;
    std::fill(q, q + block, int8_t{0});
  } else {
    // Adding and subtracting 1.5 * 2^23 rounds |v| <= 2^22 to the nearest integer, ties to even.
    constexpr float kRound = 12582912.0f;
    for (int j = 0; j < block; ++j) q[j] = static_cast<int8_t>(std::min((src[j] * id + kRound) - kRound, 127.0f));
  }
  for (int s = 0; s < block / 16; ++s) {
    int32_t sum = 0;
    for (int j = 0; j < 16; ++j) sum += q[16 * s + j];
    sums[s] = sum;
  }
}

// Tests of the GGUF reader against hostile files (truncation at every length, random bit
// flips, one hand-crafted file per validation rule) that must fail with a status naming the
// problem and never read out of bounds; and the real stories260K model.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "tests/test_paths.h"
#include "tests/unit/model/gguf_test_util.h"

namespace kvserve {
namespace gguf_hostile_test {

using namespace gguf_test;  // NOLINT(build/namespaces)

// ---- Hostile files -------------------------------------------------------------------------

TEST(GgufHostileTest, BadMagic) {
  std::string bytes = SmallValidFile();
  bytes[3] = 'G';
  ExpectParseError(bytes, StatusCode::kInvalidArgument, "bad magic 0x47554747");
  ExpectParseError("", StatusCode::kDataLoss, "truncated while reading magic");
}

TEST(GgufHostileTest, UnsupportedVersions) {
  ExpectParseError(RawFile().Header(1, 0, 0).bytes(), StatusCode::kInvalidArgument,
                   "GGUF version 1 (32-bit counts) is not supported");
  ExpectParseError(RawFile().Header(4, 0, 0).bytes(), StatusCode::kInvalidArgument,
                   "unsupported GGUF version 4");
  ExpectParseError(RawFile().Header(0x03000000, 0, 0).bytes(), StatusCode::kInvalidArgument,
                   "big-endian GGUF file (version 3) is not supported");
}

TEST(GgufHostileTest, TruncatedAtEveryLength) {
  const std::string bytes = SmallValidFile();
  ASSERT_NE(ParseOk(bytes), nullptr);
  for (size_t len = 0; len < bytes.size(); ++len) {
    StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(bytes.substr(0, len));
    ASSERT_FALSE(file.ok()) << "prefix of " << len << " bytes parsed";
    EXPECT_EQ(file.status().code(), StatusCode::kDataLoss) << len << ": " << file.status().ToString();
    const std::string& m = file.status().message();
    EXPECT_TRUE(m.find("truncated") != std::string::npos ||
                m.find("exceeds the file") != std::string::npos)
        << len << ": " << m;
  }
}

// Random bit flips either fail cleanly or yield a file whose tensors lie inside the buffer.
TEST(GgufHostileTest, RandomBitFlipsNeverReadOutOfBounds) {
  const std::string original = SmallValidFile();
  std::unique_ptr<GgufFile> clean = ParseOk(original);
  ASSERT_NE(clean, nullptr);
  const uint64_t header_end = clean->data_offset();
  std::mt19937 rng(20240531);
  int parsed = 0, failed = 0;
  for (int copy = 0; copy < 2000; ++copy) {
    std::string bytes = original;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) {
      // Mostly in the header, where the structure is.
      const uint64_t range = rng() % 5 == 0 ? bytes.size() : header_end;
      const uint64_t pos = rng() % range;
      bytes[pos] = static_cast<char>(bytes[pos] ^ (1 << (rng() % 8)));
    }
    StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(bytes);
    if (!file.ok()) {
      EXPECT_FALSE(file.status().message().empty());
      ++failed;
      continue;
    }
    ++parsed;
    const GgufFile& g = **file;
    const uint8_t* begin = g.file_data();
    const uint8_t* end = begin + g.file_size();
    uint64_t sum = 0;
    for (const auto& [key, value] : g.metadata()) sum += key.size() + Checksum(value);
    for (const GgufTensorInfo& t : g.tensors()) {
      ASSERT_GE(t.data, begin) << t.name;
      ASSERT_LE(t.nbytes, static_cast<uint64_t>(end - t.data)) << t.name;
      for (uint64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
    }
    EXPECT_GT(sum, 0u);
  }
  RecordProperty("parsed", parsed);
  RecordProperty("failed", failed);
  EXPECT_EQ(parsed + failed, 2000);
  EXPECT_GT(parsed, 0);
  EXPECT_GT(failed, 0);
}

TEST(GgufHostileTest, HugeStringLengths) {
  ExpectParseError(RawFile().Header(3, 0, 1).U64(1ull << 63).bytes() + std::string(20, 'k'),
                   StatusCode::kDataLoss, "string length 9223372036854775808 of metadata key #0");
  RawFile value;
  value.Str("name").U32(static_cast<uint32_t>(GgufType::kString)).U64(~0ull).Bytes("abc");
  ExpectParseError(OneTensorFileWithKv(1, value.bytes()), StatusCode::kDataLoss,
                   "string length 18446744073709551615 of name");
  RawFile tensor;
  tensor.Header(3, 1, 0).U64(1ull << 40).Zeros(40);
  ExpectParseError(tensor.bytes(), StatusCode::kDataLoss, "of tensor name #0");
}

TEST(GgufHostileTest, HugeArrayCounts) {
  RawFile kv;
  kv.Str("arr").U32(static_cast<uint32_t>(GgufType::kArray))
      .U32(static_cast<uint32_t>(GgufType::kUint32)).U64(1ull << 62).U32(1);
  ExpectParseError(OneTensorFileWithKv(1, kv.bytes()), StatusCode::kDataLoss,
                   "array count 4611686018427387904 of key 'arr' exceeds the file");
  RawFile nested;
  nested.Str("arr").U32(static_cast<uint32_t>(GgufType::kArray))
      .U32(static_cast<uint32_t>(GgufType::kArray)).U64(1)
      .U32(static_cast<uint32_t>(GgufType::kString)).U64(~0ull);
  ExpectParseError(OneTensorFileWithKv(1, nested.bytes()), StatusCode::kDataLoss,
                   "array count 18446744073709551615 of key 'arr' exceeds the file");
  ExpectParseError(RawFile().Header(3, 0, ~0ull).bytes(), StatusCode::kDataLoss,
                   "metadata count 18446744073709551615 exceeds the file");
  ExpectParseError(RawFile().Header(3, 1ull << 60, 0).Zeros(64).bytes(), StatusCode::kDataLoss,
                   "tensor count 1152921504606846976 exceeds the file");
}

TEST(GgufHostileTest, BadDimensionCounts) {
  RawFile zero;
  zero.Header(3, 1, 0).Str("t").U32(0).U32(kF32).U64(0).PadTo(32).Zeros(32);
  ExpectParseError(zero.bytes(), StatusCode::kDataLoss, "tensor 't' has 0 dimensions (1 to 4 allowed)");
  RawFile five;
  five.Header(3, 1, 0).Tensor("t", {1, 1, 1, 1, 1}, kF32, 0).PadTo(32).Zeros(32);
  ExpectParseError(five.bytes(), StatusCode::kDataLoss, "tensor 't' has 5 dimensions (1 to 4 allowed)");
}

TEST(GgufHostileTest, OverflowingDims) {
  RawFile product;
  product.Header(3, 1, 0).Tensor("t", {1ull << 32, 1ull << 32}, kF32, 0).PadTo(32).Zeros(32);
  ExpectParseError(product.bytes(), StatusCode::kDataLoss, "tensor 't' element count overflows");
  RawFile huge_dim;
  huge_dim.Header(3, 1, 0).Tensor("t", {0, ~0ull}, kF32, 0).PadTo(32).Zeros(32);
  ExpectParseError(huge_dim.bytes(), StatusCode::kDataLoss, "tensor 't' dimension 1 is 18446744073709551615");
  RawFile bytes;  // 2^62 f32 values fit int64 but their byte size does not fit uint64
  bytes.Header(3, 1, 0).Tensor("t", {1ull << 62}, kF32, 0).PadTo(32).Zeros(32);
  ExpectParseError(bytes.bytes(), StatusCode::kDataLoss, "tensor 't' byte size overflows");
}

TEST(GgufHostileTest, MisalignedOffset) {
  RawFile f;
  f.Header(3, 1, 0).Tensor("t", {1}, kF32, 4).PadTo(32).Zeros(64);
  ExpectParseError(f.bytes(), StatusCode::kDataLoss, "tensor 't' offset 0x4 is not aligned to 32");
}

TEST(GgufHostileTest, TensorDataPastTheEnd) {
  RawFile f;
  f.Header(3, 1, 0).Tensor("t", {16}, kF32, 32).PadTo(32).Zeros(64);
  ExpectParseError(f.bytes(), StatusCode::kDataLoss,
                   "tensor 't' data [0x20, +64) lies outside the file's data section (64 bytes)");
  RawFile wraps;  // offset + nbytes wraps around 2^64
  wraps.Header(3, 1, 0).Tensor("t", {16}, kF32, ~0ull - 31).PadTo(32).Zeros(64);
  ExpectParseError(wraps.bytes(), StatusCode::kDataLoss, "lies outside the file's data section");
  RawFile no_data;
  no_data.Header(3, 1, 0).Tensor("t", {16}, kF32, 0);
  ExpectParseError(no_data.bytes(), StatusCode::kDataLoss, "file truncated before the tensor data section");
}

TEST(GgufHostileTest, OverlappingTensors) {
  RawFile f;
  f.Header(3, 2, 0).Tensor("a", {16}, kF32, 0).Tensor("b", {8}, kF32, 32).PadTo(32).Zeros(64);
  ExpectParseError(f.bytes(), StatusCode::kDataLoss, "tensors 'a' and 'b' overlap in the data section");
}

TEST(GgufHostileTest, DuplicateKey) {
  RawFile kv;
  kv.KeyU32("general.x", 1).KeyU32("general.x", 2);
  ExpectParseError(OneTensorFileWithKv(2, kv.bytes()), StatusCode::kDataLoss,
                   "duplicate metadata key 'general.x'");
}

TEST(GgufHostileTest, DuplicateTensorName) {
  RawFile f;
  f.Header(3, 2, 0).Tensor("w", {8}, kF32, 0).Tensor("w", {8}, kF32, 32).PadTo(32).Zeros(64);
  ExpectParseError(f.bytes(), StatusCode::kDataLoss, "duplicate tensor name 'w'");
}

TEST(GgufHostileTest, UnknownTypes) {
  RawFile tensor;
  tensor.Header(3, 1, 0).Tensor("t", {8}, 99, 0).PadTo(32).Zeros(64);
  ExpectParseError(tensor.bytes(), StatusCode::kDataLoss, "tensor 't' has unknown type 99");
  RawFile value;
  value.Str("k").U32(13).U32(0);
  ExpectParseError(OneTensorFileWithKv(1, value.bytes()), StatusCode::kDataLoss,
                   "unknown value type 13 for key 'k'");
  RawFile element;
  element.Str("k").U32(static_cast<uint32_t>(GgufType::kArray)).U32(77).U64(0);
  ExpectParseError(OneTensorFileWithKv(1, element.bytes()), StatusCode::kDataLoss,
                   "unknown array element type 77 in key 'k'");
  RawFile boolean;
  boolean.Str("k").U32(static_cast<uint32_t>(GgufType::kBool)).U8(2);
  ExpectParseError(OneTensorFileWithKv(1, boolean.bytes()), StatusCode::kDataLoss,
                   "bool value 2 of key 'k'");
  RawFile row;  // Q8_0 rows must hold whole 32-value blocks
  row.Header(3, 1, 0).Tensor("q", {16}, static_cast<uint32_t>(GgmlType::kQ8_0), 0).PadTo(32).Zeros(64);
  ExpectParseError(row.bytes(), StatusCode::kDataLoss,
                   "tensor 'q': row length 16 is not a multiple of the q8_0 block size 32");
}

TEST(GgufHostileTest, BadAlignments) {
  for (uint32_t alignment : {0u, 48u, 3u, 1u << 21}) {
    RawFile kv;
    kv.KeyU32("general.alignment", alignment);
    ExpectParseError(OneTensorFileWithKv(1, kv.bytes()), StatusCode::kDataLoss,
                     "general.alignment must be a power of two integer <= 1048576, got " +
                         std::to_string(alignment));
  }
  RawFile text;
  text.Str("general.alignment").U32(static_cast<uint32_t>(GgufType::kString)).Str("32");
  ExpectParseError(OneTensorFileWithKv(1, text.bytes()), StatusCode::kDataLoss,
                   "general.alignment must be a power of two integer <= 1048576, got string");
  RawFile negative;
  negative.Str("general.alignment").U32(static_cast<uint32_t>(GgufType::kInt32)).U32(0xFFFFFFE0);
  ExpectParseError(OneTensorFileWithKv(1, negative.bytes()), StatusCode::kDataLoss, "got -32");
}

// `depth` arrays nested in one another, the innermost holding one u8.
std::string NestedArrays(int depth) {
  RawFile kv;
  kv.Str("deep").U32(static_cast<uint32_t>(GgufType::kArray));
  for (int d = 1; d < depth; ++d) kv.U32(static_cast<uint32_t>(GgufType::kArray)).U64(1);
  kv.U32(static_cast<uint32_t>(GgufType::kUint8)).U64(1).U8(9);
  return OneTensorFileWithKv(1, kv.bytes());
}

TEST(GgufHostileTest, ArraysNestedTooDeep) {
  std::unique_ptr<GgufFile> ok = ParseOk(NestedArrays(kGgufMaxArrayDepth));
  ASSERT_NE(ok, nullptr);
  const GgufValue* v = ok->Find("deep");
  for (int d = 1; d < kGgufMaxArrayDepth; ++d) v = &v->array.at(0);
  EXPECT_EQ(v->array.at(0).u64, 9u);
  ExpectParseError(NestedArrays(kGgufMaxArrayDepth + 1), StatusCode::kDataLoss,
                   "arrays nested deeper than 8 in key 'deep'");
}

TEST(GgufHostileTest, OpenReportsThePath) {
  const std::string missing = TempPath("missing.gguf");
  StatusOr<std::unique_ptr<GgufFile>> absent = GgufFile::Open(missing);
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  EXPECT_NE(absent.status().message().find(missing), std::string::npos);
  EXPECT_EQ(GgufFile::Open(::testing::TempDir()).status().code(), StatusCode::kInvalidArgument);

  const std::string path = TempPath("corrupt.gguf");
  std::string bytes = SmallValidFile();
  bytes.resize(bytes.size() - 1);
  std::ofstream(path, std::ios::binary) << bytes;
  StatusOr<std::unique_ptr<GgufFile>> corrupt = GgufFile::Open(path);
  EXPECT_EQ(corrupt.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(corrupt.status().message().rfind(path + ": tensor 'b' data", 0), 0u)
      << corrupt.status().ToString();
  std::filesystem::remove(path);

  const std::string empty = TempPath("empty.gguf");
  std::ofstream(empty, std::ios::binary).flush();
  EXPECT_EQ(GgufFile::Open(empty).status().code(), StatusCode::kDataLoss);
  std::filesystem::remove(empty);
}

// ---- The real model ------------------------------------------------------------------------

TEST(GgufRealModelTest, Stories260KParses) {
  REQUIRE_SHARED_FILE("models/stories260K.gguf");
  StatusOr<std::unique_ptr<GgufFile>> opened =
      GgufFile::Open(::kvserve::testing::SharedPath("models/stories260K.gguf"));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const GgufFile& file = **opened;
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 32u);
  EXPECT_EQ(file.file_size(), 1185376u);
  EXPECT_EQ(file.metadata().size(), 19u);
  EXPECT_EQ(file.GetString("general.architecture").value(), "llama");
  EXPECT_EQ(file.GetString("tokenizer.ggml.model").value(), "llama");
  EXPECT_EQ(file.GetUint("llama.block_count").value(), 5u);
  EXPECT_EQ(file.GetUint("llama.embedding_length").value(), 64u);
  EXPECT_EQ(file.GetUint("llama.feed_forward_length").value(), 172u);
  EXPECT_EQ(file.GetUint("llama.attention.head_count").value(), 8u);
  EXPECT_EQ(file.GetUint("llama.attention.head_count_kv").value(), 4u);
  EXPECT_EQ(file.GetUint("llama.context_length").value(), 2048u);
  EXPECT_EQ(file.GetUint("llama.rope.dimension_count").value(), 8u);
  EXPECT_EQ(file.GetFloat("llama.attention.layer_norm_rms_epsilon").value(),
            static_cast<double>(1e-5f));
  EXPECT_EQ(file.GetUint("tokenizer.ggml.bos_token_id").value(), 1u);
  EXPECT_EQ(file.GetUint("tokenizer.ggml.eos_token_id").value(), 2u);
  const std::vector<std::string> tokens = file.GetStringArray("tokenizer.ggml.tokens").value();
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[13], "<0x0A>");
  EXPECT_EQ(file.GetFloatArray("tokenizer.ggml.scores").value().size(), 512u);
  EXPECT_EQ(file.GetIntArray("tokenizer.ggml.token_type").value().size(), 512u);

  ASSERT_EQ(file.tensors().size(), 48u);
  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dims, (std::vector<uint64_t>{64, 512}));
  EXPECT_EQ(embd->type, GgmlType::kF32);
  EXPECT_EQ(embd->offset, 0u);
  EXPECT_EQ(embd->nbytes, 64u * 512u * 4u);
  EXPECT_EQ(embd->rows(), 512u);
  const GgufTensorInfo* output = file.FindTensor("output.weight");
  ASSERT_NE(output, nullptr);
  EXPECT_EQ(output->dims, (std::vector<uint64_t>{64, 512}));
  const GgufTensorInfo* down = file.FindTensor("blk.4.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dims, (std::vector<uint64_t>{172, 64}));
  uint64_t bytes = 0;
  for (const GgufTensorInfo& t : file.tensors()) {
    EXPECT_EQ(t.type, GgmlType::kF32) << t.name;
    bytes += (t.nbytes + 31) / 32 * 32;
  }
  EXPECT_EQ(file.data_offset() + bytes, file.file_size());
}

}  // namespace gguf_hostile_test
}  // namespace kvserve

// GgufFile: a read-only view of a GGUF (v2/v3) file: metadata key/values and tensor infos,
// with tensor data read in place from a memory mapping (or an owned buffer in tests).
// GgufWriter: builds GGUF v3 files (the inverse, for `kvserve mkmodel` and tests).
//
// Every offset, length and count read from the file is bounds-checked while parsing; a
// truncated, corrupt or hostile file yields a DATA_LOSS/INVALID_ARGUMENT status naming the
// problem (key or tensor, offset), never a crash or an out-of-bounds read. After a successful
// Open, every tensor's [data, data + nbytes) lies inside the file, tensors do not overlap,
// names and keys are unique and offsets are multiples of the alignment. Memory used while
// parsing is proportional to the bytes actually parsed (counts are never trusted for
// allocation), with at most kGgufMaxMetadataValues values in all. GgufFile is immutable after
// Open; thread-safe for readers. GgufWriter is a plain builder; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/model/ggml_types.h"

namespace kvserve {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint64_t kGgufDefaultAlignment = 32;
inline constexpr uint64_t kGgufMaxAlignment = uint64_t{1} << 20;  // larger: rejected
inline constexpr int kGgufMaxArrayDepth = 8;             // arrays nested deeper: rejected
inline constexpr uint64_t kGgufMaxMetadataValues = uint64_t{1} << 23;  // scalars + elements
inline constexpr uint32_t kGgufMaxDims = 4;

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view GgufTypeName(GgufType type);

// One metadata value. Integers are widened into `i64`/`u64` (both set when representable),
// floats into `f64`; strings into `str`; arrays into `array` (elements carry `elem_type`).
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t u64 = 0;
  int64_t i64 = 0;
  double f64 = 0;
  bool b = false;
  std::string str;
  GgufType elem_type = GgufType::kUint8;  // arrays only
  std::vector<GgufValue> array;           // arrays only

  bool is_integer() const;
  bool is_float() const { return type == GgufType::kFloat32 || type == GgufType::kFloat64; }
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // dims[0] varies fastest (row length)
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;         // from the start of the data section
  uint64_t num_elements = 0;
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // inside the mapping

  uint64_t rows() const { return dims.empty() || dims[0] == 0 ? 0 : num_elements / dims[0]; }
  uint64_t row_length() const { return dims.empty() ? 0 : dims[0]; }
};

class GgufFile {
 public:
  // Maps `path` read-only and parses it.
  [[nodiscard]] static StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory copy (tests, fuzzing). The bytes are owned by the returned object.
  [[nodiscard]] static StatusOr<std::unique_ptr<GgufFile>> FromBytes(std::string bytes);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  // The whole file ([file_data(), file_data() + file_size())) and where its data section
  // starts (tensor offsets are relative to it).
  const uint8_t* file_data() const { return data_; }
  uint64_t data_offset() const { return data_offset_; }

  // ---- Metadata ----
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  [[nodiscard]] const GgufValue* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Typed getters: NOT_FOUND when absent, INVALID_ARGUMENT when the type does not fit
  // (integers of any width are accepted when the value is in range; GetFloat also accepts
  // integers; GetFloatArray accepts float32/float64 elements; GetIntArray any integer
  // elements that fit int64).
  [[nodiscard]] StatusOr<std::string> GetString(std::string_view key) const;
  [[nodiscard]] StatusOr<uint64_t> GetUint(std::string_view key) const;
  [[nodiscard]] StatusOr<int64_t> GetInt(std::string_view key) const;
  [[nodiscard]] StatusOr<double> GetFloat(std::string_view key) const;  // ints accepted too
  [[nodiscard]] StatusOr<bool> GetBool(std::string_view key) const;
  [[nodiscard]] StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  [[nodiscard]] StatusOr<std::vector<float>> GetFloatArray(std::string_view key) const;
  [[nodiscard]] StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;

  // ---- Tensors ----
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  [[nodiscard]] const GgufTensorInfo* FindTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  [[nodiscard]] Status Parse();

  // Exactly one of mapping_/owned_ backs data_.
  void* mapping_ = nullptr;
  std::string owned_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;

  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF v3 file: metadata in insertion order, then tensor infos, then each tensor's
// data at an offset aligned to `alignment` (each tensor padded to it, as ggml does). When
// `alignment` is not 32, `general.alignment` (u32) is the first key so readers find it.
// Misuse (duplicate key or tensor, value whose fields contradict its type, bytes of the wrong
// size, arrays nested deeper than kGgufMaxArrayDepth) is a programming error: CHECK.
// Used by `kvserve mkmodel` and by tests that craft files.
class GgufWriter {
 public:
  // REQUIRES: alignment is a power of two <= kGgufMaxAlignment.
  explicit GgufWriter(uint64_t alignment = kGgufDefaultAlignment);

  // Integers are taken from `u64` (unsigned types) or `i64` (signed types) and must fit the
  // type's width; float32/float64 from `f64`; bool from `b`; strings from `str`; arrays from
  // `elem_type` + `array` (every element's type == elem_type).
  void AddValue(std::string key, GgufValue value);
  void AddString(std::string key, std::string value);
  void AddUint32(std::string key, uint32_t value);
  void AddInt32(std::string key, int32_t value);
  void AddFloat32(std::string key, float value);
  void AddBool(std::string key, bool value);
  void AddStringArray(std::string key, const std::vector<std::string>& values);
  void AddFloat32Array(std::string key, const std::vector<float>& values);
  void AddInt32Array(std::string key, const std::vector<int32_t>& values);

  // `bytes` must be the encoded tensor (GgmlRowBytes(type, dims[0]) * rows bytes).
  // REQUIRES: 1 <= dims.size() <= 4, a known type, a new name.
  void AddTensor(std::string name, GgmlType type, std::vector<uint64_t> dims, std::string bytes);

  // The whole file, in memory (tests, small files).
  [[nodiscard]] std::string Serialize() const;
  // Streams the file to `path + ".partial"` (header, then each tensor's bytes straight from
  // memory) and renames it to `path`, so `path` never holds a half-written file. Returns
  // the I/O error (naming the path) on failure, after removing the partial file.
  [[nodiscard]] Status WriteFile(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> dims;
    std::string bytes;
  };
  // Everything before the data section: header, metadata, tensor infos, padding.
  std::string EncodeHeader() const;
  uint64_t PaddedSize(uint64_t n) const { return (n + alignment_ - 1) / alignment_ * alignment_; }

  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> values_;
  std::vector<Tensor> tensors_;
};

}  // namespace kvserve

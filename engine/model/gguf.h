// GgufFile: a read-only view of a GGUF (v2/v3) file: metadata key/values and tensor infos,
// with tensor data read in place from a memory mapping (or an owned buffer in tests).
//
// Every offset, length and count read from the file is bounds-checked while parsing; a
// truncated, corrupt or hostile file yields a DATA_LOSS/INVALID_ARGUMENT status naming the
// problem (key or tensor, offset), never a crash or an out-of-bounds read. After a successful
// Open, every tensor's [data, data + nbytes) lies inside the file. Immutable after Open;
// thread-safe for readers.
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

  // ---- Metadata ----
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  [[nodiscard]] const GgufValue* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Typed getters: NOT_FOUND when absent, INVALID_ARGUMENT when the type does not fit
  // (integers of any width are accepted when the value is in range).
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
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF v3 file in memory: metadata in insertion order, then tensor infos, then data
// aligned to `alignment`. Used by `kvserve mkmodel` and by tests that craft files.
class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}

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
  void AddTensor(std::string name, GgmlType type, std::vector<uint64_t> dims, std::string bytes);

  // The whole file.
  [[nodiscard]] std::string Serialize() const;
  [[nodiscard]] Status WriteFile(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> dims;
    std::string bytes;
  };
  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> values_;
  std::vector<Tensor> tensors_;
};

}  // namespace kvserve

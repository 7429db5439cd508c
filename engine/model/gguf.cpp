// GGUF reader: a bounds-checked cursor over the file's bytes parses the header, the metadata
// (recursively for arrays, depth and total value count bounded) and the tensor infos, then
// validates the tensor layout (alignment, sizes, bounds, overlaps) before any tensor data
// pointer is handed out. Nothing read from the file sizes an allocation before the bytes it
// describes have been seen to exist.
#include "engine/model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

namespace kvserve {
namespace {

// Smallest encodings: a key/value is a key length, a type and a 1-byte value; a tensor info
// is a name length, n_dims, one dim, a type and an offset.
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
constexpr uint64_t kMaxDimension = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
// Containers grow as elements are parsed; a count from the file reserves at most this many.
constexpr uint64_t kMaxReserve = 4096;

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Bounds-checked little-endian reader over [data, data + size).
class Reader {
 public:
  Reader(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename T>
  Status Read(T* out, std::string_view what) {
    if (remaining() < sizeof(T)) {
      return DataLossError("file truncated while reading " + std::string(what) + " at offset " +
                           Hex(pos_));
    }
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return OkStatus();
  }

  Status ReadString(std::string* out, std::string_view what) {
    uint64_t len = 0;
    RETURN_IF_ERROR(Read(&len, what));
    if (len > remaining()) {
      return DataLossError("string length " + std::to_string(len) + " of " + std::string(what) +
                           " at offset " + Hex(pos_ - 8) + " exceeds the file");
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return OkStatus();
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// Smallest encoded size of one element of `type` (to bound array counts by file size).
uint64_t MinEncodedSize(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool: return 1;
    case GgufType::kUint16:
    case GgufType::kInt16: return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32: return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
    case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

bool ValidType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

template <typename T>
Status ReadInteger(Reader& r, GgufValue* v, std::string_view what) {
  T x;
  RETURN_IF_ERROR(r.Read(&x, what));
  if constexpr (std::is_signed_v<T>) {
    v->i64 = x;
    v->u64 = x >= 0 ? static_cast<uint64_t>(x) : 0;
  } else {
    v->u64 = x;
    v->i64 = x <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                 ? static_cast<int64_t>(x)
                 : 0;
  }
  v->f64 = static_cast<double>(x);
  return OkStatus();
}

// How many more metadata values (scalars and array elements) the file may hold.
struct ValueBudget {
  uint64_t values_left = kGgufMaxMetadataValues;
};

Status ReadValue(Reader& r, GgufType type, GgufValue* v, const std::string& key, int depth,
                 ValueBudget& budget);

Status ReadArray(Reader& r, GgufValue* v, const std::string& key, int depth,
                 ValueBudget& budget) {
  if (depth >= kGgufMaxArrayDepth) {
    return DataLossError("arrays nested deeper than " + std::to_string(kGgufMaxArrayDepth) +
                         " in key '" + key + "'");
  }
  uint32_t elem = 0;
  uint64_t count = 0;
  RETURN_IF_ERROR(r.Read(&elem, key));
  RETURN_IF_ERROR(r.Read(&count, key));
  if (!ValidType(elem)) {
    return DataLossError("unknown array element type " + std::to_string(elem) + " in key '" +
                         key + "'");
  }
  v->elem_type = static_cast<GgufType>(elem);
  if (count > r.remaining() / MinEncodedSize(v->elem_type)) {
    return DataLossError("array count " + std::to_string(count) + " of key '" + key +
                         "' exceeds the file");
  }
  if (count > budget.values_left) {
    return InvalidArgumentError("key '" + key + "': the metadata holds more than " +
                                std::to_string(kGgufMaxMetadataValues) + " values");
  }
  v->array.reserve(std::min(count, kMaxReserve));
  for (uint64_t i = 0; i < count; ++i) {
    RETURN_IF_ERROR(ReadValue(r, v->elem_type, &v->array.emplace_back(), key, depth + 1, budget));
  }
  return OkStatus();
}

Status ReadValue(Reader& r, GgufType type, GgufValue* v, const std::string& key, int depth,
                 ValueBudget& budget) {
  if (budget.values_left == 0) {
    return InvalidArgumentError("key '" + key + "': the metadata holds more than " +
                                std::to_string(kGgufMaxMetadataValues) + " values");
  }
  --budget.values_left;
  v->type = type;
  switch (type) {
    case GgufType::kUint8: return ReadInteger<uint8_t>(r, v, key);
    case GgufType::kInt8: return ReadInteger<int8_t>(r, v, key);
    case GgufType::kUint16: return ReadInteger<uint16_t>(r, v, key);
    case GgufType::kInt16: return ReadInteger<int16_t>(r, v, key);
    case GgufType::kUint32: return ReadInteger<uint32_t>(r, v, key);
    case GgufType::kInt32: return ReadInteger<int32_t>(r, v, key);
    case GgufType::kUint64: return ReadInteger<uint64_t>(r, v, key);
    case GgufType::kInt64: return ReadInteger<int64_t>(r, v, key);
    case GgufType::kFloat32: {
      float f;
      RETURN_IF_ERROR(r.Read(&f, key));
      v->f64 = f;
      return OkStatus();
    }
    case GgufType::kFloat64: return r.Read(&v->f64, key);
    case GgufType::kBool: {
      uint8_t b;
      RETURN_IF_ERROR(r.Read(&b, key));
      if (b > 1) return DataLossError("bool value " + std::to_string(b) + " of key '" + key + "'");
      v->b = b != 0;
      return OkStatus();
    }
    case GgufType::kString: return r.ReadString(&v->str, key);
    case GgufType::kArray: return ReadArray(r, v, key, depth, budget);
  }
  return DataLossError("unknown value type for key '" + key + "'");
}

Status CheckVersion(uint32_t version) {
  if (version == 2 || version == 3) return OkStatus();
  if (version == 1) {
    return InvalidArgumentError("GGUF version 1 (32-bit counts) is not supported; convert the "
                                "file to version 3");
  }
  const uint32_t swapped = __builtin_bswap32(version);
  if (swapped == 2 || swapped == 3) {
    return InvalidArgumentError("big-endian GGUF file (version " + std::to_string(swapped) +
                                ") is not supported");
  }
  return InvalidArgumentError("unsupported GGUF version " + std::to_string(version));
}

Status ParseMetadata(Reader& r, uint64_t kv_count, std::map<std::string, GgufValue>* metadata) {
  if (kv_count > r.remaining() / kMinKeyValueBytes) {
    return DataLossError("metadata count " + std::to_string(kv_count) + " exceeds the file");
  }
  ValueBudget budget;
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key;
    RETURN_IF_ERROR(r.ReadString(&key, "metadata key #" + std::to_string(i)));
    uint32_t type = 0;
    RETURN_IF_ERROR(r.Read(&type, key));
    if (!ValidType(type)) {
      return DataLossError("unknown value type " + std::to_string(type) + " for key '" + key + "'");
    }
    GgufValue value;
    RETURN_IF_ERROR(ReadValue(r, static_cast<GgufType>(type), &value, key, 0, budget));
    if (metadata->count(key) != 0) return DataLossError("duplicate metadata key '" + key + "'");
    metadata->emplace(std::move(key), std::move(value));
  }
  return OkStatus();
}

// general.alignment if present (any integer type), else the default.
StatusOr<uint64_t> AlignmentOf(const std::map<std::string, GgufValue>& metadata) {
  auto it = metadata.find("general.alignment");
  if (it == metadata.end()) return kGgufDefaultAlignment;
  const GgufValue& a = it->second;
  const bool is_signed_negative = a.is_integer() && a.i64 < 0;
  if (!a.is_integer() || is_signed_negative || a.u64 == 0 || a.u64 > kGgufMaxAlignment ||
      (a.u64 & (a.u64 - 1)) != 0) {
    return DataLossError("general.alignment must be a power of two integer <= " +
                         std::to_string(kGgufMaxAlignment) + ", got " +
                         (a.is_integer() ? (is_signed_negative ? std::to_string(a.i64)
                                                               : std::to_string(a.u64))
                                         : std::string(GgufTypeName(a.type))));
  }
  return a.u64;
}

// Reads one tensor info and checks everything that does not depend on the other tensors.
Status ParseTensorInfo(Reader& r, uint64_t index, uint64_t alignment, GgufTensorInfo* t) {
  RETURN_IF_ERROR(r.ReadString(&t->name, "tensor name #" + std::to_string(index)));
  const std::string what = "tensor '" + t->name + "'";
  uint32_t n_dims = 0;
  RETURN_IF_ERROR(r.Read(&n_dims, what));
  if (n_dims == 0 || n_dims > kGgufMaxDims) {
    return DataLossError(what + " has " + std::to_string(n_dims) + " dimensions (1 to " +
                         std::to_string(kGgufMaxDims) + " allowed)");
  }
  t->dims.resize(n_dims);
  t->num_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    RETURN_IF_ERROR(r.Read(&t->dims[d], what));
    if (t->dims[d] > kMaxDimension) {
      return DataLossError(what + " dimension " + std::to_string(d) + " is " +
                           std::to_string(t->dims[d]) + " (more than 2^63 - 1)");
    }
    if (t->dims[d] != 0 && t->num_elements > kMaxDimension / t->dims[d]) {
      return DataLossError(what + " element count overflows");
    }
    t->num_elements *= t->dims[d];
  }
  uint32_t type = 0;
  RETURN_IF_ERROR(r.Read(&type, what));
  std::optional<GgmlTypeInfo> info = GetGgmlTypeInfo(type);
  if (!info) return DataLossError(what + " has unknown type " + std::to_string(type));
  t->type = static_cast<GgmlType>(type);
  RETURN_IF_ERROR(r.Read(&t->offset, what));
  if (t->dims[0] % info->block_values != 0) {
    return DataLossError(what + ": row length " + std::to_string(t->dims[0]) +
                         " is not a multiple of the " + std::string(info->name) +
                         " block size " + std::to_string(info->block_values));
  }
  const uint64_t blocks = t->num_elements / info->block_values;
  if (blocks > std::numeric_limits<uint64_t>::max() / info->block_bytes) {
    return DataLossError(what + " byte size overflows");
  }
  t->nbytes = blocks * info->block_bytes;
  if (t->offset % alignment != 0) {
    return DataLossError(what + " offset " + Hex(t->offset) + " is not aligned to " +
                         std::to_string(alignment));
  }
  return OkStatus();
}

// REQUIRES: every tensor's [offset, offset + nbytes) lies inside the data section.
Status CheckNoOverlap(const std::vector<GgufTensorInfo>& tensors) {
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors.size());
  for (const GgufTensorInfo& t : tensors) {
    if (t.nbytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    if (by_offset[i]->offset < prev.offset + prev.nbytes) {
      return DataLossError("tensors '" + prev.name + "' and '" + by_offset[i]->name +
                           "' overlap in the data section");
    }
  }
  return OkStatus();
}

}  // namespace

std::string_view GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64: return true;
    default: return false;
  }
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string message = "cannot open '" + path + "': " + std::strerror(err);
    return err == ENOENT ? NotFoundError(std::move(message))
                         : InvalidArgumentError(std::move(message));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return InvalidArgumentError("cannot stat '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError("'" + path + "' is not a regular file");
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return InvalidArgumentError("cannot mmap '" + path + "': " + std::strerror(err));
    }
    file->mapping_ = p;
    file->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  Status status = file->Parse();
  if (!status.ok()) return status.WithContext(path);
  return file;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::string bytes) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->owned_ = std::move(bytes);
  file->data_ = reinterpret_cast<const uint8_t*>(file->owned_.data());
  file->size_ = file->owned_.size();
  RETURN_IF_ERROR(file->Parse());
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

Status GgufFile::Parse() {
  Reader r(data_, size_);
  uint32_t magic = 0;
  RETURN_IF_ERROR(r.Read(&magic, "magic"));
  if (magic != kGgufMagic) return InvalidArgumentError("not a GGUF file (bad magic " + Hex(magic) + ")");
  RETURN_IF_ERROR(r.Read(&version_, "version"));
  RETURN_IF_ERROR(CheckVersion(version_));
  uint64_t tensor_count = 0, kv_count = 0;
  RETURN_IF_ERROR(r.Read(&tensor_count, "tensor count"));
  RETURN_IF_ERROR(r.Read(&kv_count, "metadata count"));
  RETURN_IF_ERROR(ParseMetadata(r, kv_count, &metadata_));
  ASSIGN_OR_RETURN(alignment_, AlignmentOf(metadata_));

  if (tensor_count > r.remaining() / kMinTensorInfoBytes) {
    return DataLossError("tensor count " + std::to_string(tensor_count) + " exceeds the file");
  }
  tensors_.reserve(std::min(tensor_count, kMaxReserve));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo& t = tensors_.emplace_back();
    RETURN_IF_ERROR(ParseTensorInfo(r, i, alignment_, &t));
    if (!tensor_index_.emplace(t.name, i).second) {
      return DataLossError("duplicate tensor name '" + t.name + "'");
    }
  }

  // r.pos() <= size_ and alignment_ <= kGgufMaxAlignment: no overflow.
  data_offset_ = (r.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > size_) {
    return DataLossError("file truncated before the tensor data section (which starts at " +
                         Hex(data_offset_) + ")");
  }
  const uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  for (GgufTensorInfo& t : tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return DataLossError("tensor '" + t.name + "' data [" + Hex(t.offset) + ", +" +
                           std::to_string(t.nbytes) + ") lies outside the file's data section (" +
                           std::to_string(data_size) + " bytes): file truncated or corrupt");
    }
    t.data = data_ + data_offset_ + t.offset;
  }
  return CheckNoOverlap(tensors_);
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {

Status Missing(std::string_view key) {
  return NotFoundError("missing key '" + std::string(key) + "'");
}

std::string TypeDescription(const GgufValue& v) {
  if (v.type != GgufType::kArray) return std::string(GgufTypeName(v.type));
  return "array of " + std::string(GgufTypeName(v.elem_type));
}

Status WrongType(std::string_view key, const GgufValue& v, std::string_view want) {
  return InvalidArgumentError("key '" + std::string(key) + "' is " + TypeDescription(v) +
                              ", expected " + std::string(want));
}

bool IsSignedInteger(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 ||
         t == GgufType::kInt64;
}

bool IsIntegerType(GgufType t) {
  GgufValue probe;
  probe.type = t;
  return probe.is_integer();
}

// Whether the integer value `v` is representable as int64.
bool FitsInt64(const GgufValue& v) {
  return v.type != GgufType::kUint64 ||
         v.u64 <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

}  // namespace

StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != GgufType::kString) return WrongType(key, *v, "string");
  return v->str;
}

StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (!v->is_integer()) return WrongType(key, *v, "an unsigned integer");
  if (IsSignedInteger(v->type) && v->i64 < 0) {
    return InvalidArgumentError("key '" + std::string(key) + "' is negative (" +
                                std::to_string(v->i64) + "), expected an unsigned integer");
  }
  return v->u64;
}

StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (!v->is_integer()) return WrongType(key, *v, "an integer");
  if (!FitsInt64(*v)) {
    return InvalidArgumentError("key '" + std::string(key) + "' (" + std::to_string(v->u64) +
                                ") is out of the int64 range");
  }
  return v->i64;
}

StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (!v->is_float() && !v->is_integer()) return WrongType(key, *v, "a number");
  return v->f64;
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != GgufType::kBool) return WrongType(key, *v, "bool");
  return v->b;
}

StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString) {
    return WrongType(key, *v, "array of strings");
  }
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(e.str);
  return out;
}

StatusOr<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != GgufType::kArray ||
      (v->elem_type != GgufType::kFloat32 && v->elem_type != GgufType::kFloat64)) {
    return WrongType(key, *v, "array of floats");
  }
  std::vector<float> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(static_cast<float>(e.f64));
  return out;
}

StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != GgufType::kArray || !IsIntegerType(v->elem_type)) {
    return WrongType(key, *v, "array of integers");
  }
  std::vector<int64_t> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) {
    if (!FitsInt64(e)) {
      return InvalidArgumentError("key '" + std::string(key) + "': element " +
                                  std::to_string(out.size()) + " (" + std::to_string(e.u64) +
                                  ") is out of the int64 range");
    }
    out.push_back(e.i64);
  }
  return out;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace kvserve

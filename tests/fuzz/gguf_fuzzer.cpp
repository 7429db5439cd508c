// Fuzz target: the GGUF reader (GgufFile::FromBytes) and everything a model load does with a
// parsed file: typed metadata getters, the vocabulary, the model config and weight binding
// (Model::FromGguf), and one tokenization with the loaded tokenizer.
//
// Checks: no crash, no out-of-bounds read (ASan), no UB (UBSan); a file that parses has every
// tensor's bytes inside the file; a model that loads has a usable tokenizer.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/model/gguf.h"
#include "engine/model/gguf_vocab.h"
#include "engine/model/weights.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  if (size > (1 << 20)) return 0;
  StatusOr<std::unique_ptr<GgufFile>> parsed =
      GgufFile::FromBytes(std::string(reinterpret_cast<const char*>(data), size));
  if (!parsed.ok()) return 0;
  const GgufFile& file = **parsed;
  const uint8_t* begin = file.file_data();
  const uint8_t* end = begin + file.file_size();
  for (const GgufTensorInfo& t : file.tensors()) {
    FUZZ_CHECK(t.data >= begin && t.data <= end && t.nbytes <= static_cast<uint64_t>(end - t.data));
    volatile uint8_t sink = t.nbytes > 0 ? t.data[t.nbytes - 1] : 0;  // ASan: inside the buffer
    (void)sink;
  }
  for (const auto& [key, value] : file.metadata()) {
    (void)file.GetString(key);
    (void)file.GetUint(key);
    (void)file.GetInt(key);
    (void)file.GetFloat(key);
    (void)file.GetBool(key);
    (void)file.GetStringArray(key);
    (void)file.GetFloatArray(key);
    (void)file.GetIntArray(key);
  }
  (void)LoadVocab(file);

  ModelLoadOptions options;
  StatusOr<std::unique_ptr<Model>> model = Model::FromGguf(std::move(parsed).value(), options);
  if (!model.ok()) return 0;
  const Tokenizer& tok = (*model)->tokenizer();
  for (int32_t id : tok.Encode("Hello world, \xC3\xA9t\xC3\xA9 <s>", true, true)) {
    FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
  }
  return 0;
}

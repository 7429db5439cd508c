// MaskBench procedure (see maskbench.h).
#include "tools/maskbench/maskbench.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"

namespace kvserve {
namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::time_point from) { return std::chrono::duration<double, std::micro>(Clock::now() - from).count(); }

// Python's float repr: the shortest round-trip digits, exponent form below 1e-4 and from
// 1e16, always a '.' or an exponent.
std::string PythonFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  std::string s = fmt::format("{}", d);  // as repr: 1e+16, 1e-05, 0.0001, 1.5
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

std::string PythonJsonDumps(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        out += (first ? "" : ", ") + JsonStringLiteral(k) + ": " + PythonJsonDumps(x);
        first = false;
      }
      return out + "}";
    }
    case nlohmann::ordered_json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + PythonJsonDumps(v[i]);
      return out + "]";
    }
    case nlohmann::ordered_json::value_t::string: return JsonStringLiteral(v.get<std::string>());
    case nlohmann::ordered_json::value_t::number_float: return PythonFloat(v.get<double>());
    default: return v.dump();  // integers, true, false, null
  }
}

MaskBenchResult RunMaskBenchFile(const std::string& path, const Tokenizer& tokenizer, const TokenTrie& trie,
                                 const MaskBenchOptions& options) {
  MaskBenchResult r;
  r.file = path;
  nlohmann::ordered_json doc;
  try {
    std::ifstream in(path);
    std::stringstream all;
    all << in.rdbuf();
    doc = nlohmann::ordered_json::parse(all.str());
  } catch (const std::exception& e) {
    r.status = "read_error";
    r.detail = e.what();
    return r;
  }
  const Clock::time_point start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(options.time_limit_s);
  JsonSchemaOptions schema_options;
  schema_options.limits.compile_timeout = std::chrono::milliseconds(static_cast<int64_t>(options.time_limit_s * 1000));
  StatusOr<CompiledSchema> compiled = CompileJsonSchema(doc["schema"].dump(), schema_options);
  if (!compiled.ok()) {
    r.status = compiled.status().code() == StatusCode::kDeadlineExceeded ? "timeout" : "compile_error";
    r.detail = compiled.status().ToString();
    r.ttfm_us = Us(start);
    return r;
  }
  auto grammar = std::make_shared<CompiledGrammar>(std::move(compiled->grammar), &trie, options.shared_masks);
  TokenMask mask(trie.vocab_size());
  {
    GrammarMatcher first(grammar);
    first.FillMask(&mask);
  }
  r.ttfm_us = Us(start);
  const int32_t eos = tokenizer.eos_id();
  r.status = "passing";
  const nlohmann::ordered_json tests = doc.value("tests", nlohmann::ordered_json::array());
  for (size_t t = 0; t < tests.size() && r.status == "passing"; ++t) {
    const bool valid = tests[t].value("valid", false);
    const std::string text = PythonJsonDumps(tests[t]["data"]);
    const std::vector<int32_t> tokens = tokenizer.Encode(text, /*add_special=*/false, /*parse_special=*/false);
    GrammarMatcher m(grammar);
    bool accepted = true;
    std::string refused;
    for (size_t i = 0; i <= tokens.size(); ++i) {
      if (Clock::now() > deadline) {
        r.status = "timeout";
        return r;
      }
      const Clock::time_point t0 = Clock::now();
      m.FillMask(&mask);
      const double us = Us(t0);
      if (t > 0 || i > 0) {  // the first test's first mask is the one in ttfm_us
        r.tbm_us.push_back(us);
        r.tbm_us_max = std::max(r.tbm_us_max, us);
      }
      if (i == tokens.size()) {
        if (eos < 0 || !mask.Test(eos)) accepted = false, refused = "end of text";
        break;
      }
      ++r.num_tokens;
      const int32_t tok = tokens[i];
      if (!mask.Test(tok)) {
        accepted = false;
        refused = fmt::format("token {} ({}) at byte {}", i, nlohmann::json(trie.bytes(tok)).dump(), text.size());
        break;
      }
      if (!m.AcceptToken(tok)) {  // the mask allowed what the matcher refuses: a bug
        r.status = "internal_error";
        r.detail = fmt::format("test {}: token {} in the mask but refused", t, i);
        return r;
      }
    }
    if (valid && !accepted) {
      r.status = "validation_error";
      r.detail = fmt::format("test {} refused at {}: {}", t, refused, text.substr(0, 300));
    } else if (!valid && accepted) {
      r.status = "invalidation_error";
      r.detail = fmt::format("test {} accepted: {}", t, text.substr(0, 300));
    }
  }
  return r;
}

}  // namespace kvserve

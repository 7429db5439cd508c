// JSON Schema -> LexGrammar (see json_schema.h). One rule per schema node met (a $ref target
// once, so recursion is a recursive rule); strings, numbers, keys, literals and punctuation
// are lexemes, each after the grammar's one whitespace layout (LexGrammar::whitespace).
#include "engine/grammar/json_schema.h"

#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "engine/grammar/json_schema_internal.h"

namespace kvserve {
namespace {

using json_schema::Json;

constexpr int kMaxArrayItems = 2000;
constexpr int kMaxDepth = 256;

std::string Escape(std::string_view key) {
  std::string out;
  for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const JsonSchemaOptions& options)
      : options_(options), deadline_(std::chrono::steady_clock::now() + options.limits.compile_timeout) {
    SetRoot(root);
  }

  // A new root: its references resolve in it.
  void SetRoot(const Json& root) {
    root_ = root;
    root_id_.clear();
    refs_.clear();
    for (const char* id : {"$id", "id"}) {
      if (root.is_object() && root.contains(id) && root[id].is_string()) {
        std::string base = root[id].get<std::string>();
        if (const size_t hash = base.find('#'); hash != std::string::npos) base.resize(hash);
        if (!base.empty()) root_id_ = base;
      }
    }
  }

  StatusOr<CompiledSchema> Run() {
    if (options_.max_whitespace != 0) g_.whitespace = WhitespaceLayout(options_.max_whitespace);
    if (options_.alternatives) {
      if (!root_.is_array() || root_.empty()) return InvalidArgumentError("alternatives need an array of schemas");
      const Json roots = root_;
      g_.root = g_.AddRule("root");
      for (const Json& r : roots) {
        SetRoot(r);
        ASSIGN_OR_RETURN(int32_t value, Compile(root_, "", 0));
        g_.AddAlternative(g_.root, {value});
      }
      return CompiledSchema{std::move(g_), std::move(ignored_)};
    }
    ASSIGN_OR_RETURN(int32_t value, Compile(root_, "", 0));
    g_.root = g_.AddRule("root");
    g_.AddAlternative(g_.root, {value});
    if (options_.max_whitespace != 0) {  // whitespace after the value, as JSON allows
      const int k = options_.max_whitespace;  // the same layout as WhitespaceLayout
      const std::string ws = k < 0 ? "[ \\t\\n\\r]+" : fmt::format("[ \\t]{{1,{0}}}|\\r?\\n[ \\t]{{0,{0}}}", k);
      ASSIGN_OR_RETURN(ByteDfa trailing, CompileRegex(ws, RegexOptionsWithin(options_.limits, /*anchored=*/true)));
      g_.AddAlternative(g_.root, {value, LexGrammar::Lexeme(g_.AddLexeme("trailing:" + ws, std::move(trailing)))});
    }
    RETURN_IF_ERROR(g_.RemoveUnproductive());
    return CompiledSchema{std::move(g_), std::move(ignored_)};
  }

 private:
  // ---- lexemes ----
  int32_t Lexeme(const std::string& key, const ByteDfa& dfa, int64_t min_code_points = 0, int64_t max_code_points = -1) {
    const int32_t found = g_.FindLexeme(key);
    if (found >= 0) return LexGrammar::Lexeme(found);
    return LexGrammar::Lexeme(g_.AddLexeme(key, dfa, min_code_points, max_code_points, /*leading_whitespace=*/true));
  }
  int32_t Literals(std::vector<std::string> texts) {
    std::sort(texts.begin(), texts.end());
    texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
    std::string key = "lit";
    for (const std::string& t : texts) key += "\x1f" + t;
    const int32_t found = g_.FindLexeme(key);
    if (found >= 0) return LexGrammar::Lexeme(found);
    return Lexeme(key, ChoiceDfa(texts));
  }
  int32_t Punct(char c) { return Literals({std::string(1, c)}); }
  StatusOr<int32_t> StringValue(const Json& s, const std::string& ptr) {
    ASSIGN_OR_RETURN(json_schema::LexemeSpec spec, json_schema::StringLexeme(s, ptr, options_.lenient, options_.limits, &ignored_, &g_));
    return Lexeme(spec.key, spec.dfa, spec.min_code_points, spec.max_code_points);
  }

  // ---- rules ----
  int32_t Rule(std::string name, std::vector<std::vector<int32_t>> alternatives) {
    const int32_t r = g_.AddRule(std::move(name));
    for (auto& alt : alternatives) g_.AddAlternative(r, std::move(alt));
    return r;
  }
  int32_t NoValue() { return Rule("none", {}); }

  Status Check(const std::string& ptr) {
    if (std::chrono::steady_clock::now() > deadline_) {
      return DeadlineExceededError(fmt::format("compiling the schema took longer than {} ms", options_.limits.compile_timeout.count()));
    }
    const GrammarLimits& limits = options_.limits;
    if (static_cast<int64_t>(g_.rules.size()) > limits.max_grammar_rules) {
      return ResourceExhaustedError(fmt::format("the schema at {} needs over {} rules", ptr, limits.max_grammar_rules));
    }
    if (g_.num_dfa_states() > limits.max_grammar_states) {
      return ResourceExhaustedError(fmt::format("the schema at {} needs over {} automaton states", ptr, limits.max_grammar_states));
    }
    return OkStatus();
  }

  Status Unsupported(std::string_view what, const std::string& ptr) {
    const std::string where = fmt::format("{} at {}", what, ptr.empty() ? "/" : ptr);
    if (!options_.lenient) return InvalidArgumentError(fmt::format("unsupported JSON Schema keyword: {}", where));
    ignored_.push_back(where);
    return OkStatus();
  }

  Status CheckKeywords(const Json& s, const std::string& ptr) {
    for (const char* k : {"not", "contains", "minContains", "maxContains", "dependentRequired", "dependentSchemas",
                          "propertyNames", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"}) {
      if (s.contains(k)) RETURN_IF_ERROR(Unsupported(k, ptr));
    }
    if (s.contains("if") && (s.contains("then") || s.contains("else"))) RETURN_IF_ERROR(Unsupported("if", ptr));
    if (s.contains("dependencies") && !s["dependencies"].empty()) RETURN_IF_ERROR(Unsupported("dependencies", ptr));
    for (const char* k : json_schema::kCountKeywords) {
      const auto it = s.find(k);
      if (it == s.end()) continue;
      if (!it->is_number() || it->get<double>() < 0 || it->get<double>() != std::floor(it->get<double>())) {
        return InvalidArgumentError(fmt::format("{} at {} must be a non-negative integer, not {}", k, ptr, it->dump()));
      }
      // A maximum that large bounds nothing; a minimum that large asks for what cannot be written.
      if (std::string_view(k).starts_with("min") && it->get<double>() > static_cast<double>(json_schema::kCountCap)) {
        return InvalidArgumentError(fmt::format("{} {} at {} is over {}", k, it->dump(), ptr, json_schema::kCountCap));
      }
    }
    if (s.value("uniqueItems", false) && !(s.contains("maxItems") && s["maxItems"].is_number() && s["maxItems"].get<double>() <= 1)) {
      RETURN_IF_ERROR(Unsupported("uniqueItems", ptr));
    }
    return OkStatus();
  }

  // ---- references ----
  StatusOr<std::pair<std::string, const Json*>> Resolve(std::string ref, const std::string& ptr) {
    if (!root_id_.empty() && ref.starts_with(root_id_)) ref = ref.substr(root_id_.size());
    if (ref.empty() || ref == "#") return std::pair<std::string, const Json*>{"", &root_};
    if (!ref.starts_with("#")) {
      return InvalidArgumentError(fmt::format("$ref \"{}\" at {}: only references inside the schema are supported", ref, ptr));
    }
    std::string frag;
    for (size_t i = 1; i < ref.size(); ++i) {  // percent-decoding
      if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(ref[i + 1]) && std::isxdigit(ref[i + 2])) {
        frag += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        frag += ref[i];
      }
    }
    if (frag.starts_with("/")) {
      const nlohmann::json_pointer<std::string> jp(frag);
      if (!root_.contains(jp)) return InvalidArgumentError(fmt::format("$ref \"{}\" at {} points nowhere", ref, ptr));
      return std::pair<std::string, const Json*>{frag, &root_.at(jp)};
    }
    const Json* found = FindAnchor(root_, frag);
    if (!found) return InvalidArgumentError(fmt::format("$ref \"{}\" at {} names no anchor", ref, ptr));
    return std::pair<std::string, const Json*>{"#" + frag, found};
  }
  const Json* FindAnchor(const Json& s, const std::string& name) {
    if (s.is_object()) {
      if ((s.contains("$anchor") && s["$anchor"] == name) || (s.contains("$id") && s["$id"] == "#" + name) ||
          (s.contains("id") && s["id"] == "#" + name)) {
        return &s;
      }
    }
    if (s.is_structured()) {
      for (const Json& child : s) {
        if (const Json* f = FindAnchor(child, name)) return f;
      }
    }
    return nullptr;
  }
  // `s` with its top-level $ref and allOf merged in (for merging and disjointness).
  StatusOr<Json> Flatten(const Json& s, const std::string& ptr, int depth) {
    if (depth > 16) return InvalidArgumentError(fmt::format("allOf/$ref at {} nests too deep to merge", ptr));
    if (!s.is_object()) return s;
    if (s.contains("not")) {
      if (std::optional<Json> positive = json_schema::RewriteNot(s)) return Flatten(*positive, ptr, depth + 1);
    }
    Json out = s;
    if (out.contains("$ref") && out["$ref"].is_string()) {
      ASSIGN_OR_RETURN(auto target, Resolve(out["$ref"].get<std::string>(), ptr));
      out.erase("$ref");
      ASSIGN_OR_RETURN(Json t, Flatten(*target.second, target.first, depth + 1));
      ASSIGN_OR_RETURN(out, json_schema::MergeSchemas(out, t, ptr));
    }
    if (out.is_object() && out.contains("allOf") && out["allOf"].is_array()) {
      const Json parts = out["allOf"];
      out.erase("allOf");
      for (size_t i = 0; i < parts.size(); ++i) {
        const std::string at = fmt::format("{}/allOf/{}", ptr, i);
        ASSIGN_OR_RETURN(Json p, Flatten(parts[i], at, depth + 1));
        ASSIGN_OR_RETURN(out, json_schema::MergeSchemas(out, p, at));
      }
      return Flatten(out, ptr, depth + 1);
    }
    return out;
  }

  // ---- values ----
  StatusOr<int32_t> Compile(const Json& s, const std::string& ptr, int depth) {
    RETURN_IF_ERROR(Check(ptr));
    if (depth > kMaxDepth) return InvalidArgumentError(fmt::format("the schema at {} nests too deep", ptr));
    if (s.is_boolean()) return s.get<bool>() ? AnyValue() : NoValue();
    if (!s.is_object()) return InvalidArgumentError(fmt::format("the schema at {} is not an object or a boolean", ptr));
    if (s.contains("not")) {
      if (std::optional<Json> positive = json_schema::RewriteNot(s)) return Compile(*positive, ptr, depth + 1);
    }
    RETURN_IF_ERROR(CheckKeywords(s, ptr));
    if (s.contains("$ref") && s["$ref"].is_string()) {
      Json rest = s;
      rest.erase("$ref");
      if (!json_schema::HasValidation(rest)) return Reference(s["$ref"].get<std::string>(), ptr);
      ASSIGN_OR_RETURN(Json flat, Flatten(s, ptr, 0));
      return Compile(flat, ptr, depth + 1);
    }
    if (s.contains("allOf")) {
      ASSIGN_OR_RETURN(Json flat, Flatten(s, ptr, 0));
      return Compile(flat, ptr, depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (s.contains(key) && s[key].is_array()) return Alternatives(s, key, ptr, depth);
    }
    if (s.contains("const")) return Enum(s, Json::array({s["const"]}), ptr, depth);
    if (s.contains("enum") && s["enum"].is_array()) return Enum(s, s["enum"], ptr, depth);
    if (!json_schema::HasValidation(s)) return AnyValue();
    return Typed(s, json_schema::TypesOf(s), ptr, depth);
  }

  StatusOr<int32_t> Reference(const std::string& ref, const std::string& ptr) {
    ASSIGN_OR_RETURN(auto target, Resolve(ref, ptr));
    if (const auto it = refs_.find(target.first); it != refs_.end()) return it->second;
    const int32_t rule = g_.AddRule("ref:" + target.first);
    refs_[target.first] = rule;
    ASSIGN_OR_RETURN(int32_t value, Compile(*target.second, target.first, 0));
    g_.AddAlternative(rule, {value});
    return rule;
  }

  StatusOr<int32_t> Alternatives(const Json& s, const char* key, const std::string& ptr, int depth) {
    Json base = s;
    base.erase(key);
    const Json& alts = s[key];
    std::vector<Json> flat;
    std::vector<std::vector<int32_t>> rule_alts;
    for (size_t i = 0; i < alts.size(); ++i) {
      const std::string at = fmt::format("{}/{}/{}", ptr, key, i);
      int32_t sym;
      if (!json_schema::HasValidation(base)) {
        ASSIGN_OR_RETURN(sym, Compile(alts[i], at, depth + 1));
      } else {
        ASSIGN_OR_RETURN(Json flat_alt, Flatten(alts[i], at, 0));
        ASSIGN_OR_RETURN(Json merged, json_schema::MergeSchemas(base, flat_alt, at));
        ASSIGN_OR_RETURN(sym, Compile(merged, at, depth + 1));
      }
      rule_alts.push_back({sym});
      if (std::string_view(key) == "oneOf") {
        ASSIGN_OR_RETURN(Json f, Flatten(alts[i], at, 0));
        ASSIGN_OR_RETURN(f, json_schema::MergeSchemas(base, f, at));
        flat.push_back(std::move(f));
      }
    }
    for (size_t i = 0; i < flat.size(); ++i) {
      for (size_t j = i + 1; j < flat.size(); ++j) {
        if (!json_schema::ProvablyDisjoint(flat[i], flat[j])) {
          RETURN_IF_ERROR(Unsupported(fmt::format("oneOf (alternatives {} and {} may both match)", i, j), ptr));
          i = flat.size();
          break;
        }
      }
    }
    return Rule(ptr + "/" + key, std::move(rule_alts));
  }

  StatusOr<int32_t> Enum(const Json& s, const Json& values, const std::string& ptr, int depth) {
    Json rest = s;
    rest.erase("enum");
    rest.erase("const");
    const unsigned types = json_schema::TypesOf(rest);
    std::vector<std::string> texts;
    std::vector<std::vector<int32_t>> alts;
    std::optional<json_schema::LexemeSpec> string_check;
    std::optional<ByteDfa> integer_check, number_check;
    for (size_t i = 0; i < values.size(); ++i) {
      const Json& v = values[i];
      const unsigned bit = json_schema::TypeBitOf(v);
      if (!(types & bit) && !(bit == json_schema::kInteger && (types & json_schema::kNumber))) continue;
      if (v.is_string()) {
        if (!string_check) {
          ASSIGN_OR_RETURN(json_schema::LexemeSpec spec, json_schema::StringLexeme(rest, ptr, options_.lenient, options_.limits, &ignored_));
          string_check = std::move(spec);
        }
        const std::string text = JsonStringLiteral(v.get<std::string>());
        if (string_check->Matches(text)) texts.push_back(text);
      } else if (v.is_number()) {
        std::optional<ByteDfa>& check = bit == json_schema::kInteger && !(types & json_schema::kNumber) ? integer_check : number_check;
        if (!check) {
          ASSIGN_OR_RETURN(json_schema::LexemeSpec spec, json_schema::NumberLexeme(rest, &check == &integer_check, ptr, options_.limits));
          check = std::move(spec.dfa);
        }
        const std::string text = v.is_number_float() && bit == json_schema::kInteger ? fmt::format("{}", v.get<double>()) : v.dump();
        if (!check->Matches(text)) continue;
        texts.push_back(text);
        if (bit == json_schema::kInteger && number_check) texts.push_back(text + ".0");
      } else if (v.is_boolean() || v.is_null()) {
        texts.push_back(v.dump());
      } else {  // an object or array: its structure, every member fixed
        Json exact = ValueSchema(v);
        ASSIGN_OR_RETURN(Json merged, json_schema::MergeSchemas(rest, exact, ptr));
        ASSIGN_OR_RETURN(int32_t sym, Compile(merged, fmt::format("{}/enum/{}", ptr, i), depth + 1));
        alts.push_back({sym});
      }
    }
    if (!texts.empty()) {
      RETURN_IF_ERROR(CheckChoices(texts, fmt::format("the enum at {}", ptr), options_.limits));
      alts.push_back({Literals(texts)});
    }
    if (alts.size() == 1 && alts[0][0] >= 0) return alts[0][0];
    return Rule(ptr + "/enum", std::move(alts));
  }
  static Json ValueSchema(const Json& v) {
    if (v.is_object()) {
      Json props = Json::object(), required = Json::array();
      for (const auto& [k, x] : v.items()) props[k] = Json{{"const", x}}, required.push_back(k);
      return Json{{"type", "object"}, {"properties", props}, {"required", required}, {"additionalProperties", false}};
    }
    if (v.is_array()) {
      Json items = Json::array();
      for (const Json& x : v) items.push_back(Json{{"const", x}});
      return Json{{"type", "array"}, {"prefixItems", items}, {"items", false}, {"minItems", v.size()}};
    }
    return Json{{"const", v}};
  }

  StatusOr<int32_t> Typed(const Json& s, unsigned types, const std::string& ptr, int depth) {
    std::vector<std::vector<int32_t>> alts;
    if (types & json_schema::kNull) alts.push_back({Literals({"null"})});
    if (types & json_schema::kBoolean) alts.push_back({Literals({"true", "false"})});
    if (types & (json_schema::kInteger | json_schema::kNumber)) {
      ASSIGN_OR_RETURN(json_schema::LexemeSpec spec, json_schema::NumberLexeme(s, !(types & json_schema::kNumber), ptr, options_.limits));
      alts.push_back({Lexeme(spec.key, spec.dfa)});
    }
    if (types & json_schema::kString) {
      ASSIGN_OR_RETURN(int32_t sym, StringValue(s, ptr));
      alts.push_back({sym});
    }
    if (types & json_schema::kObject) {
      ASSIGN_OR_RETURN(int32_t sym, Object(s, ptr, depth));
      alts.push_back({sym});
    }
    if (types & json_schema::kArray) {
      ASSIGN_OR_RETURN(int32_t sym, Array(s, ptr, depth));
      alts.push_back({sym});
    }
    if (alts.size() == 1) return alts[0][0];
    return Rule(ptr.empty() ? "/" : ptr, std::move(alts));
  }

  StatusOr<int32_t> Object(const Json& s, const std::string& ptr, int depth);
  StatusOr<int32_t> Array(const Json& s, const std::string& ptr, int depth);
  int32_t AnyValue();

  Json root_;
  JsonSchemaOptions options_;
  std::chrono::steady_clock::time_point deadline_;
  std::string root_id_;
  LexGrammar g_;
  std::vector<std::string> ignored_;
  std::map<std::string, int32_t> refs_;
  int32_t any_ = -1;
};

StatusOr<int32_t> SchemaCompiler::Object(const Json& s, const std::string& ptr, int depth) {
  const Json no_props = Json::object();
  const Json& props = s.contains("properties") && s["properties"].is_object() ? s["properties"] : no_props;
  std::set<std::string> required;
  if (s.contains("required") && s["required"].is_array()) {
    for (const Json& r : s["required"]) required.insert(r.get<std::string>());
  }
  const Json additional = s.contains("additionalProperties") ? s["additionalProperties"] : Json(true);
  std::vector<std::pair<std::string, Json>> patterns;
  std::vector<ByteDfa> pattern_dfas;
  if (s.contains("patternProperties") && s["patternProperties"].is_object()) {
    for (const auto& [p, schema] : s["patternProperties"].items()) {
      auto dfa = CompileRegex(p, RegexOptionsWithin(options_.limits, /*anchored=*/false, /*json_string=*/true));
      if (!dfa.ok()) return InvalidArgumentError(fmt::format("patternProperties at {}: {}", ptr, dfa.status().message()));
      patterns.push_back({p, schema});
      pattern_dfas.push_back(*std::move(dfa));
    }
  }
  // Named properties: those of `properties` in order, then required ones only `required` names.
  std::vector<std::pair<std::string, Json>> named;
  for (const auto& [name, schema] : props.items()) named.push_back({name, schema});
  if (s.contains("required") && s["required"].is_array()) {
    for (const Json& r : s["required"]) {
      if (!props.contains(r.get<std::string>())) named.push_back({r.get<std::string>(), Json()});
    }
  }
  struct Member {
    int32_t key, value;
    bool required;
  };
  std::vector<Member> members;
  std::vector<std::string> literals;
  for (auto& [name, schema] : named) {
    const std::string literal = JsonStringLiteral(name);
    const std::string at = ptr + "/properties/" + Escape(name);
    bool matched = false;
    Json merged = schema;
    for (size_t j = 0; j < patterns.size(); ++j) {
      if (!pattern_dfas[j].Matches(literal)) continue;
      matched = true;
      ASSIGN_OR_RETURN(Json a, Flatten(merged.is_null() ? Json(true) : merged, at, 0));
      ASSIGN_OR_RETURN(Json b, Flatten(patterns[j].second, at, 0));
      ASSIGN_OR_RETURN(merged, json_schema::MergeSchemas(a, b, at));
    }
    if (merged.is_null()) merged = matched ? Json(true) : additional;  // only `required` names it
    literals.push_back(literal);
    if (merged == Json(false)) {
      if (required.contains(name)) return NoValue();
      continue;
    }
    ASSIGN_OR_RETURN(int32_t value, Compile(merged, at, depth + 1));
    members.push_back({Literals({literal}), value, required.contains(name)});
  }
  // Other keys: a pattern's (minus the named keys; patterns that overlap are refused), then
  // additionalProperties' (minus named keys and patterns).
  const ByteDfa named_keys = ChoiceDfa(literals);
  std::vector<std::vector<int32_t>> extras;
  const int32_t colon = Punct(':');
  for (size_t j = 0; j < patterns.size(); ++j) {
    for (size_t k = j + 1; k < patterns.size(); ++k) {
      ASSIGN_OR_RETURN(ByteDfa both, IntersectDfa(pattern_dfas[j], pattern_dfas[k], /*keep_b=*/true, options_.limits.max_regex_states));
      if (both.start >= 0 && patterns[j].second != patterns[k].second) {
        RETURN_IF_ERROR(Unsupported("patternProperties (patterns that overlap)", ptr));
      }
    }
    ASSIGN_OR_RETURN(ByteDfa key, IntersectDfa(pattern_dfas[j], named_keys, false, options_.limits.max_regex_states));
    const std::string at = ptr + "/patternProperties/" + Escape(patterns[j].first);
    ASSIGN_OR_RETURN(int32_t value, Compile(patterns[j].second, at, depth + 1));
    std::string lex_key = "key:" + patterns[j].first;
    for (const std::string& l : literals) lex_key += "\x1f" + l;
    extras.push_back({Lexeme(lex_key, key), colon, value});
  }
  if (additional != Json(false)) {
    std::string lex_key = "key:additional";
    for (const std::string& l : literals) lex_key += "\x1f" + l;
    for (const auto& p : patterns) lex_key += "\x1e" + p.first;
    ByteDfa key;
    if (g_.FindLexeme(lex_key) < 0) {
      ASSIGN_OR_RETURN(key, CompileRegex("[\\s\\S]*", RegexOptionsWithin(options_.limits, /*anchored=*/true, /*json_string=*/true)));
      ASSIGN_OR_RETURN(key, IntersectDfa(key, named_keys, false, options_.limits.max_regex_states));
      for (const ByteDfa& p : pattern_dfas) {
        ASSIGN_OR_RETURN(key, IntersectDfa(key, p, false, options_.limits.max_regex_states));
      }
    }
    ASSIGN_OR_RETURN(int32_t value, Compile(additional, ptr + "/additionalProperties", depth + 1));
    extras.push_back({Lexeme(lex_key, key), colon, value});
  }
  // How many members: minProperties and maxProperties where the grammar can count.
  const size_t num_required = std::count_if(members.begin(), members.end(), [](const Member& m) { return m.required; });
  const auto min_props = static_cast<double>(json_schema::CountOf(s, "minProperties", 0));
  const auto max_props = static_cast<double>(json_schema::CountOf(s, "maxProperties", -1));
  if (max_props >= 0 && max_props < static_cast<double>(num_required)) return NoValue();
  if (max_props >= 0 && (!extras.empty() || max_props < static_cast<double>(members.size()))) {
    RETURN_IF_ERROR(Unsupported("maxProperties", ptr));
  }
  const bool non_empty = min_props >= 1 && num_required == 0;
  if (min_props > std::max<double>(1, static_cast<double>(num_required))) RETURN_IF_ERROR(Unsupported("minProperties", ptr));
  // First_i: the members from i on, none written yet; Rest_i: the same after one was.
  const int32_t comma = Punct(',');
  const int32_t extra = Rule(ptr + "/extra", extras);
  const int32_t tail = g_.AddRule(ptr + "/tail");
  g_.AddAlternative(tail, {});
  if (!extras.empty()) g_.AddAlternative(tail, {comma, extra, tail});
  int32_t rest = tail;
  int32_t first = Rule(ptr + "/first", {{}});
  if (!extras.empty()) g_.AddAlternative(first, {extra, tail});
  int32_t first_nonempty = extras.empty() ? NoValue() : Rule(ptr + "/first+", {{extra, tail}});
  for (size_t i = members.size(); i-- > 0;) {
    const Member& m = members[i];
    const int32_t r = Rule(ptr + "/rest", {{comma, m.key, colon, m.value, rest}});
    const int32_t f = Rule(ptr + "/first", {{m.key, colon, m.value, rest}});
    const int32_t fn = Rule(ptr + "/first+", {{m.key, colon, m.value, rest}});
    if (!m.required) {
      g_.AddAlternative(r, {rest});
      g_.AddAlternative(f, {first});
      g_.AddAlternative(fn, {first_nonempty});
    }
    rest = r, first = f, first_nonempty = fn;
  }
  return Rule(ptr + "/object", {{Punct('{'), non_empty ? first_nonempty : first, Punct('}')}});
}

StatusOr<int32_t> SchemaCompiler::Array(const Json& s, const std::string& ptr, int depth) {
  Json prefix = Json::array(), rest = true;
  if (s.contains("prefixItems") && s["prefixItems"].is_array()) {
    prefix = s["prefixItems"];
    if (s.contains("items")) rest = s["items"];
  } else if (s.contains("items") && s["items"].is_array()) {
    prefix = s["items"];
    if (s.contains("additionalItems")) rest = s["additionalItems"];
  } else if (s.contains("items")) {
    rest = s["items"];
  }
  const int64_t min_items = json_schema::CountOf(s, "minItems", 0);
  int64_t max_items = json_schema::CountOf(s, "maxItems", -1);
  if (rest == Json(false) && (max_items < 0 || max_items > static_cast<int64_t>(prefix.size()))) {
    max_items = static_cast<int64_t>(prefix.size());
  }
  if (max_items > kMaxArrayItems) max_items = kMaxArrayItems;  // longer arrays refused: a subset
  if (min_items > kMaxArrayItems) return InvalidArgumentError(fmt::format("minItems at {} is over {}", ptr, kMaxArrayItems));
  if (max_items >= 0 && max_items < min_items) return NoValue();
  std::vector<int32_t> elems;  // [i] for i < prefix size
  for (size_t i = 0; i < prefix.size() && (max_items < 0 || static_cast<int64_t>(i) < max_items); ++i) {
    ASSIGN_OR_RETURN(int32_t e, Compile(prefix[i], fmt::format("{}/prefixItems/{}", ptr, i), depth + 1));
    elems.push_back(e);
  }
  int32_t rest_elem = -1;
  auto elem = [&](int64_t i) -> StatusOr<int32_t> {
    if (i < static_cast<int64_t>(elems.size())) return elems[static_cast<size_t>(i)];
    if (rest_elem == -1) {
      ASSIGN_OR_RETURN(rest_elem, Compile(rest, ptr + "/items", depth + 1));
    }
    return rest_elem;
  };
  // Seq_i: what follows once i items are written.
  const int32_t comma = Punct(',');
  const int64_t loop_from = std::max<int64_t>(static_cast<int64_t>(prefix.size()), min_items);
  const int64_t last = max_items < 0 ? loop_from : max_items;
  int32_t seq = g_.AddRule(ptr + "/items");
  g_.AddAlternative(seq, {});
  if (max_items < 0) {
    ASSIGN_OR_RETURN(int32_t e, elem(loop_from));
    g_.AddAlternative(seq, {comma, e, seq});
  }
  for (int64_t i = last - 1; i >= 1; --i) {
    RETURN_IF_ERROR(Check(ptr));
    ASSIGN_OR_RETURN(int32_t e, elem(i));
    const int32_t r = Rule(ptr + "/items", {{comma, e, seq}});
    if (i >= min_items) g_.AddAlternative(r, {});
    seq = r;
  }
  std::vector<std::vector<int32_t>> alts;
  if (min_items == 0) alts.push_back({Punct('['), Punct(']')});
  if (max_items != 0) {
    ASSIGN_OR_RETURN(int32_t e0, elem(0));
    alts.push_back({Punct('['), e0, seq, Punct(']')});
  }
  return Rule(ptr + "/array", std::move(alts));
}

// Any JSON value (the schema true or {}), one set of rules per grammar.
int32_t SchemaCompiler::AnyValue() {
  if (any_ >= 0) return any_;
  any_ = g_.AddRule("any");
  const int32_t str = *StringValue(Json::object(), "");
  const int32_t comma = Punct(','), colon = Punct(':');
  const int32_t members = Rule("any/members", {{}});
  g_.AddAlternative(members, {comma, str, colon, any_, members});
  const int32_t items = Rule("any/items", {{}});
  g_.AddAlternative(items, {comma, any_, items});
  const int32_t object = Rule("any/object", {{Punct('{'), Punct('}')}, {Punct('{'), str, colon, any_, members, Punct('}')}});
  const int32_t array = Rule("any/array", {{Punct('['), Punct(']')}, {Punct('['), any_, items, Punct(']')}});
  const json_schema::LexemeSpec number = *json_schema::NumberLexeme(Json::object(), false, "", options_.limits);
  for (int32_t alt : {object, array, str, Lexeme(number.key, number.dfa), Literals({"true", "false", "null"})}) {
    g_.AddAlternative(any_, {alt});
  }
  return any_;
}

}  // namespace

StatusOr<CompiledSchema> CompileJsonSchema(std::string_view text, const JsonSchemaOptions& options) {
  try {
    const Json schema = Json::parse(text);
    return SchemaCompiler(schema, options).Run();
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(fmt::format("malformed JSON Schema: {}", e.what()));
  }
}

}  // namespace kvserve

// allOf merging, types and disjointness for the JSON Schema compiler (json_schema_internal.h).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "engine/grammar/json_schema_internal.h"

namespace kvserve::json_schema {
namespace {

const std::set<std::string, std::less<>>& ValidationKeywords() {
  static const std::set<std::string, std::less<>> k = {
      "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties",
      "minProperties", "maxProperties", "items", "prefixItems", "additionalItems", "minItems", "maxItems",
      "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
      "exclusiveMaximum", "multipleOf", "anyOf", "oneOf", "allOf", "$ref", "nullable", "not", "if",
      "uniqueItems", "contains", "dependencies", "dependentRequired", "dependentSchemas", "propertyNames",
      "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef", "$kvserve_patterns",
      "$kvserve_excluded"};
  return k;
}

unsigned TypeNameBits(std::string_view t) {
  if (t == "null") return kNull;
  if (t == "boolean") return kBoolean;
  if (t == "object") return kObject;
  if (t == "array") return kArray;
  if (t == "string") return kString;
  if (t == "integer") return kInteger;
  if (t == "number") return kNumber | kInteger;
  return 0;
}

Json TypeJson(unsigned bits) {
  Json out = Json::array();
  for (auto [bit, name] : {std::pair{kNull, "null"}, {kBoolean, "boolean"}, {kObject, "object"}, {kArray, "array"},
                           {kString, "string"}}) {
    if (bits & bit) out.push_back(name);
  }
  if (bits & kNumber) {
    out.push_back("number");
  } else if (bits & kInteger) {
    out.push_back("integer");
  }
  return out;
}

bool Contains(const Json& list, const Json& v) { return std::find(list.begin(), list.end(), v) != list.end(); }

}  // namespace

bool HasValidation(const Json& schema) {
  if (!schema.is_object()) return !schema.is_boolean() || !schema.get<bool>();
  for (const auto& [k, v] : schema.items()) {
    if (ValidationKeywords().contains(k)) return true;
  }
  return false;
}

unsigned TypeBitOf(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return kNull;
    case Json::value_t::boolean: return kBoolean;
    case Json::value_t::object: return kObject;
    case Json::value_t::array: return kArray;
    case Json::value_t::string: return kString;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return kInteger;
    case Json::value_t::number_float: {
      const double d = value.get<double>();
      return d == std::floor(d) && std::fabs(d) < 1e18 ? kInteger : kNumber;
    }
    default: return 0;
  }
}

unsigned TypesOf(const Json& schema) {
  if (schema.is_boolean()) return schema.get<bool>() ? kAllTypes : 0;
  if (!schema.is_object()) return kAllTypes;
  unsigned bits = kAllTypes;
  if (const auto it = schema.find("type"); it != schema.end()) {
    unsigned t = 0;
    if (it->is_string()) t = TypeNameBits(it->get<std::string>());
    if (it->is_array()) {
      for (const Json& n : *it) t |= n.is_string() ? TypeNameBits(n.get<std::string>()) : 0;
    }
    if (schema.value("nullable", false)) t |= kNull;
    bits &= t;
  }
  if (const auto it = schema.find("const"); it != schema.end()) bits &= TypeBitOf(*it) | (TypeBitOf(*it) == kInteger ? kNumber : 0);
  if (const auto it = schema.find("enum"); it != schema.end() && it->is_array()) {
    unsigned e = 0;
    for (const Json& v : *it) e |= TypeBitOf(v) | (TypeBitOf(v) == kInteger ? kNumber : 0);
    bits &= e;
  }
  return bits;
}

bool ProvablyDisjoint(const Json& a, const Json& b) {
  const unsigned ta = TypesOf(a), tb = TypesOf(b);
  // "number" overlaps "integer"; kNumber alone (a non-integral const) does not.
  const unsigned na = ta & kNumber ? ta | kInteger : ta, nb = tb & kNumber ? tb | kInteger : tb;
  if ((na & nb) == 0) return true;
  if (!a.is_object() || !b.is_object()) return false;
  auto values = [](const Json& s) -> std::optional<Json> {
    if (s.contains("const")) return Json::array({s["const"]});
    if (s.contains("enum") && s["enum"].is_array()) return s["enum"];
    return std::nullopt;
  };
  if (const auto va = values(a), vb = values(b); va && vb) {
    return std::none_of(va->begin(), va->end(), [&](const Json& v) { return Contains(*vb, v); });
  }
  // Objects: a property both require, with disjoint schemas; or one requires a property the
  // other forbids.
  if ((na & nb) != kObject) return false;
  auto required = [](const Json& s) {
    std::set<std::string> r;
    if (const auto it = s.find("required"); it != s.end() && it->is_array()) {
      for (const Json& k : *it) r.insert(k.get<std::string>());
    }
    return r;
  };
  auto forbids = [](const Json& s, const std::string& key) {
    const auto add = s.find("additionalProperties");
    if (add == s.end() || *add != Json(false) || s.contains("patternProperties")) return false;
    const auto props = s.find("properties");
    return props == s.end() || !props->contains(key) || (*props)[key] == Json(false);
  };
  const std::set<std::string> ra = required(a), rb = required(b);
  for (const std::string& k : ra) {
    if (forbids(b, k)) return true;
    if (rb.contains(k) && a.contains("properties") && b.contains("properties") && a["properties"].contains(k) &&
        b["properties"].contains(k) && ProvablyDisjoint(a["properties"][k], b["properties"][k])) {
      return true;
    }
  }
  return std::any_of(rb.begin(), rb.end(), [&](const std::string& k) { return forbids(a, k); });
}

StatusOr<Json> MergeSchemas(const Json& a, const Json& b, const std::string& pointer) {
  if (a.is_boolean()) return a.get<bool>() ? b : a;
  if (b.is_boolean()) return b.get<bool>() ? a : b;
  Json out = a;
  auto unsupported = [&](std::string_view what) {
    return InvalidArgumentError(fmt::format("allOf at {}: {} cannot be merged", pointer, what));
  };
  for (const auto& [key, bv] : b.items()) {
    if (!out.contains(key)) {
      out[key] = bv;
      continue;
    }
    Json& av = out[key];
    if (av == bv || !ValidationKeywords().contains(key)) continue;
    if (key == "type" || key == "nullable") {
      continue;  // below, from TypesOf
    } else if (key == "properties") {
      for (const auto& [name, schema] : bv.items()) {
        if (av.contains(name)) {
          ASSIGN_OR_RETURN(av[name], MergeSchemas(av[name], schema, pointer + "/properties/" + name));
        } else {
          av[name] = schema;
        }
      }
    } else if (key == "required") {
      for (const Json& r : bv) {
        if (!Contains(av, r)) av.push_back(r);
      }
    } else if (key == "additionalProperties" || key == "items" || key == "additionalItems") {
      if (!bv.is_boolean() && !bv.is_object()) return unsupported(key);
      ASSIGN_OR_RETURN(av, MergeSchemas(av, bv, pointer + "/" + key));
    } else if (key == "minimum" || key == "minLength" || key == "minItems" || key == "minProperties") {
      if (av.is_number() && bv.is_number()) av = std::max(av.get<double>(), bv.get<double>());
    } else if (key == "maximum" || key == "maxLength" || key == "maxItems" || key == "maxProperties") {
      if (av.is_number() && bv.is_number()) av = std::min(av.get<double>(), bv.get<double>());
    } else if (key == "enum") {
      Json kept = Json::array();
      for (const Json& v : av) {
        if (Contains(bv, v)) kept.push_back(v);
      }
      av = kept;
    } else if (key == "const") {
      return Json(false);  // two different constants
    } else if (key == "pattern") {
      if (!out.contains("$kvserve_patterns")) out["$kvserve_patterns"] = Json::array();
      out["$kvserve_patterns"].push_back(bv);
    } else if (key == "$kvserve_patterns" || key == "$kvserve_excluded") {
      for (const Json& v : bv) {
        if (!Contains(av, v)) av.push_back(v);
      }
    } else if (key == "multipleOf" && av.is_number_integer() && bv.is_number_integer()) {
      av = std::lcm(av.get<int64_t>(), bv.get<int64_t>());
    } else if (key == "anyOf" || key == "oneOf") {
      out["allOf"] = Json::array({Json{{key, bv}}});  // the compiler merges it in later
    } else {
      return unsupported(key);
    }
  }
  // One side's additionalProperties limits the keys the other side's patternProperties would
  // admit; a merged schema cannot say that (its patternProperties would admit them).
  for (const auto* side : {&a, &b}) {
    const Json& other = side == &a ? b : a;
    const auto add = side->find("additionalProperties");
    const auto pat = other.find("patternProperties");
    if (add == side->end() || *add == Json(true) || pat == other.end() || pat->empty()) continue;
    if (!side->contains("patternProperties") || (*side)["patternProperties"] != *pat) {
      return unsupported("additionalProperties beside another schema's patternProperties");
    }
  }
  // Extra properties of one side meet the other side's additionalProperties.
  for (const auto* side : {&a, &b}) {
    const Json& other = side == &a ? b : a;
    const auto add = other.find("additionalProperties");
    if (add == other.end() || *add == Json(true) || !side->contains("properties")) continue;
    if (other.contains("patternProperties")) return unsupported("additionalProperties beside patternProperties");
    for (const auto& [name, schema] : (*side)["properties"].items()) {
      if (other.contains("properties") && other["properties"].contains(name)) continue;
      ASSIGN_OR_RETURN(out["properties"][name], MergeSchemas(out["properties"][name], *add, pointer + "/properties/" + name));
    }
  }
  if (a.contains("type") || b.contains("type")) {
    auto declared = [](const Json& s) -> unsigned {
      if (!s.contains("type")) return kAllTypes;
      return TypesOf(Json{{"type", s["type"]}, {"nullable", s.value("nullable", false)}});
    };
    const unsigned bits = declared(a) & declared(b);
    out.erase("nullable");
    out["type"] = TypeJson(bits);
    if (bits == 0) return Json(false);
  }
  return out;
}

std::optional<Json> RewriteNot(const Json& schema) {
  const Json& n = schema["not"];
  if (!n.is_object() || n.size() != 1) return std::nullopt;
  Json out = schema;
  out.erase("not");
  if (n.contains("not")) {  // not(not X) = X
    if (!out.contains("allOf") || !out["allOf"].is_array()) out["allOf"] = Json::array();
    out["allOf"].push_back(n["not"]);
    return out;
  }
  if (n.contains("type")) {
    const unsigned excluded = TypesOf(n);
    const unsigned current = TypesOf(out);
    // "not integer" among numbers leaves the fractional ones: no type says that.
    if ((excluded & kInteger) && !(excluded & kNumber) && (current & kNumber)) return std::nullopt;
    const unsigned left = current & ~excluded;
    if (left == 0) return Json(false);
    out["type"] = TypeJson(left);
    out.erase("nullable");
    return out;
  }
  if (n.contains("enum") || n.contains("const")) {
    // Strings other than these (values of other types are not in the list, so valid). Only
    // strings with one JSON spelling here: no '/' (also "\/") and no control character.
    const Json values = n.contains("const") ? Json::array({n["const"]}) : n["enum"];
    if (!values.is_array()) return std::nullopt;
    for (const Json& v : values) {
      if (!v.is_string()) return std::nullopt;
      for (char c : v.get<std::string>()) {
        if (c == '/' || static_cast<unsigned char>(c) < 0x20) return std::nullopt;
      }
    }
    if (!out.contains("$kvserve_excluded")) out["$kvserve_excluded"] = Json::array();
    for (const Json& v : values) out["$kvserve_excluded"].push_back(v);
    return out;
  }
  if (n.contains("required") && n["required"].is_array() && n["required"].size() == 1 && n["required"][0].is_string()) {
    // {"required": [k]} holds for every non-object, so its negation is an object without k.
    const unsigned left = TypesOf(out) & kObject;
    if (left == 0) return Json(false);
    out["type"] = "object";
    out.erase("nullable");
    out["properties"][n["required"][0].get<std::string>()] = false;
    return out;
  }
  return std::nullopt;
}

}  // namespace kvserve::json_schema

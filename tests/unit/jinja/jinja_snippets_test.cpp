// The Jinja engine against Python's jinja2 on small templates, one Jinja feature each
// (whitespace control, literals, operators and precedence, undefined, scoping, loops, filters,
// tests, methods, globals, errors): tests/data/jinja/snippets.json, written by
// scripts/jinja-snippet-expectations.py with jinja2 as transformers configures it. Each case
// renders byte for byte as jinja2 did, or fails where jinja2 raised (with the template's own
// message where it called raise_exception).
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/jinja/jinja.h"

namespace kvserve {
namespace jinja_snippets_test {

using json = nlohmann::ordered_json;

// Cases whose jinja2 behaviour the engine does not reproduce, each with the reason (jinja.h,
// "What is not supported").
const std::set<std::string> kKnownDifferences = {
    // Integers are 64-bit (Python's are unbounded).
    "op_big_int", "tojson_floats", "test_number_kinds",
    // Case mapping is ASCII only (jinja.h).
    "filter_case", "test_lower_upper",
    // Python's repr escapes non-printable Unicode (U+00A0 as '\xa0'); kvserve only ASCII controls.
    "lit_repr_escapes",
    // Not implemented: \N{...} escapes, loop.changed, recursive loops, cycler, str.format, istitle,
    // dict views and range objects printed as Python prints them, Markup % formatting, sort by
    // several attributes, int(base=), str methods' optional start/end arguments, filter argument
    // count checks, sort_keys over mixed key types.
    "lit_str_octal_named", "loop_changed", "loop_recursive", "cycler", "str_format_method", "str_predicates",
    "dict_views_print", "range_print", "markup_percent_format", "filter_sort_attribute", "filter_int",
    "str_startswith_endswith", "list_index_count", "filter_wrong_arg_count_error", "tojson_sort_keys_mixed_error",
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(JinjaSnippetsTest, EverySnippetRendersAsJinja2Does) {
  const json data = json::parse(ReadFile(std::string(KVSERVE_SOURCE_DIR) + "/tests/data/jinja/snippets.json"));
  std::tm now{};
  ASSERT_NE(strptime(data["now"].get<std::string>().c_str(), "%Y-%m-%dT%H:%M:%S", &now), nullptr);
  now.tm_isdst = -1;
  jinja::RenderOptions options;
  options.now_seconds = static_cast<int64_t>(std::mktime(&now));
  int checked = 0, failed = 0;
  for (const json& c : data["cases"]) {
    const std::string name = c["name"];
    if (kKnownDifferences.count(name) > 0) continue;
    SCOPED_TRACE(name + ": " + c["template"].get<std::string>());
    ++checked;
    std::optional<jinja::Value> vars = jinja::ParseJson(c["variables"].dump());
    ASSERT_TRUE(vars.has_value());
    StatusOr<std::string> got = InvalidArgumentError("unparsed");
    const StatusOr<jinja::Template> t = jinja::Template::Parse(c["template"].get<std::string>());
    if (t.ok()) got = t->Render(*vars, options);
    else got = t.status();
    if (c.contains("output")) {
      if (!got.ok()) {
        ++failed;
        ADD_FAILURE() << "jinja2 rendered " << json(c["output"]).dump() << "; kvserve: " << got.status().ToString();
      } else if (*got != c["output"].get<std::string>()) {
        ++failed;
        ADD_FAILURE() << "jinja2: " << json(c["output"]).dump() << "\nkvserve: " << json(*got).dump();
      }
    } else if (got.ok()) {
      ++failed;
      ADD_FAILURE() << "jinja2 raised " << c["error_type"].get<std::string>() << ": " << c["error"].get<std::string>()
                    << "; kvserve rendered " << json(*got).dump();
    } else if (c["raised"].get<bool>() && got.status().message() != c["error"].get<std::string>()) {
      ++failed;
      ADD_FAILURE() << "raise_exception: jinja2 " << c["error"] << ", kvserve " << got.status().message();
    }
  }
  EXPECT_EQ(failed, 0) << failed << " of " << checked << " snippets differ from jinja2";
  EXPECT_GE(checked, 300);
}

}  // namespace jinja_snippets_test
}  // namespace kvserve

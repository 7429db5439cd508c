// The Jinja engine against Python's jinja2: every chat template of ../shared/templates on the
// conversations of tests/data/chat_templates/conversations.json, compared byte for byte with
// what scripts/chat-template-expectations.py rendered with jinja2 as transformers configures
// it (expected.json). Where jinja2 raised, the engine must fail too; where the template itself
// called raise_exception, with the same message.
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/jinja/jinja.h"
#include "tests/test_paths.h"

namespace kvserve {
namespace jinja2_parity_test {

using json = nlohmann::json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string DataPath(const std::string& name) {
  return std::string(KVSERVE_SOURCE_DIR) + "/tests/data/chat_templates/" + name;
}

// Where two texts first differ, with some context, for a failure message.
std::string Difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  return "at byte " + std::to_string(i) + "\n  jinja2: " + json(want.substr(from, 120)).dump() +
         "\n  kvserve: " + json(got.substr(from, 120)).dump();
}

TEST(Jinja2ParityTest, EverySharedTemplateRendersAsJinja2Does) {
  REQUIRE_SHARED_FILE("templates/README.md");
  const json expected = json::parse(ReadFile(DataPath("expected.json")));
  // The conversations as the engine's values (jinja::ParseJson keeps key order, as Python's).
  const auto conversations = nlohmann::ordered_json::parse(ReadFile(DataPath("conversations.json")));
  std::map<std::string, jinja::Value> variables;
  for (const auto& c : conversations["conversations"]) {
    nlohmann::ordered_json vars = c.value("kwargs", nlohmann::ordered_json::object());
    vars["messages"] = c["messages"];
    vars["tools"] = c["tools"];
    vars["documents"] = nullptr;
    vars["add_generation_prompt"] = c["add_generation_prompt"];
    vars["bos_token"] = expected["bos_token"].get<std::string>();
    vars["eos_token"] = expected["eos_token"].get<std::string>();
    std::optional<jinja::Value> v = jinja::ParseJson(vars.dump());
    ASSERT_TRUE(v.has_value());
    variables[c["name"].get<std::string>()] = *v;
  }
  std::tm now{};
  ASSERT_NE(strptime(expected["now"].get<std::string>().c_str(), "%Y-%m-%dT%H:%M:%S", &now), nullptr);
  now.tm_isdst = -1;
  jinja::RenderOptions options;
  options.now_seconds = static_cast<int64_t>(std::mktime(&now));

  std::map<std::string, StatusOr<jinja::Template>> templates;
  int checked = 0, failed = 0;
  for (const json& r : expected["results"]) {
    const std::string name = r["template"];
    auto it = templates.find(name);
    if (it == templates.end()) {
      it = templates.emplace(name, jinja::Template::Parse(ReadFile(testing::SharedPath("templates/" + name)))).first;
    }
    SCOPED_TRACE(name + " on " + r["conversation"].get<std::string>());
    ++checked;
    const int before = failed;
    if (!it->second.ok()) {
      ++failed;
      ADD_FAILURE() << it->second.status().ToString();
      continue;
    }
    const StatusOr<std::string> got = it->second->Render(variables.at(r["conversation"]), options);
    if (r.contains("output")) {
      if (!got.ok()) {
        ++failed;
        ADD_FAILURE() << "jinja2 rendered it; kvserve: " << got.status().ToString();
      } else if (*got != r["output"].get<std::string>()) {
        ++failed;
        ADD_FAILURE() << Difference(r["output"], *got);
      }
    } else if (got.ok()) {
      ++failed;
      ADD_FAILURE() << "jinja2 raised " << r["error_type"].get<std::string>() << ": " << r["error"].get<std::string>()
                    << "; kvserve rendered it";
    } else if (r["raised"].get<bool>() && got.status().message() != r["error"].get<std::string>()) {
      ++failed;
      ADD_FAILURE() << "raise_exception message: jinja2 " << r["error"] << ", kvserve " << got.status().message();
    }
    (void)before;
  }
  EXPECT_EQ(failed, 0) << failed << " of " << checked << " renders differ from jinja2";
  EXPECT_GE(checked, 500);
}

}  // namespace jinja2_parity_test
}  // namespace kvserve

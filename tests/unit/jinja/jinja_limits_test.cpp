// The Jinja engine's bounds and sandbox: a template cannot loop forever, grow its output or a
// string or list without limit, recurse without limit or nest past the parser's bound (each a
// clear error, RESOURCE_EXHAUSTED for the work and size limits); it reaches nothing but the
// values given; raise_exception's message passes unchanged; one parsed template renders on
// several threads at once.
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/jinja/jinja.h"

namespace kvserve {
namespace jinja_limits_test {

using jinja::Template;
using jinja::Value;

Status RenderStatus(const std::string& source, const jinja::RenderOptions& options = {}) {
  StatusOr<Template> t = Template::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(Value::FromDict({}), options).status();
}

std::string MustRender(const std::string& source, const Value& vars = Value::FromDict({})) {
  StatusOr<Template> t = Template::Parse(source);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return "";
  StatusOr<std::string> out = t->Render(vars);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? *out : "";
}

TEST(JinjaLimitsTest, WorkAndSizeAreBounded) {
  // 10^10 iterations: stopped by the step limit.
  jinja::RenderOptions few_steps;
  few_steps.max_steps = 1'000'000;
  const Status loops =
      RenderStatus("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", few_steps);
  EXPECT_EQ(loops.code(), StatusCode::kResourceExhausted) << loops.ToString();
  EXPECT_NE(loops.message().find("steps"), std::string::npos) << loops.ToString();
  // Output past the limit.
  jinja::RenderOptions small;
  small.max_output_bytes = 1 << 20;
  const Status output = RenderStatus("{% for i in range(100000) %}{{ 'xxxxxxxxxxxxxxxxxxxx' }}{% endfor %}", small);
  EXPECT_EQ(output.code(), StatusCode::kResourceExhausted) << output.ToString();
  // A string doubled in a loop, a list doubled, a huge repeat or padding: refused early.
  EXPECT_EQ(RenderStatus("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
                         "{% endfor %}")
                .code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(RenderStatus("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}"
                         "{% endfor %}")
                .code(),
            StatusCode::kResourceExhausted);
  EXPECT_FALSE(RenderStatus("{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}"
                            "{% endfor %}")
                   .ok());
  EXPECT_FALSE(RenderStatus("{{ 'x' * 100000000000 }}").ok());
  EXPECT_FALSE(RenderStatus("{{ [1] * 100000000000 }}").ok());
  EXPECT_FALSE(RenderStatus("{{ 'x'|center(100000000000) }}").ok());
  EXPECT_FALSE(RenderStatus("{{ 'x'.ljust(100000000000) }}").ok());
  // jinja2's sandbox refuses ranges over 100,000 items.
  EXPECT_NE(RenderStatus("{{ range(1000000)|length }}").message().find("Range too big"), std::string::npos);
  EXPECT_EQ(MustRender("{{ range(100000)|length }}"), "100000");
}

TEST(JinjaLimitsTest, RecursionAndNestingAreBounded) {
  const Status recursion = RenderStatus("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(recursion.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(recursion.message().find("nest too deeply"), std::string::npos) << recursion.ToString();
  // A bounded recursion works.
  EXPECT_EQ(MustRender("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"),
            "54321");
  // Nesting deeper than the parser's bound is a parse error, not a stack overflow.
  for (const std::string& deep : {"{{ " + std::string(20000, '(') + "1" + std::string(20000, ')') + " }}",
                                   "{{ " + std::string(20000, '[') + std::string(20000, ']') + " }}",
                                   std::string(20000 / 8, ' ') + [] {
                                     std::string s;
                                     for (int i = 0; i < 5000; ++i) s += "{% if 1 %}";
                                     return s;
                                   }(),
                                   "{{ " + [] {
                                     std::string s;
                                     for (int i = 0; i < 20000; ++i) s += "not ";
                                     return s;
                                   }() + "1 }}",
                                   "{{ " + [] {
                                     std::string s;
                                     for (int i = 0; i < 20000; ++i) s += "-";
                                     return s;
                                   }() + "1 }}"}) {
    const StatusOr<Template> t = Template::Parse(deep);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(JinjaLimitsTest, TheSandboxReachesOnlyTheValuesGiven) {
  const Value vars = *jinja::ParseJson(R"({"messages": [{"role": "user", "content": "hi"}]})");
  // Mutating methods are refused, as in jinja2's immutable sandbox.
  StatusOr<Template> append = Template::Parse("{{ messages.append(1) }}");
  ASSERT_TRUE(append.ok());
  const Status refused = append->Render(vars).status();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("unsafe"), std::string::npos) << refused.ToString();
  // Python internals are not there.
  EXPECT_EQ(MustRender("[{{ ''.__class__ }}][{{ messages.__len__ }}][{{ range.__globals__ }}]", vars), "[][][]");
  EXPECT_FALSE(Template::Parse("{% include 'secret.txt' %}").ok());
  EXPECT_FALSE(Template::Parse("{% extends 'base.html' %}").ok());
  EXPECT_FALSE(Template::Parse("{% import 'macros.html' as m %}").ok());
}

TEST(JinjaLimitsTest, RaiseExceptionKeepsTheTemplatesMessage) {
  const Status raised = RenderStatus("{{ raise_exception('Conversation roles must alternate user/assistant') }}");
  EXPECT_EQ(raised.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(raised.message(), "Conversation roles must alternate user/assistant");
  // Other errors say where they are.
  const Status error = RenderStatus("line one\n{{ 1 + 'a' }}");
  EXPECT_EQ(error.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(error.message().find("line 2"), std::string::npos) << error.ToString();
}

TEST(JinjaLimitsTest, OneTemplateRendersOnManyThreads) {
  StatusOr<Template> t = Template::Parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.content }}{% endfor %}"
      "{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  const Value vars = *jinja::ParseJson(R"({"messages": [{"content": "a"}, {"content": "b"}]})");
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(4);
  for (size_t i = 0; i < outputs.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) {
        StatusOr<std::string> out = t->Render(vars);
        outputs[i] = out.ok() ? *out : out.status().ToString();
        if (outputs[i] != "ab2") return;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::string& out : outputs) EXPECT_EQ(out, "ab2");
}

}  // namespace jinja_limits_test
}  // namespace kvserve

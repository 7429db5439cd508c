// bench_jinja_render: microseconds per render of each chat template with kvserve's Jinja engine,
// on two conversations of tests/data/chat_templates/conversations.json (the template parsed
// once). Prints one line per (template, conversation): name, conversation, microseconds, or
// "error". bench/jinja_vs_jinja2.py runs it beside Python's jinja2 and prints the ratios
// (results: bench/results/jinja_render.md).
//
//   bench_jinja_render TEMPLATES_DIR CONVERSATIONS_JSON [renders=200]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/jinja/jinja.h"

int main(int argc, char** argv) {
  using namespace kvserve;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TEMPLATES_DIR CONVERSATIONS_JSON [renders]\n", argv[0]);
    return 2;
  }
  const int renders = argc > 3 ? std::atoi(argv[3]) : 200;
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  const auto conversations = nlohmann::ordered_json::parse(read(argv[2]));
  std::vector<std::pair<std::string, jinja::Value>> vars;
  for (const auto& c : conversations["conversations"]) {
    const std::string name = c["name"];
    if (name != "multi_turn" && name != "tool_call_string_args") continue;
    nlohmann::ordered_json v = c.value("kwargs", nlohmann::ordered_json::object());
    v["messages"] = c["messages"];
    v["tools"] = c["tools"];
    v["documents"] = nullptr;
    v["add_generation_prompt"] = c["add_generation_prompt"];
    v["bos_token"] = "<s>";
    v["eos_token"] = "</s>";
    vars.emplace_back(name, *jinja::ParseJson(v.dump()));
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(argv[1])) {
    if (e.path().extension() == ".jinja") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  jinja::RenderOptions options;
  options.now_seconds = 1768473000;  // fixed, as the reference outputs
  for (const auto& file : files) {
    StatusOr<jinja::Template> t = jinja::Template::Parse(read(file.string()));
    for (const auto& [name, v] : vars) {
      if (!t.ok() || !t->Render(v, options).ok()) {
        std::printf("%s %s error\n", file.filename().c_str(), name.c_str());
        continue;
      }
      double best = 1e30;
      for (int rep = 0; rep < 5; ++rep) {  // best of 5 batches
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < renders; ++i) (void)t->Render(v, options);
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
        best = std::min(best, us / renders);
      }
      std::printf("%s %s %.2f\n", file.filename().c_str(), name.c_str(), best);
    }
  }
  return 0;
}

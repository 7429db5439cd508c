// Where a benchmark's markdown report goes: `--output FILE` (with the command that produced
// it at the top), else stdout. Shared by the bench programs.
#pragma once

#include <cstdio>
#include <fstream>
#include <string>

namespace kvserve::bench_report {

// The CPU's model name from /proc/cpuinfo, for the reports' machine line.
inline std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

// The value of --output FILE in argv, or "".
inline std::string OutputFlag(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--output") return argv[i + 1];
  }
  return "";
}

// "# title" and the command line that writes the report.
inline std::string Heading(const std::string& title, const char* argv0, const std::string& output) {
  std::string text = "# " + title + "\n\nCommand: `" + argv0;
  if (!output.empty()) text += " --output " + output;
  return text + "`\n\n";
}

// Writes `markdown` to `path` (nothing when `path` is empty). Returns the exit status: 1, with
// a message on stderr, when the file cannot be written.
inline int WriteMarkdown(const std::string& path, const std::string& markdown) {
  if (path.empty()) return 0;
  std::ofstream out(path);
  out << markdown;
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return 1;
  }
  std::fprintf(stderr, "wrote %s\n", path.c_str());
  return 0;
}

// The report to `path`, or to stdout when `path` is empty.
inline int Emit(const std::string& path, const std::string& markdown) {
  if (path.empty()) {
    std::fputs(markdown.c_str(), stdout);
    return 0;
  }
  return WriteMarkdown(path, markdown);
}

}  // namespace kvserve::bench_report

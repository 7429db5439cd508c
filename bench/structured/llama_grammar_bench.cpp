// llama_grammar_bench: MaskBench (shared/structured/README.md) over llama.cpp's own grammar
// engine (common/json-schema-to-grammar + the grammar sampler), measured as `kvserve maskbench`
// (tools/maskbench) measures kvserve's, for a side-by-side comparison. llama.cpp is the peer
// being measured, never a dependency: this file is built outside kvserve's build.
//
// Per file: TTFM = wall time of json_schema_to_grammar(schema) + llama_sampler_init_grammar(
// vocab, grammar, "root"); an exception, a null sampler or a grammar llama.cpp refuses is a
// compile_error. TTFM includes the first mask (of the first test), which is then no TBM, as in
// tools/maskbench. For each test: serialize `data` as
// Python's json.dumps(data, ensure_ascii=False), tokenize it without special tokens or BOS,
// clone the compiled sampler, and per token: fill the candidates over the whole vocabulary
// (logit 0; not timed), time llama_sampler_apply (one mask, one TBM), check the token is not
// -inf, llama_sampler_accept it. After the last token one more mask: end-of-text must be allowed.
// Verdicts as kvserve's: valid refused = validation_error, invalid accepted = invalidation_error,
// past --time-limit-s = timeout. Each file runs in a forked child (llama.cpp may abort): a child
// that dies is a compile_error "crashed ...", one kGraceS past the limit is killed (timeout).
// Output: one JSON line per file, then the summary line, in tools/maskbench's format.
//
// Build: bench/structured/build_llama_grammar_bench.sh LLAMA_SRC LLAMA_BUILD OUT_BINARY
// Run:   llama_grammar_bench --vocab V.gguf [--time-limit-s S] FILE.json...
#include "json-schema-to-grammar.h"  // nlohmann::ordered_json too (llama.cpp's copy)
#include "llama.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kGraceS = 10;                   // a child this far past the limit is killed
constexpr rlim_t kChildMemBytes = 6ull << 30;    // address-space cap of a child

double UsSince(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }
Clock::time_point After(Clock::time_point t0, double s) {
  return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// ---- Python's json.dumps(value, ensure_ascii=False) ------------------------------------------
// Python's float repr: shortest round-trip digits; exponent form when the decimal point would
// sit more than 16 places right or 4 places left of the first digit (1e+16, 1e-05, 0.0001).
std::string PyFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  char* end = std::to_chars(buf, buf + sizeof buf, std::fabs(d), std::chars_format::scientific).ptr;
  const std::string sci(buf, end);  // "d.ddde+XX"
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::atoi(sci.c_str() + e + 1);
  const int point = exp10 + 1;  // digits before the decimal point
  std::string out = std::signbit(d) ? "-" : "";
  if (point > 16 || point < -3) {
    out += sci.substr(0, e);
    char ex[16];
    std::snprintf(ex, sizeof ex, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return out + ex;
  }
  if (point <= 0) return out + "0." + std::string(-point, '0') + digits;
  if (static_cast<size_t>(point) >= digits.size()) return out + digits + std::string(point - digits.size(), '0') + ".0";
  return out + digits.substr(0, point) + "." + digits.substr(point);
}

void PyString(const std::string& s, std::string* out) {
  static const std::string kEscaped = "\"\\\b\f\n\r\t", kLetter = "\"\\bfnrt";
  *out += '"';
  for (const char ch : s) {
    const size_t k = kEscaped.find(ch);
    if (k != std::string::npos) {
      *out += '\\';
      *out += kLetter[k];
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char u[8];
      std::snprintf(u, sizeof u, "\\u%04x", static_cast<unsigned>(ch));
      *out += u;
    } else {
      *out += ch;  // ensure_ascii=False: UTF-8 as is
    }
  }
  *out += '"';
}

void PyDumps(const json& v, std::string* out) {
  switch (v.type()) {
    case json::value_t::object:
    case json::value_t::array: {
      const bool object = v.is_object();
      *out += object ? '{' : '[';
      bool first = true;
      for (const auto& [k, x] : v.items()) {  // ordered_json: the file's key order, as Python's
        if (!first) *out += ", ";
        first = false;
        if (object) PyString(k, out), *out += ": ";
        PyDumps(x, out);
      }
      *out += object ? '}' : ']';
      return;
    }
    case json::value_t::string: PyString(v.get<std::string>(), out); return;
    case json::value_t::number_float: *out += PyFloat(v.get<double>()); return;
    default: *out += v.dump();  // integers, true, false, null
  }
}

// ---- one file, in the child: writes "t <ttfm>", "m <tbm>" per mask, then "r <json>" -------------
struct Bench {
  const llama_vocab* vocab = nullptr;
  int n_vocab = 0;
  llama_token eos = -1;
  double limit_s = 60;
};

std::vector<llama_token> Tokenize(const llama_vocab* vocab, const std::string& text) {
  std::vector<llama_token> toks(text.size() + 8);  // a token is at least one byte
  const int n = llama_tokenize(vocab, text.data(), text.size(), toks.data(), toks.size(), /*add_special=*/false,
                               /*parse_special=*/false);
  toks.resize(std::max(n, 0));
  return toks;
}

std::string Piece(const llama_vocab* vocab, llama_token tok) {
  char buf[256];
  const int n = llama_token_to_piece(vocab, tok, buf, sizeof buf, 0, true);
  return std::string(buf, std::max(n, 0));
}

// At this commit llama_sampler_init_grammar returns a sampler without a grammar (it allows
// everything) when llama.cpp cannot parse the grammar. Detect it with end-of-text, which no JSON
// grammar allows before the first token.
bool RefusesEmpty(llama_sampler* s, llama_token eos) {
  llama_token_data d = {eos, 0.0f, 0.0f};
  llama_token_data_array a = {&d, 1, -1, false};
  llama_sampler_apply(s, &a);
  return std::isinf(d.logit);
}

void RunChild(const std::string& path, const Bench& b, FILE* out) {
  int ntok = 0;
  auto finish = [&](const char* status, const std::string& detail) {
    json r = {{"status", status}, {"num_tokens", ntok}};
    if (!detail.empty()) r["detail"] = detail;
    std::fprintf(out, "r %s\n", r.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  };
  json doc;
  try {
    std::ifstream in(path);
    doc = json::parse(in);
  } catch (const std::exception& e) {
    return finish("read_error", e.what());
  }
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = After(start, b.limit_s);
  llama_sampler* compiled = nullptr;
  std::string error;
  try {
    const std::string grammar = json_schema_to_grammar(doc["schema"]);
    compiled = llama_sampler_init_grammar(b.vocab, grammar.c_str(), "root");
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double compile_us = UsSince(start);
  bool ttfm_sent = false;
  auto send_ttfm = [&](double first_mask_us) {
    std::fprintf(out, "t %.3f\n", compile_us + first_mask_us);
    ttfm_sent = true;
  };
  if (!error.empty()) {
    send_ttfm(0);
    return finish("compile_error", error);
  }
  if (!compiled) {
    send_ttfm(0);
    return finish("compile_error", "null sampler");
  }
  if (!RefusesEmpty(compiled, b.eos)) return finish("compile_error", "grammar refused by llama.cpp (sampler without grammar)");
  if (Clock::now() > deadline) return finish("timeout", "");
  std::vector<llama_token_data> cand(b.n_vocab);
  const json tests = doc.value("tests", json::array());
  for (size_t t = 0; t < tests.size(); ++t) {
    const bool valid = tests[t].value("valid", false);
    const std::string at = "test " + std::to_string(t);
    std::string text;
    PyDumps(tests[t]["data"], &text);
    const std::vector<llama_token> toks = Tokenize(b.vocab, text);
    llama_sampler* s = llama_sampler_clone(compiled);
    bool accepted = true;
    std::string refused;
    size_t offset = 0;  // bytes of text accepted so far
    for (size_t i = 0; i <= toks.size(); ++i) {
      if (Clock::now() > deadline) return finish("timeout", "");
      for (int id = 0; id < b.n_vocab; ++id) cand[id] = {id, 0.0f, 0.0f};
      llama_token_data_array arr = {cand.data(), cand.size(), -1, false};
      const Clock::time_point t0 = Clock::now();
      try {
        llama_sampler_apply(s, &arr);
      } catch (const std::exception& e) {
        return finish("compile_error", std::string("exception in a mask: ") + e.what());
      }
      if (ttfm_sent) {
        std::fprintf(out, "m %.3f\n", UsSince(t0));
      } else {
        send_ttfm(UsSince(t0));
      }
      if (i == toks.size()) {
        if (b.eos < 0 || std::isinf(cand[b.eos].logit)) accepted = false, refused = "end of text";
        break;
      }
      ++ntok;
      const llama_token tok = toks[i];
      const std::string piece = Piece(b.vocab, tok);
      if (std::isinf(cand[tok].logit)) {  // apply only sets logits: cand[id].id == id still
        accepted = false;
        refused = "token " + std::to_string(i) + " (" + json(piece).dump(-1, ' ', false, json::error_handler_t::replace) +
                  ") at byte " + std::to_string(offset);
        break;
      }
      try {
        llama_sampler_accept(s, tok);
      } catch (const std::exception& e) {  // the mask allowed what accept refuses: a bug
        return finish("internal_error", at + ": token " + std::to_string(i) + " in the mask but refused: " + e.what());
      }
      offset += piece.size();
    }
    llama_sampler_free(s);
    if (valid && !accepted) return finish("validation_error", at + " refused at " + refused + ": " + text.substr(0, 300));
    if (!valid && accepted) return finish("invalidation_error", at + " accepted: " + text.substr(0, 300));
  }
  if (!ttfm_sent) send_ttfm(0);  // no tests
  finish("passing", "");
}

// ---- the parent: one child per file ----------------------------------------------------------
struct Result {
  std::string file, status, detail;
  double ttfm_us = -1;
  int num_tokens = 0;
  std::vector<double> tbm_us;
  double tbm_us_max = 0;
};

std::string FirstLine(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (!s.empty()) return s;
  }
  return "";
}

Result RunIsolated(const std::string& path, const Bench& b) {
  Result r;
  r.file = path;
  int fds[2];
  FILE* err = std::tmpfile();  // the child's stderr: llama.cpp's parse and abort messages
  if (pipe(fds) != 0 || !err) {
    r.status = "read_error", r.detail = "pipe/tmpfile failed";
    return r;
  }
  const Clock::time_point start = Clock::now();
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fileno(err), STDERR_FILENO);
    const rlimit lim = {kChildMemBytes, kChildMemBytes};
    setrlimit(RLIMIT_AS, &lim);
    FILE* out = fdopen(fds[1], "w");
    std::setvbuf(out, nullptr, _IOLBF, 0);
    RunChild(path, b, out);
    std::fclose(out);
    _exit(0);
  }
  close(fds[1]);
  const Clock::time_point hard = After(start, b.limit_s + kGraceS);
  std::string buf;
  json fin;
  bool killed = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(hard - Clock::now()).count();
    pollfd p = {fds[0], POLLIN, 0};
    const int n = left > 0 ? poll(&p, 1, static_cast<int>(left)) : 0;
    if (n < 0 && errno == EINTR) continue;
    if ((killed = n == 0)) {  // past limit + grace
      kill(pid, SIGKILL);
      break;
    }
    char tmp[4096];
    const ssize_t k = read(fds[0], tmp, sizeof tmp);
    if (k <= 0) break;
    buf.append(tmp, k);
    for (size_t nl; (nl = buf.find('\n')) != std::string::npos; buf.erase(0, nl + 1)) {
      const std::string line = buf.substr(0, nl);
      if (line.size() < 2) continue;
      if (line[0] == 'm') {
        const double us = std::atof(line.c_str() + 2);
        r.tbm_us.push_back(us);
        r.tbm_us_max = std::max(r.tbm_us_max, us);
      } else if (line[0] == 't') {
        r.ttfm_us = std::atof(line.c_str() + 2);
      } else if (line[0] == 'r') {
        fin = json::parse(line.substr(2));
      }
    }
  }
  close(fds[0]);
  int ws = 0;
  waitpid(pid, &ws, 0);
  if (r.ttfm_us < 0) r.ttfm_us = UsSince(start);
  if (killed) {
    r.status = "timeout";
    r.detail = "killed past the time limit";
  } else if (fin.is_null()) {
    r.status = "compile_error";
    r.detail = WIFSIGNALED(ws) ? "crashed (signal " + std::to_string(WTERMSIG(ws)) + ")" : "crashed (exit " + std::to_string(WEXITSTATUS(ws)) + ")";
  } else {
    r.status = fin["status"].get<std::string>();
    r.num_tokens = fin["num_tokens"].get<int>();
    r.detail = fin.value("detail", "");
  }
  if (r.status == "compile_error") {  // add what llama.cpp printed (parse error, abort message)
    if (const std::string e = FirstLine(err); !e.empty()) r.detail += ": " + e.substr(0, 300);
  }
  std::fclose(err);
  return r;
}

// As tools/maskbench: the value at index floor(p/100 * n), clamped.
double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  std::string vocab_path;
  Bench b;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--vocab" && i + 1 < argc) vocab_path = argv[++i];
    else if (a == "--time-limit-s" && i + 1 < argc) b.limit_s = std::atof(argv[++i]);
    else files.push_back(a);
  }
  if (vocab_path.empty() || files.empty()) {
    std::fprintf(stderr, "usage: %s --vocab FILE.gguf [--time-limit-s S] FILE.json...\n", argv[0]);
    return 2;
  }
  std::sort(files.begin(), files.end());
  setenv("GGML_NO_BACKTRACE", "1", 1);  // ggml_abort would otherwise attach gdb to the child
  llama_log_set([](ggml_log_level level, const char* text, void*) {
    if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
  }, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* model = llama_model_load_from_file(vocab_path.c_str(), mp);
  if (!model) {
    std::fprintf(stderr, "cannot load %s\n", vocab_path.c_str());
    return 1;
  }
  b.vocab = llama_model_get_vocab(model);
  b.n_vocab = llama_vocab_n_tokens(b.vocab);
  b.eos = llama_vocab_eos(b.vocab) >= 0 ? llama_vocab_eos(b.vocab) : llama_vocab_eot(b.vocab);

  std::map<std::string, int> counts = {{"passing", 0}, {"compile_error", 0}, {"validation_error", 0},
                                       {"invalidation_error", 0}, {"timeout", 0}};
  std::vector<double> tbm, ttfm;
  for (const std::string& f : files) {
    const Result r = RunIsolated(f, b);
    json line = {{"file", r.file}, {"status", r.status}, {"ttfm_us", std::round(r.ttfm_us)},
                 {"num_tokens", r.num_tokens}, {"tbm_us_max", std::round(r.tbm_us_max)}};
    if (!r.detail.empty()) line["detail"] = r.detail;
    std::printf("%s\n", line.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    std::fflush(stdout);
    ++counts[r.status];
    tbm.insert(tbm.end(), r.tbm_us.begin(), r.tbm_us.end());
    if (r.status != "compile_error" && r.status != "read_error") ttfm.push_back(r.ttfm_us);
  }
  json summary = {{"files", files.size()}};
  for (const auto& [status, n] : counts) summary[status] = n;
  json tbm_p, ttfm_p;
  for (auto [name, p] : {std::pair{"p50", 50.0}, {"p75", 75.0}, {"p90", 90.0}, {"p95", 95.0}, {"p99", 99.0}, {"p999", 99.9}}) {
    tbm_p[name] = std::round(Percentile(tbm, p) * 10) / 10;
  }
  tbm_p["max"] = std::round(Percentile(tbm, 100));
  for (auto [name, p] : {std::pair{"p50", 50.0}, {"p90", 90.0}, {"p99", 99.0}}) ttfm_p[name] = std::round(Percentile(ttfm, p));
  ttfm_p["max"] = std::round(Percentile(ttfm, 100));
  summary["tbm_us"] = tbm_p;
  summary["ttfm_us"] = ttfm_p;
  std::printf("%s\n", json{{"summary", summary}}.dump().c_str());
  llama_model_free(model);
  return 0;
}

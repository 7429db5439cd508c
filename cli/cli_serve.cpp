// `kvserve serve`: the server. Starts HTTP first (so /health answers and /ready says 503 while
// the model loads), loads the model, sizes the KV pool, starts the engine, the metrics and
// gRPC, then serves until SIGTERM/SIGINT, and drains:
//
//   signal -> ctx.draining (/ready 503, new requests 503) -> Engine::Drain(--shutdown-grace)
//   lets in-flight requests finish (the rest are aborted) -> gRPC Shutdown -> HTTP Stop ->
//   exit 0. A second signal exits at once (status 1).
//
// Signals: SIGINT and SIGTERM are blocked before any thread starts (so every thread inherits
// the mask) and a dedicated thread takes them with sigwait(); no async-signal handler runs.
//
// Every flag can also come from the environment (KVSERVE_<FLAG>, e.g. KVSERVE_HTTP_PORT) or
// from a TOML/INI file given with --config (keys are the long flag names, e.g.
// `http-port = 8080`, optionally under [serve]); the command line wins over the environment,
// which wins over the file.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <new>
#include <optional>
#include <thread>

#include "common/log.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/model/synthetic.h"
#include "cli/cli.h"
#include "cli/engine_options.h"
#include "cli/kv_events_options.h"
#include "server/http/http_server.h"
#include "server/grpc/grpc_server.h"
#include "server/api/metrics.h"

namespace kvserve::cli {
namespace serve_command {

constexpr char kCommand[] = "serve";

struct ServeOptions {
  std::string config_file;
  CLI::App* sub = nullptr;
  EngineFlags engine;
  ServerOptions server;
  KvEventsFlags kv_events;
  std::string api_key_file;
  std::string log_format = "text";
  std::string log_level = "info";
  const CLI::App* app = nullptr;  // to see whether --log-level was given to the parent
  const CLI::Option* log_level_option = nullptr;
  bool profile = false;
  double profile_interval = 0;
  std::string state_dir;  // "": conversations are kept in memory only
  std::string chat_template_file;  // --chat-template
  uint64_t state_max_bytes = uint64_t{8} << 30;
};

// --profile: the report on stderr, with what it covers.
void PrintProfile(const Profiler& profiler, const char* when) {
  std::fprintf(stderr, "kvserve serve: profile (%s; ms per engine step; network writes: CPU time of the HTTP threads)\n%s\n",
               when, profiler.Report().c_str());
  std::fflush(stderr);
}

// --profile-interval: prints the (cumulative) profile every `seconds` until destroyed.
class PeriodicProfile {
 public:
  PeriodicProfile(const Profiler* profiler, double seconds) {
    if (profiler == nullptr || seconds <= 0) return;
    thread_ = std::thread([this, profiler, seconds] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return stop_; })) {
        PrintProfile(*profiler, "so far");
      }
    });
  }
  ~PeriodicProfile() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Receives SIGINT/SIGTERM on its own thread. The state is shared with that (detached) thread
// so it may outlive RunServe.
class SignalWaiter {
 public:
  // Blocks the signals in the calling thread: call before any other thread starts.
  SignalWaiter() : state_(std::make_shared<State>()) {
    sigemptyset(&state_->set);
    sigaddset(&state_->set, SIGINT);
    sigaddset(&state_->set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &state_->set, nullptr);
    std::thread([state = state_] {
      for (int count = 0;;) {
        int sig = 0;
        if (sigwait(&state->set, &sig) != 0) continue;
        if (++count > 1) {
          std::fprintf(stderr, "kvserve serve: second signal (%s): exiting without draining\n", strsignal(sig));
          std::_Exit(1);
        }
        std::lock_guard<std::mutex> lock(state->mu);
        state->signal = sig;
        state->cv.notify_all();
      }
    }).detach();
  }

  // Blocks until the first signal; returns it.
  int Wait() {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->signal != 0; });
    return state_->signal;
  }

 private:
  struct State {
    sigset_t set;
    std::mutex mu;
    std::condition_variable cv;
    int signal = 0;
  };
  std::shared_ptr<State> state_;
};

// The id clients send as "model": --served-model-name, else the file name without directory
// and .gguf extension, else the synthetic spec itself.
std::string ModelId(const ServeOptions& o) {
  if (!o.server.served_model_name.empty()) return o.server.served_model_name;
  const std::string& spec = o.engine.model;
  if (IsSyntheticSpec(spec)) return spec;
  std::string name = spec.substr(spec.find_last_of('/') == std::string::npos ? 0 : spec.find_last_of('/') + 1);
  if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
  return name;
}

// Keys from --api-key-file: one per line; blank lines and lines starting with '#' skipped.
Status ReadKeyFile(const std::string& path, std::vector<std::string>* keys) {
  std::ifstream in(path);
  if (!in) return InvalidArgumentError(fmt::format("cannot read --api-key-file '{}'", path));
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    size_t start = 0;
    while (start < line.size() && std::isspace(static_cast<unsigned char>(line[start]))) ++start;
    if (start == line.size() || line[start] == '#') continue;
    keys->push_back(line.substr(start));
  }
  return OkStatus();
}

// Applies a TOML/INI file (`key = value` lines, keys the long flag names with '-' or '_',
// optionally under a [serve] section) to the options of `sub` that neither the command line
// nor the environment set. (CLI11 2.1 reads config files for the main app only.)
Status ApplyConfigFile(CLI::App* sub, const std::string& path) {
  CLI::ConfigTOML reader;
  std::vector<CLI::ConfigItem> items;
  try {
    items = reader.from_file(path);
  } catch (const CLI::Error& e) {
    return InvalidArgumentError(fmt::format("--config '{}': {}", path, e.what()));
  }
  for (const CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section markers
    if (!item.parents.empty() && !(item.parents.size() == 1 && item.parents[0] == kCommand)) {
      return InvalidArgumentError(fmt::format("--config '{}': unknown section '{}'", path, item.fullname()));
    }
    std::string name = item.name;
    std::replace(name.begin(), name.end(), '_', '-');
    CLI::Option* opt = sub->get_option_no_throw("--" + name);
    if (opt == nullptr || name == "config") {
      return InvalidArgumentError(fmt::format("--config '{}': unknown option '{}'", path, item.name));
    }
    if (opt->count() > 0) continue;  // the command line or the environment wins
    try {
      if (opt->get_expected_min() == 0) {  // a flag
        opt->add_result(opt->get_flag_value(name, reader.to_flag(item)));
      } else {
        opt->add_result(item.inputs);
      }
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return InvalidArgumentError(fmt::format("--config '{}': {}: {}", path, item.name, e.what()));
    }
  }
  return OkStatus();
}

// Prints to stdout (what scripts and tests read) and to the log.
void Announce(const std::string& line) {
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
  LOG_INFO("{}", line);
}

int RunServe(ServeOptions& o) {
  SignalWaiter signals;  // before any thread starts
  if (!o.config_file.empty()) {
    if (Status s = ApplyConfigFile(o.sub, o.config_file); !s.ok()) return ReportError(kCommand, s);
  }

  // --log-level given before the subcommand applies unless serve's own was set.
  std::string level = o.log_level;
  if (o.log_level_option->count() == 0 && o.app->get_option("--log-level")->count() > 0) {
    level = o.app->get_option("--log-level")->as<std::string>();
  }
  LogConfig log;
  log.level = level;
  log.json = o.log_format == "json";
  if (!InitLogging(log)) return ReportError(kCommand, "unknown log level '" + level + "'", kExitUsageError);

  if (!o.api_key_file.empty()) {
    if (Status s = ReadKeyFile(o.api_key_file, &o.server.api_keys); !s.ok()) return ReportError(kCommand, s);
  }
  if (o.server.protect_observability && o.server.api_keys.empty()) {
    return ReportError(kCommand, "--protect-observability needs --api-key or --api-key-file", kExitUsageError);
  }
  if (!o.chat_template_file.empty()) {
    std::ifstream in(o.chat_template_file, std::ios::binary);
    o.server.chat_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) return ReportError(kCommand, "cannot read " + o.chat_template_file, kExitUsageError);
    if (o.server.chat_template.empty()) {
      return ReportError(kCommand, "--chat-template " + o.chat_template_file + " is empty", kExitUsageError);
    }
  }

  std::unique_ptr<Profiler> profiler;  // outlives the engine and the HTTP server
  if (o.profile) profiler = std::make_unique<Profiler>();
  ServerContext ctx;
  ctx.profiler = profiler.get();
  ctx.options = o.server;
  ctx.options.grammar_compile_slots = o.engine.grammar_compile_threads + o.engine.grammar_max_waiting_compiles;
  ctx.model_id = ModelId(o);
  StatusOr<TlsMaterial> tls = LoadTlsMaterial(o.server.tls);
  if (!tls.ok()) return ReportError(kCommand, tls.status().message(), kExitUsageError);
  ctx.tls = std::move(tls).value();
  if (!o.state_dir.empty()) {
    StatusOr<std::unique_ptr<StateDir>> state = StateDir::Open(o.state_dir, static_cast<int64_t>(o.state_max_bytes));
    if (!state.ok()) return ReportError(kCommand, state.status().message(), kExitUsageError);
    ctx.state = std::move(state).value();
    LOG_INFO("state directory {} (at most {:.1f} MiB): conversations continue after a restart", o.state_dir,
             static_cast<double>(o.state_max_bytes) / (1 << 20));
  }

  StatusOr<std::unique_ptr<HttpServer>> http = HttpServer::Start(&ctx);
  if (!http.ok()) return ReportError(kCommand, http.status().message(), kExitRuntimeError);
  Announce(fmt::format("HTTP on {}://{}:{}{}", ctx.tls.enabled() ? "https" : "http", o.server.host, (*http)->port(),
                       ctx.tls.mutual() ? " (client certificates required)" : ""));

  // Model.
  LOG_INFO("loading model {}", o.engine.model);
  const auto load_start = std::chrono::steady_clock::now();
  std::unique_ptr<Model> loaded;
  if (int rc = LoadModel(kCommand, o.engine.model, WeightLoadOptions(o.engine.weight_dtype), &loaded); rc != kExitOk) {
    return rc;
  }
  std::shared_ptr<const Model> model = std::move(loaded);
  const ModelConfig& mc = model->config();
  LOG_INFO("model loaded in {:.2f} s: {} layers, dim {}, {} heads ({} KV), vocab {}, context {}, weights {:.1f} MiB",
           std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count(), mc.num_layers,
           mc.dim, mc.num_heads, mc.num_kv_heads, mc.vocab_size, mc.context_length,
           static_cast<double>(model->weights().total_bytes) / (1 << 20));

  // Engine.
  StatusOr<EnginePlan> plan = PlanEngine(o.engine, *model);
  if (!plan.ok()) return ReportError(kCommand, plan.status().message(), kExitUsageError);
  plan->config.profiler = profiler.get();
  plan->config.state = ctx.state;
  // Declared before the engine, so it outlives the engine thread that feeds it.
  StatusOr<std::unique_ptr<KvEventPublisher>> kv_events =
      StartKvEvents(o.kv_events, ctx.model_id, (*http)->port(), plan->config.kv.block_size, plan->config.enable_prefix_caching);
  if (!kv_events.ok()) return ReportError(kCommand, kv_events.status().message(), kExitUsageError);
  if (*kv_events) {
    ctx.kv_events = &(*kv_events)->counters();
    plan->config.prefix_event_sink = [p = kv_events->get()](std::vector<PrefixEvent> events,
                                                            const std::function<std::vector<PrefixEvent>()>& current_state) {
      p->Enqueue(std::move(events), current_state);
    };
  }
  StatusOr<std::unique_ptr<Engine>> engine = CreateEngine(&*plan, model);
  if (!engine.ok()) return ReportError(kCommand, engine.status().message(), kExitRuntimeError);
  ctx.backend_name = plan->device;
  LOG_INFO("device {} (compute {}); KV cache: {} blocks x {} tokens ({}), {:.1f} MiB; max model len {}; host tier "
           "{} blocks; prefix caching {}",
           plan->device, ComputeDtypeName(plan->compute_dtype), plan->config.num_blocks, plan->config.kv.block_size, plan->kv_description,
           static_cast<double>(plan->kv_bytes) / (1 << 20), plan->config.max_model_len, plan->config.num_host_blocks,
           plan->config.enable_prefix_caching ? "on" : "off");
  const Tokenizer& tok = model->tokenizer();
  const bool overridden = !ctx.options.chat_template.empty();
  const std::string& template_text = overridden ? ctx.options.chat_template : tok.vocab().chat_template;
  const ChatTemplate chat_template = ChatTemplate::Detect(template_text, tok);
  if (overridden && !chat_template.is_jinja()) {
    return ReportError(kCommand, "--chat-template " + o.chat_template_file + ": " + chat_template.jinja_error(),
                       kExitUsageError);
  }
  if (chat_template.is_jinja()) {
    LOG_INFO("chat template: {} (Jinja; {}; tool calls: {}{})",
             overridden ? "--chat-template " + o.chat_template_file : std::string("the model's own"),
             chat_template.family_recognized() ? "looks like " + std::string(chat_template.family_name())
                                               : std::string("no built-in family"),
             chat_template.tool_syntax().Describe(),
             chat_template.writes_harmony()      ? "; reasoning in harmony channels"
             : chat_template.writes_think_tags() ? "; reasoning in <think> tags"
                                                 : "");
  } else if (template_text.empty()) {
    LOG_WARN("chat template: the model has none; chat requests use the built-in {} format (tool calls: {}); "
             "give one with --chat-template FILE", chat_template.name(), chat_template.tool_syntax().Describe());
  } else {
    LOG_WARN("chat template: the model's template cannot be rendered ({}); chat requests use the built-in {} format "
             "it resembles (tool calls: {}); give one with --chat-template FILE",
             chat_template.jinja_error(), chat_template.name(), chat_template.tool_syntax().Describe());
  }

  ctx.engine = engine->get();

  std::unique_ptr<GrpcServer> grpc;
  if (o.server.grpc_port >= 0) {
    StatusOr<std::unique_ptr<GrpcServer>> started = GrpcServer::Start(&ctx);
    if (!started.ok()) {
      (*engine)->Stop();
      return ReportError(kCommand, started.status().message(), kExitRuntimeError);
    }
    grpc = std::move(started).value();
    Announce(fmt::format("gRPC on {}:{}{}", o.server.host, grpc->port(), ctx.tls.enabled() ? " (TLS)" : ""));
  }
  ctx.loading = false;  // after ctx.engine is set: handlers read it only when not loading
  LOG_INFO("ready: serving model '{}'", ctx.model_id);

  std::optional<PeriodicProfile> periodic_profile;
  periodic_profile.emplace(profiler.get(), o.profile_interval);
  const int sig = signals.Wait();
  periodic_profile.reset();
  const auto drain_start = std::chrono::steady_clock::now();
  LOG_INFO("{}: draining (up to {} s for requests in flight)", strsignal(sig), o.server.shutdown_grace_seconds);
  ctx.draining = true;
  const int aborted = (*engine)->Drain(o.server.shutdown_grace_seconds);
  if (aborted > 0) LOG_WARN("shutdown grace over: aborted {} requests", aborted);
  const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - drain_start).count();
  if (grpc) grpc->Shutdown(std::max(1.0, o.server.shutdown_grace_seconds - spent));
  (*http)->Stop();
  (*engine)->Stop();
  if (profiler) PrintProfile(*profiler, "whole run");
  LOG_INFO("stopped");
  return kExitOk;
}

// RunServe, with an allocation failure during start-up (a model or KV pool larger than the
// memory the process may use, e.g. under `ulimit -v` or a container limit) reported as a
// clear error instead of an abort.
int RunServeReportingOom(ServeOptions& o) {
  try {
    return RunServe(o);
  } catch (const std::bad_alloc&) {
    return ReportError(kCommand,
                       fmt::format("out of memory while loading the model '{}' or allocating the KV cache: it does "
                                   "not fit in the memory this process may use (try a smaller model or "
                                   "--kv-cache-memory)", o.engine.model),
                       kExitRuntimeError);
  }
}

// KVSERVE_<LONG_NAME> for every option that has a long name (--http-port: KVSERVE_HTTP_PORT).
void AddEnvironmentNames(CLI::App* sub) {
  for (CLI::Option* opt : sub->get_options()) {
    const std::vector<std::string>& names = opt->get_lnames();
    if (names.empty() || names.front() == "help") continue;
    std::string env = "KVSERVE_";
    for (char c : names.front()) env += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    opt->envname(env);
  }
}

}  // namespace serve_command

void RegisterServeCommand(CommandRegistry& registry) {
  using namespace serve_command;
  auto o = std::make_shared<ServeOptions>();
  o->app = &registry.app();
  CLI::App* sub = registry.Add(kCommand, "Serve the OpenAI-compatible HTTP API, gRPC and Prometheus metrics",
                               [o] { return RunServeReportingOom(*o); });
  o->sub = sub;
  sub->add_option("--config", o->config_file,
                  "TOML/INI file of options: long flag names as keys (http-port = 8080); the command line and "
                  "the environment win");
  ServerOptions& s = o->server;
  AddEngineOptions(sub, &o->engine);
  AddKvEventsOptions(sub, &o->kv_events);
  sub->add_option("--chat-template", o->chat_template_file,
                  "A file with a Jinja chat template to use instead of the model's (tokenizer.chat_template)")
      ->check(CLI::ExistingFile);
  sub->add_option("--reasoning-format", s.reasoning_format,
                  "auto: a reply's <think>...</think> part is returned apart (message.reasoning_content and "
                  "reasoning) for templates that write those tags; none: as content")
      ->check(CLI::IsMember({"auto", "none"}));
  sub->add_option("--host", s.host, "Address to listen on (HTTP and gRPC)");
  sub->add_option("--http-port", s.http_port, "HTTP port (0: pick a free one; printed at start)")
      ->check(CLI::Range(0, 65535));
  sub->add_option("--grpc-port", s.grpc_port, "gRPC port (0: pick a free one; -1: no gRPC)")
      ->check(CLI::Range(-1, 65535));
  sub->add_option("--http-threads", s.http_threads, "HTTP I/O threads")->check(CLI::Range(1, 256));
  sub->add_option("--api-key", s.api_keys, "API key clients must send as 'Authorization: Bearer <key>' "
                                           "(repeatable; comma-separated in KVSERVE_API_KEY)")
      ->delimiter(',');
  sub->add_option("--api-key-file", o->api_key_file, "File with one API key per line ('#' comments)");
  sub->add_option("--tls-cert-file", s.tls.cert_file, "PEM certificate (then its intermediates): serve HTTPS and "
                                                     "gRPC over TLS with it; needs --tls-key-file");
  sub->add_option("--tls-key-file", s.tls.key_file, "PEM private key of --tls-cert-file");
  sub->add_option("--tls-client-ca-file", s.tls.client_ca_file, "PEM CA certificates: require clients (HTTPS and "
                                                               "gRPC) to present a certificate they signed (mutual TLS)");
  sub->add_flag("--allow-client-priority", s.allow_client_priority,
                "Honour the priority field of requests (off: a non-zero priority is refused with 400)");
  sub->add_flag("--protect-observability", s.protect_observability, "Require the API key for /health, /ready "
                                                                     "and /metrics too");
  sub->add_option("--state-dir", o->state_dir,
                  "Directory where chat sessions' KV caches and stored responses outlive a restart (written when "
                  "they leave memory and at shutdown; read back by the next turn)");
  sub->add_option("--state-max-bytes", o->state_max_bytes, "Disk --state-dir may use, e.g. 20GiB (least "
                                                           "recently used records go first)")
      ->transform(CLI::AsSizeValue(false));
  sub->add_option("--responses-max-bytes", s.responses_max_bytes,
                  "Stored responses (the Responses API) in all, e.g. 256MiB (the oldest go first)")
      ->transform(CLI::AsSizeValue(false));
  sub->add_option("--responses-max-bytes-per-key", s.responses_max_bytes_per_key,
                  "Stored responses of one API key, e.g. 64MiB (past it the key's own oldest go, never another's)")
      ->transform(CLI::AsSizeValue(false));
  sub->add_option("--shutdown-grace", s.shutdown_grace_seconds, "Seconds in-flight requests get after SIGTERM")
      ->check(CLI::Range(0.0, 86400.0));
  sub->add_option("--max-body-size", s.max_body_bytes, "Largest request body (413 beyond), e.g. 8MiB")
      ->transform(CLI::AsSizeValue(false));
  sub->add_option("--header-timeout", s.header_timeout_seconds, "Seconds a client may take to send a request's "
                                                                "header (and again its body)")
      ->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--idle-timeout", s.idle_timeout_seconds, "Seconds an idle keep-alive connection is kept")
      ->check(CLI::Range(0.1, 86400.0));
  sub->add_option("--write-timeout", s.write_timeout_seconds, "Seconds a stalled write may wait before the "
                                                              "request is aborted")
      ->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--default-max-tokens", s.default_max_tokens, "max_tokens of /v1/completions when absent")
      ->check(CLI::Range(0, 1 << 24));
  sub->add_option("--served-model-name", s.served_model_name, "Model id clients use (default: the GGUF file name "
                                                              "without .gguf, or the synthetic spec)");
  sub->add_flag("--profile", o->profile, "Time each part of an engine step (scheduling, batch building, forward "
                                         "by operation, sampling, detokenizing, network writes); the report goes "
                                         "to stderr on shutdown");
  sub->add_option("--profile-interval", o->profile_interval, "With --profile: also print the report every this "
                                                             "many seconds (0 = only on shutdown)")
      ->check(CLI::Range(0.0, 86400.0));
  sub->add_option("--log-format", o->log_format, "Log lines as text or JSON objects")
      ->check(CLI::IsMember({"text", "json"}));
  o->log_level_option = sub->add_option("--log-level", o->log_level, "trace, debug, info, warn, error, off")
                            ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  sub->add_flag("--enable-debug-endpoints", s.enable_debug_endpoints,
                "Serve GET /debug/cache (runs the KV cache integrity check on the engine thread; for tests and "
                "soak runs, not for production)");
  sub->add_flag("--no-console{false}", s.enable_console, "Do not serve the web console at GET / (the API, "
                                                         "GET /v1/cache/blocks included, is unchanged)");
  AddEnvironmentNames(sub);
  // Test hooks: hidden from --help and never read from the environment.
  sub->add_option("--inject-forward-faults", o->engine.inject_forward_faults,
                  "Tests only: forward passes that fail (N, N-M, N- ; comma-separated)")
      ->group("");
  sub->add_option("--inject-step-delay-ms", o->engine.inject_step_delay_ms,
                  "Tests only: every forward pass takes at least this many milliseconds")
      ->check(CLI::Range(0.0, 10000.0))
      ->group("");
}

}  // namespace kvserve::cli

// bench-serve's statistics and parsers: percentiles, summaries, the Poisson arrival
// generator, length distributions, chunked decoding and SSE parsing with input split at
// every byte, streamed-event interpretation, request bodies and run summaries.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tools/http_client/http_client.h"
#include "tools/loadgen/openai_requests.h"
#include "tools/loadgen/report.h"
#include "tools/loadgen/stats.h"

namespace kvserve::bench {
namespace loadgen_test {

// ------------------------------------------------------------------ statistics

TEST(BenchServeStats, PercentileInterpolatesLinearlyBetweenRanks) {
  const std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 10);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 5.5);         // rank 4.5
  EXPECT_DOUBLE_EQ(Percentile(v, 90), 9.1);         // rank 8.1
  EXPECT_NEAR(Percentile(v, 99), 9.91, 1e-12);      // rank 8.91
  const std::vector<double> one = {42};
  EXPECT_DOUBLE_EQ(Percentile(one, 99), 42);
  const std::vector<double> two = {0, 100};
  EXPECT_DOUBLE_EQ(Percentile(two, 25), 25);
}

TEST(BenchServeStats, SummarizeSortsAndReportsMeanAndPercentiles) {
  Summary s = Summarize({5, 1, 4, 2, 3});
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(s.p50, 3);
  EXPECT_DOUBLE_EQ(s.p90, 4.6);  // rank 3.6
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  Summary empty = Summarize({});
  EXPECT_EQ(empty.count, 0u);
  EXPECT_DOUBLE_EQ(empty.mean, 0);
  EXPECT_DOUBLE_EQ(empty.p99, 0);
}

TEST(BenchServeStats, PoissonArrivalsHaveTheRequestedMeanRate) {
  constexpr double kRate = 8;  // requests/s: mean gap 0.125 s
  constexpr int kN = 200000;
  PoissonArrivals arrivals(kRate, /*seed=*/1);
  double prev = 0, sum_sq = 0, last = 0;
  for (int i = 0; i < kN; ++i) {
    const double t = arrivals.Next();
    ASSERT_GE(t, prev);
    const double gap = t - prev;
    sum_sq += gap * gap;
    prev = last = t;
  }
  const double mean_gap = last / kN;
  EXPECT_NEAR(mean_gap, 1 / kRate, 0.01 / kRate);  // within 1 %
  // Exponential gaps: standard deviation == mean.
  const double sd = std::sqrt(sum_sq / kN - mean_gap * mean_gap);
  EXPECT_NEAR(sd, 1 / kRate, 0.02 / kRate);
  // Same seed, same schedule; another seed, another one.
  PoissonArrivals a(kRate, 7), b(kRate, 7), c(kRate, 8);
  const double a1 = a.Next();
  EXPECT_DOUBLE_EQ(a1, b.Next());
  EXPECT_NE(a1, c.Next());
}

TEST(BenchServeStats, ZeroOrInfiniteRateSendsEverythingAtOnce) {
  PoissonArrivals zero(0, 1), inf(INFINITY, 1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(zero.Next(), 0);
    EXPECT_EQ(inf.Next(), 0);
  }
}

TEST(BenchServeStats, LengthDistributions) {
  std::mt19937_64 rng(3);
  StatusOr<LengthDistribution> fixed = LengthDistribution::Parse("128");
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->Sample(rng), 128);
  EXPECT_EQ(LengthDistribution::Parse("fixed:7")->Sample(rng), 7);

  StatusOr<LengthDistribution> uniform = LengthDistribution::Parse("uniform:10:20");
  ASSERT_TRUE(uniform.ok()) << uniform.status().ToString();
  EXPECT_DOUBLE_EQ(uniform->Mean(), 15);
  EXPECT_EQ(uniform->ToString(), "uniform:10:20");
  int lo = 1000, hi = 0;
  double sum = 0;
  for (int i = 0; i < 20000; ++i) {
    const int n = uniform->Sample(rng);
    lo = std::min(lo, n);
    hi = std::max(hi, n);
    sum += n;
  }
  EXPECT_EQ(lo, 10);
  EXPECT_EQ(hi, 20);
  EXPECT_NEAR(sum / 20000, 15, 0.1);

  StatusOr<LengthDistribution> normal = LengthDistribution::Parse("normal:3:10");
  ASSERT_TRUE(normal.ok());
  for (int i = 0; i < 1000; ++i) ASSERT_GE(normal->Sample(rng), 1);

  for (const char* bad : {"", "x", "uniform:5", "uniform:9:3", "uniform:0:3", "normal:10:-1", "poisson:3", "0",
                          "fixed:1:2"}) {
    EXPECT_FALSE(LengthDistribution::Parse(bad).ok()) << bad;
  }
}

// ------------------------------------------------------------------ HTTP pieces

TEST(BenchServeHttp, ParsesUrls) {
  StatusOr<Url> u = ParseUrl("http://127.0.0.1:8080");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->base_path, "");
  u = ParseUrl("http://example.com/api/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "example.com");
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->base_path, "/api");
  u = ParseUrl("http://[::1]:9000");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 9000);
  u = ParseUrl("https://localhost/v1");
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->base_path, "/v1");
  EXPECT_FALSE(ParseUrl("ftp://x:1").ok());
  EXPECT_FALSE(ParseUrl("http://x:abc").ok());
  EXPECT_FALSE(ParseUrl("http://:80").ok());
}

TEST(BenchServeHttp, ParsesResponseHeads) {
  StatusOr<ResponseHead> h =
      ParseResponseHead("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\ntransfer-encoding: Chunked\r\n");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->status, 200);
  EXPECT_TRUE(h->chunked);
  EXPECT_FALSE(h->close);
  EXPECT_EQ(h->content_length, -1);
  EXPECT_EQ(h->content_type, "text/event-stream");
  h = ParseResponseHead("HTTP/1.1 429 Too Many Requests\r\nContent-Length: 17\r\nConnection: close");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->status, 429);
  EXPECT_EQ(h->content_length, 17);
  EXPECT_TRUE(h->close);
  h = ParseResponseHead("HTTP/1.0 200 OK\r\nContent-Length: 2");
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->close);
  EXPECT_FALSE(ParseResponseHead("garbage").ok());
  EXPECT_FALSE(ParseResponseHead("HTTP/1.1 200 OK\r\nContent-Length: -3").ok());
}

constexpr char kChunked[] = "7\r\nhello, \r\n6;ext=1\r\nworld!\r\n0\r\nX-Trailer: 1\r\n\r\n";

TEST(BenchServeHttp, ChunkedDecoderWhole) {
  ChunkedDecoder d;
  std::string out;
  ASSERT_TRUE(d.Feed(kChunked, &out));
  EXPECT_EQ(out, "hello, world!");
  EXPECT_TRUE(d.done());
}

TEST(BenchServeHttp, ChunkedDecoderAcceptsInputSplitAtEveryByte) {
  const std::string input = kChunked;
  for (size_t split = 0; split <= input.size(); ++split) {
    ChunkedDecoder d;
    std::string out;
    ASSERT_TRUE(d.Feed(std::string_view(input).substr(0, split), &out)) << split;
    ASSERT_TRUE(d.Feed(std::string_view(input).substr(split), &out)) << split;
    EXPECT_EQ(out, "hello, world!") << split;
    EXPECT_TRUE(d.done()) << split;
  }
  ChunkedDecoder bytewise;
  std::string out;
  for (char c : input) ASSERT_TRUE(bytewise.Feed(std::string_view(&c, 1), &out));
  EXPECT_EQ(out, "hello, world!");
  EXPECT_TRUE(bytewise.done());
}

TEST(BenchServeHttp, ChunkedDecoderRejectsMalformedInput) {
  ChunkedDecoder bad_size;
  std::string out;
  EXPECT_FALSE(bad_size.Feed("zz\r\nabc\r\n", &out));
  ChunkedDecoder missing_crlf;
  EXPECT_FALSE(missing_crlf.Feed("3\r\nabcX", &out));
  EXPECT_FALSE(missing_crlf.done());
}

// An SSE stream as kvserve and OpenAI send it, with CRLF, a comment, a multi-line event and
// the [DONE] sentinel.
constexpr char kSse[] =
    "data: {\"a\":1}\n\n"
    ": keep-alive comment\r\n\r\n"
    "event: message\r\ndata: {\"b\":2}\r\n\r\n"
    "data:first\ndata: second\n\n"
    "data: [DONE]\r\r";
const std::vector<std::string> kSseEvents = {"{\"a\":1}", "{\"b\":2}", "first\nsecond", "[DONE]"};

std::vector<std::string> FeedAll(SseParser& p, const std::vector<std::string_view>& pieces) {
  std::vector<std::string> events;
  for (std::string_view piece : pieces) p.Feed(piece, [&](std::string_view e) { events.emplace_back(e); });
  return events;
}

TEST(BenchServeHttp, SseParserSplitsEvents) {
  SseParser p;
  EXPECT_EQ(FeedAll(p, {kSse}), kSseEvents);
}

TEST(BenchServeHttp, SseParserAcceptsInputSplitAtEveryByte) {
  const std::string input = kSse;
  for (size_t a = 0; a <= input.size(); ++a) {
    for (size_t b = a; b <= input.size(); b += 7) {
      SseParser p;
      const std::string_view s(input);
      ASSERT_EQ(FeedAll(p, {s.substr(0, a), s.substr(a, b - a), s.substr(b)}), kSseEvents) << a << " " << b;
    }
  }
  SseParser bytewise;
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < input.size(); ++i) bytes.push_back(std::string_view(input).substr(i, 1));
  EXPECT_EQ(FeedAll(bytewise, bytes), kSseEvents);
}

TEST(BenchServeHttp, SseEventsOverChunkedEncodingSplitAnywhere) {
  // Two SSE events sent as three HTTP chunks whose boundaries fall inside the events.
  const std::string body = "data: {\"x\":1}\n\ndata: {\"y\":2}\n\ndata: [DONE]\n\n";
  std::string wire;
  const size_t cuts[] = {0, 9, 21, body.size()};
  for (int i = 0; i < 3; ++i) {
    const size_t len = cuts[i + 1] - cuts[i];
    wire += fmt::format("{:x}\r\n{}\r\n", len, body.substr(cuts[i], len));
  }
  wire += "0\r\n\r\n";
  for (size_t split = 0; split <= wire.size(); ++split) {
    ChunkedDecoder d;
    SseParser p;
    std::vector<std::string> events;
    for (std::string_view part : {std::string_view(wire).substr(0, split), std::string_view(wire).substr(split)}) {
      std::string decoded;
      ASSERT_TRUE(d.Feed(part, &decoded));
      p.Feed(decoded, [&](std::string_view e) { events.emplace_back(e); });
    }
    EXPECT_EQ(events, (std::vector<std::string>{"{\"x\":1}", "{\"y\":2}", "[DONE]"})) << split;
    EXPECT_TRUE(d.done());
  }
}

// ------------------------------------------------------------------ OpenAI events

TEST(BenchServeOpenAi, CompletionChunks) {
  EventInfo e = ParseEvent(
      R"({"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" Lily","logprobs":null,)"
      R"("finish_reason":null}],"usage":null})");
  EXPECT_FALSE(e.malformed);
  EXPECT_EQ(e.content_pieces, 1);
  EXPECT_FALSE(e.finished);
  EXPECT_FALSE(e.completion_tokens);
  EXPECT_FALSE(e.error);

  e = ParseEvent(R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})");
  EXPECT_EQ(e.content_pieces, 0);
  EXPECT_TRUE(e.finished);

  // A text that looks like the keys bench-serve reads is still just text.
  e = ParseEvent(R"({"choices":[{"text":"\"usage\":{\"completion_tokens\":9}, \"error\": 1"}]})");
  EXPECT_EQ(e.content_pieces, 1);
  EXPECT_FALSE(e.completion_tokens);
  EXPECT_FALSE(e.error);
}

TEST(BenchServeOpenAi, ChatChunksAndUsage) {
  EventInfo e = ParseEvent(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]})");
  EXPECT_EQ(e.content_pieces, 1);
  e = ParseEvent(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})");
  EXPECT_EQ(e.content_pieces, 0);
  e = ParseEvent(R"({"choices":[{"index":0,"delta":{"content":null},"logprobs":{"content":[{"token":"x"}]}}]})");
  EXPECT_EQ(e.content_pieces, 0);
  e = ParseEvent(R"({"choices":[],"usage":{"prompt_tokens":19,"completion_tokens":128,"total_tokens":147}})");
  EXPECT_EQ(e.content_pieces, 0);
  ASSERT_TRUE(e.completion_tokens);
  EXPECT_EQ(*e.completion_tokens, 128);
  ASSERT_TRUE(e.prompt_tokens);
  EXPECT_EQ(*e.prompt_tokens, 19);
  // A non-streamed chat reply.
  e = ParseEvent(R"({"choices":[{"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],)"
                 R"("usage":{"prompt_tokens":3,"completion_tokens":2}})");
  EXPECT_EQ(e.content_pieces, 1);
  EXPECT_TRUE(e.finished);
  EXPECT_EQ(*e.completion_tokens, 2);
}

TEST(BenchServeOpenAi, DoneErrorsAndGarbage) {
  EXPECT_TRUE(ParseEvent("[DONE]").done);
  EXPECT_TRUE(ParseEvent("[DONE]\n").done);
  EventInfo e = ParseEvent(R"({"error":{"message":"the forward pass failed","type":"server_error","code":500}})");
  ASSERT_TRUE(e.error);
  EXPECT_EQ(*e.error, "the forward pass failed");
  e = ParseEvent(R"({"error":"plain"})");
  ASSERT_TRUE(e.error);
  EXPECT_EQ(*e.error, "plain");
  EXPECT_FALSE(ParseEvent(R"({"error":null,"choices":[]})").error);
  EXPECT_TRUE(ParseEvent("{\"choices\": [").malformed);
  EXPECT_TRUE(ParseEvent("not json").malformed);
}

TEST(BenchServeOpenAi, RequestBodies) {
  nlohmann::json extra = {{"top_k", 1}, {"temperature", 0.5}};
  RequestSpec spec;
  spec.model = "m";
  spec.prompt = "Once";
  spec.max_tokens = 7;
  nlohmann::json j = nlohmann::json::parse(BuildRequestBody(spec));
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["prompt"], "Once");
  EXPECT_EQ(j["max_tokens"], 7);
  EXPECT_EQ(j["temperature"], 0);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  EXPECT_EQ(j["ignore_eos"], true);

  spec.endpoint = Endpoint::kChat;
  spec.ignore_eos = false;
  spec.stream = false;
  spec.extra_body = &extra;
  j = nlohmann::json::parse(BuildRequestBody(spec));
  EXPECT_FALSE(j.contains("prompt"));
  EXPECT_EQ(j["messages"][0]["role"], "user");
  EXPECT_EQ(j["messages"][0]["content"], "Once");
  EXPECT_FALSE(j.contains("ignore_eos"));
  EXPECT_FALSE(j.contains("stream_options"));
  EXPECT_EQ(j["top_k"], 1);
  EXPECT_EQ(j["temperature"], 0.5);  // --extra-body wins
}

TEST(BenchServeOpenAi, ModelsErrorsAndPrompts) {
  StatusOr<std::string> id = FirstModelId(R"({"object":"list","data":[{"id":"stories260K"},{"id":"b"}]})");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, "stories260K");
  EXPECT_FALSE(FirstModelId(R"({"data":[]})").ok());
  EXPECT_EQ(ErrorMessage(R"({"error":{"message":"queue full"}})"), "queue full");
  EXPECT_EQ(ErrorMessage("Bad\ngateway"), "Bad gateway");
  std::mt19937_64 a(5), b(5);
  const std::string p = WordPrompt(10, a);
  EXPECT_EQ(p, WordPrompt(10, b));
  EXPECT_EQ(std::count(p.begin(), p.end(), ' '), 9);
}

// ------------------------------------------------------------------ run summaries

TEST(BenchServeReport, ThroughputCountsOnlySuccessfulRequests) {
  BenchRun run;
  run.model = "m";
  run.wall_seconds = 2;
  RequestResult a;
  a.ok = true;
  a.ttft_s = 0.1;
  a.e2e_s = 1.1;
  a.output_tokens = 11;  // TPOT (1.1 - 0.1) / 10 = 0.1 s
  a.prompt_tokens = 5;
  a.tokens_from_usage = true;
  a.itl_s = {0.1, 0.1, 0.1};
  RequestResult b = a;
  b.ttft_s = 0.3;
  b.itl_s = {0.2};
  RequestResult failed;
  failed.error_kind = "http_429";
  failed.error = "queue full";
  failed.output_tokens = 99;  // never counted
  run.results = {a, b, failed};
  const BenchSummary s = SummarizeRun(run);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.output_tokens, 22);
  EXPECT_EQ(s.prompt_tokens, 10);
  EXPECT_TRUE(s.tokens_from_usage);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 11);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 1);
  EXPECT_DOUBLE_EQ(s.total_tokens_per_s, 16);
  EXPECT_NEAR(s.ttft_ms.mean, 200, 1e-9);
  EXPECT_EQ(s.itl_ms.count, 4u);
  EXPECT_NEAR(s.itl_ms.mean, 125, 1e-9);
  EXPECT_NEAR(s.tpot_ms.p50, 90, 1e-9);  // (1.1 - 0.1) / 10 and (1.1 - 0.3) / 10
  EXPECT_EQ(s.errors.at("http_429"), 1);
  ASSERT_EQ(s.error_examples.size(), 1u);
  EXPECT_EQ(s.error_examples[0], "http_429: queue full");

  BenchSummary with_roofline = s;
  Roofline bw;
  bw.bandwidth_gb_s = 10;
  ApplyRoofline(bw, 1e8, &with_roofline);  // 100 tok/s roofline
  ASSERT_TRUE(with_roofline.roofline);
  EXPECT_DOUBLE_EQ(with_roofline.roofline->roofline_tok_s, 100);
  EXPECT_NEAR(with_roofline.roofline->stream_decode_tok_s, 1e3 / 90, 1e-9);
  EXPECT_NEAR(with_roofline.roofline->fraction, 1e3 / 90 / 100, 1e-12);
}

}  // namespace loadgen_test
}  // namespace kvserve::bench

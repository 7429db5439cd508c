// Prometheus exposition of kvserve's engine statistics.
//
// EngineMetricsCollector is a prometheus::Collectable that, each time it is collected (a
// scrape), reads ServerContext::engine->GetStats() and turns the snapshot into metric
// families: gauges for occupancy, counters for totals, and the engine's fixed-bucket
// histograms as Prometheus histograms with cumulative buckets. It keeps no state of its own,
// so counters are exactly the engine's. Names are listed in metrics.cpp (issue 5 item 8).
//
// prometheus-cpp 1.0.1's Registry only holds its own Family<> types, so the collector is not
// added to ctx.registry: SerializeMetrics serialises the registry's families
// (anything else a front end registers there) followed by the collector's.
//
// Thread-safe: collection only reads atomics and a stats snapshot.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <string>
#include <vector>

#include "server/api/server_context.h"

namespace kvserve {

class EngineMetricsCollector : public prometheus::Collectable {
 public:
  // REQUIRES: ctx outlives the collector.
  explicit EngineMetricsCollector(const ServerContext* ctx) : ctx_(ctx) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const ServerContext* ctx_;
};

// Registers kvserve's metrics (fed from Engine::GetStats at scrape time) in ctx.registry.
void RegisterMetrics(ServerContext* ctx);
// Text exposition of ctx.registry (the body of GET /metrics).
std::string SerializeMetrics(const ServerContext& ctx);

}  // namespace kvserve

// Prometheus exposition of kvserve's engine statistics.
//
// EngineMetricsCollector is a prometheus::Collectable that, each time it is collected (a
// scrape), reads ServerContext::engine->GetStats() and turns the snapshot into metric
// families: gauges for occupancy, counters for totals, and the engine's fixed-bucket
// histograms as Prometheus histograms with cumulative buckets. It keeps no state of its own,
// so counters are exactly the engine's. Names are listed in metrics.cpp.
//
// kvserve registers no metrics of its own beside the collector (prometheus-cpp 1.0.1's
// Registry only holds its own Family<> types), so there is no registry: SerializeMetrics
// collects and serialises the collector's families.
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

// Text exposition of kvserve's metrics, fed from Engine::GetStats now (the body of GET /metrics;
// empty without an engine).
std::string SerializeMetrics(const ServerContext& ctx);

}  // namespace kvserve

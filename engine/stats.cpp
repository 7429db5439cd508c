#include "engine/stats.h"

#include <algorithm>

namespace kvserve {

Histogram Histogram::Latency() {
  Histogram h;
  h.bounds = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3,
              0.5,   0.75,   1.0,   2.5,  5.0,  10.0, 20.0, 40.0, 60.0};
  h.counts.assign(h.bounds.size() + 1, 0);
  return h;
}

Histogram Histogram::Short() {
  Histogram h;
  h.bounds = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0};
  h.counts.assign(h.bounds.size() + 1, 0);
  return h;
}

void Histogram::Observe(double value) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  ++counts[i];
  sum += value;
  ++count;
}

}  // namespace kvserve

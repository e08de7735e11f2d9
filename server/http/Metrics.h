// The server's Prometheus metrics: vLLM's names for load, counters and request latencies.
#pragma once

#include "runtime/api/EngineApi.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace glm::server {

/// A Prometheus histogram with fixed buckets (upper bounds in seconds).
class Histogram {
public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double seconds);
  /// The family's HELP and TYPE lines, its buckets, sum and count.
  std::string render(const std::string &name, const std::string &help,
                     const std::string &labels) const;

private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
};

/// What one listener's connections did (BoundedServer counts them).
struct ConnectionStats {
  std::atomic<int64_t> open{0};          // connections open now
  std::atomic<int64_t> refusedBusy{0};   // refused: the server had all its connections open
  std::atomic<int64_t> refusedClient{0}; // refused: the client's address had all of its own
  std::atomic<int64_t> timedOut{0};      // requests whose headers or body came too slowly
  std::atomic<int64_t> malformed{0};     // requests refused for their framing, headers or size
};

/// vLLM's buckets for request latencies (end to end and each phase), in seconds.
inline const std::vector<double> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

/// What the server counts. Handlers and token queues update it from any thread; GET /metrics
/// renders it beside the engine's own counts.
struct ServerMetrics {
  std::atomic<int64_t> requestsTotal{0}; // generation requests received
  std::atomic<int64_t> requestsFailed{0};
  std::atomic<int64_t> clientsDisconnected{0};
  std::atomic<int64_t> promptTokens{0};
  ConnectionStats connections; // the API listener's
  ConnectionStats monitor;     // the monitoring listener's (--monitor-port)
  // Request latencies as vLLM names and buckets them (server.md §1.11, §3).
  Histogram timeToFirstToken{{0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                              0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                              20.0,  40.0,  80.0, 160.0, 640.0, 2560.0}};
  Histogram interTokenLatency{{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                               2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}};
  Histogram endToEnd{kRequestLatencyBuckets};
  // A request's phases (vLLM's request_{queue,prefill,decode}_time_seconds): waiting for a
  // slot, then to its first token, then to its end; timed by the token queue as the engine
  // reports them.
  Histogram queueTime{kRequestLatencyBuckets};
  Histogram prefillTime{kRequestLatencyBuckets};
  Histogram decodeTime{kRequestLatencyBuckets};

  /// The Prometheus text of GET /metrics, every series labelled with the served model's name.
  std::string render(const runtime::SchedulerStats &engine, const std::string &modelName) const;
};

} // namespace glm::server

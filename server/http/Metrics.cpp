// The server's Prometheus metrics, rendered in the text exposition format (version 0.0.4).
#include "server/http/Metrics.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace glm::server {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), seconds) -
                                       bounds_.begin());
  ++counts_[i];
  sum_ += seconds;
}

std::string Histogram::render(const std::string &name, const std::string &labels) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = "# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  char le[32];
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    std::snprintf(le, sizeof le, "%g", bounds_[i]);
    out += strCat(name, "_bucket{", labels, ",le=\"", le, "\"} ", cumulative, "\n");
  }
  cumulative += counts_.back();
  out += strCat(name, "_bucket{", labels, ",le=\"+Inf\"} ", cumulative, "\n");
  out += strCat(name, "_sum{", labels, "} ", sum_, "\n");
  out += strCat(name, "_count{", labels, "} ", cumulative, "\n");
  return out;
}

std::string ServerMetrics::render(const runtime::SchedulerStats &engine,
                                  const std::string &modelName) const {
  std::string text;
  auto gauge = [&](const char *metric, const char *kind, int64_t value) {
    text += strCat("# TYPE ", metric, " ", kind, "\n", metric, "{model_name=\"", modelName, "\"} ",
                   value, "\n");
  };
  gauge("vllm:num_requests_running", "gauge", engine.running);
  gauge("vllm:num_requests_waiting", "gauge", engine.waiting);
  gauge("vllm:request_success_total", "counter", engine.finished);
  gauge("vllm:generation_tokens_total", "counter", engine.generatedTokens);
  gauge("vllm:num_preemptions_total", "counter", engine.preemptions);
  gauge("glmc:http_requests_total", "counter", requestsTotal.load());
  gauge("glmc:http_requests_failed_total", "counter", requestsFailed.load());
  gauge("vllm:http_requests_client_disconnected_total", "counter", clientsDisconnected.load());
  gauge("vllm:prompt_tokens_total", "counter", promptTokens.load());
  // One family per line of TYPE, a series per listener (and per refusal reason).
  const std::pair<const char *, const ConnectionStats *> listeners[] = {{"api", &connections},
                                                                        {"monitor", &monitor}};
  auto family = [&](const char *metric, const char *kind,
                    int64_t (*value)(const ConnectionStats &)) {
    text += strCat("# TYPE ", metric, " ", kind, "\n");
    for (const auto &[listener, stats] : listeners) {
      text += strCat(metric, "{model_name=\"", modelName, "\",listener=\"", listener, "\"} ",
                     value(*stats), "\n");
    }
  };
  family("glmc:http_connections", "gauge", [](const ConnectionStats &c) { return c.open.load(); });
  text += "# TYPE glmc:http_connections_refused_total counter\n";
  for (const auto &[listener, stats] : listeners) {
    for (const auto &[reason, count] :
         {std::pair{"busy", stats->refusedBusy.load()}, {"client", stats->refusedClient.load()}}) {
      text += strCat("glmc:http_connections_refused_total{model_name=\"", modelName,
                     "\",listener=\"", listener, "\",reason=\"", reason, "\"} ", count, "\n");
    }
  }
  family("glmc:http_request_timeouts_total", "counter",
         [](const ConnectionStats &c) { return c.timedOut.load(); });
  family("glmc:http_requests_malformed_total", "counter",
         [](const ConnectionStats &c) { return c.malformed.load(); });
  const std::string labels = "model_name=\"" + modelName + "\"";
  text += timeToFirstToken.render("vllm:time_to_first_token_seconds", labels);
  text += interTokenLatency.render("vllm:inter_token_latency_seconds", labels);
  text += endToEnd.render("vllm:e2e_request_latency_seconds", labels);
  return text;
}

} // namespace glm::server

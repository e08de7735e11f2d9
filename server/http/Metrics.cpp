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

std::string Histogram::render(const std::string &name, const std::string &help,
                              const std::string &labels) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = strCat("# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n");
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
  // Every family opens with its HELP and TYPE lines (Prometheus' text format 0.0.4).
  auto header = [&](const char *metric, const char *kind, const char *help) {
    text += strCat("# HELP ", metric, " ", help, "\n# TYPE ", metric, " ", kind, "\n");
  };
  auto gauge = [&](const char *metric, const char *kind, const char *help, auto value) {
    header(metric, kind, help);
    text += strCat(metric, "{model_name=\"", modelName, "\"} ", value, "\n");
  };
  gauge("vllm:num_requests_running", "gauge", "Requests running on the engine now.",
        engine.running);
  gauge("vllm:num_requests_waiting", "gauge", "Requests waiting for an engine slot.",
        engine.waiting);
  char usage[32];
  std::snprintf(usage, sizeof usage, "%.6g", engine.kvCacheUsage);
  gauge("vllm:kv_cache_usage_perc", "gauge",
        "Fraction of the state pool's pages in use (1 = full; pages only kept prompt states "
        "hold count as free).",
        usage);
  gauge("glmc:pool_tokens", "gauge", "The state pool's size in tokens (0 without a pool).",
        engine.poolTokens);
  gauge("glmc:pool_free_tokens", "gauge",
        "Tokens of the state pool no running sequence holds (pages only kept prompt states "
        "hold count as free: they give way to a new request).",
        engine.poolFreeTokens);
  gauge("vllm:request_success_total", "counter", "Requests the engine finished.", engine.finished);
  gauge("vllm:generation_tokens_total", "counter", "Tokens generated.", engine.generatedTokens);
  gauge("vllm:num_preemptions_total", "counter",
        "Sequences that gave their state back to be recomputed.", engine.preemptions);
  gauge("vllm:prefix_cache_queries_total", "counter",
        "Prompt tokens looked up among the kept prompt states.", engine.prefixQueryTokens);
  gauge("vllm:prefix_cache_hits_total", "counter",
        "Prompt tokens resumed from a kept state instead of prefilled.", engine.prefixHitTokens);
  gauge("glmc:kept_prompt_states", "gauge", "Prompt states kept for reuse now.", engine.keptStates);
  // Speculative decoding as vLLM counts it; the tokens a verify round yields on average are
  // 1 + accepted / drafts.
  gauge("vllm:spec_decode_num_drafts_total", "counter",
        "Verify rounds of a sequence that carried drafted tokens.", engine.specDrafts);
  gauge("vllm:spec_decode_num_draft_tokens_total", "counter", "Tokens drafted.",
        engine.specDraftTokens);
  gauge("vllm:spec_decode_num_accepted_tokens_total", "counter",
        "Drafted tokens accepted (each equal to the token the request's sampling drew there).",
        engine.specAcceptedTokens);
  // vLLM's form: one counter family, a series per position in the round (0: the first draft).
  header("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Drafted tokens accepted, by their position in the verify round.");
  for (size_t position = 0; position < engine.specAcceptedPerPosition.size(); ++position) {
    text +=
        strCat("vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"", modelName,
               "\",position=\"", position, "\"} ", engine.specAcceptedPerPosition[position], "\n");
  }
  gauge("glmc:http_requests_total", "counter", "Generation requests received.",
        requestsTotal.load());
  gauge("glmc:http_requests_failed_total", "counter",
        "Generation requests the engine failed or could not take.", requestsFailed.load());
  gauge("vllm:http_requests_client_disconnected_total", "counter",
        "Requests whose client went away before the reply ended.", clientsDisconnected.load());
  gauge("vllm:prompt_tokens_total", "counter", "Prompt tokens of the requests submitted.",
        promptTokens.load());
  // One family per header, a series per listener (and per refusal reason).
  const std::pair<const char *, const ConnectionStats *> listeners[] = {{"api", &connections},
                                                                        {"monitor", &monitor}};
  auto family = [&](const char *metric, const char *kind, const char *help,
                    int64_t (*value)(const ConnectionStats &)) {
    header(metric, kind, help);
    for (const auto &[listener, stats] : listeners) {
      text += strCat(metric, "{model_name=\"", modelName, "\",listener=\"", listener, "\"} ",
                     value(*stats), "\n");
    }
  };
  family("glmc:http_connections", "gauge", "Connections open now, per listener.",
         [](const ConnectionStats &c) { return c.open.load(); });
  header("glmc:http_connections_refused_total", "counter",
         "Connections refused at once: the server (busy) or the client's address (client) had "
         "all its connections open.");
  for (const auto &[listener, stats] : listeners) {
    for (const auto &[reason, count] :
         {std::pair{"busy", stats->refusedBusy.load()}, {"client", stats->refusedClient.load()}}) {
      text += strCat("glmc:http_connections_refused_total{model_name=\"", modelName,
                     "\",listener=\"", listener, "\",reason=\"", reason, "\"} ", count, "\n");
    }
  }
  family("glmc:http_request_timeouts_total", "counter",
         "Requests whose headers or body came too slowly.",
         [](const ConnectionStats &c) { return c.timedOut.load(); });
  family("glmc:http_requests_malformed_total", "counter",
         "Requests refused for their framing, headers or size.",
         [](const ConnectionStats &c) { return c.malformed.load(); });
  const std::string labels = "model_name=\"" + modelName + "\"";
  text += timeToFirstToken.render("vllm:time_to_first_token_seconds",
                                  "Time from a request's arrival to its first token.", labels);
  text += interTokenLatency.render("vllm:inter_token_latency_seconds",
                                   "Time between consecutive tokens of a request.", labels);
  text += endToEnd.render("vllm:e2e_request_latency_seconds",
                          "Time from a request's arrival to its last token.", labels);
  text += queueTime.render("vllm:request_queue_time_seconds",
                           "Time a request waited for an engine slot.", labels);
  text += prefillTime.render("vllm:request_prefill_time_seconds",
                             "Time from a request's scheduling to its first token.", labels);
  text += decodeTime.render("vllm:request_decode_time_seconds",
                            "Time from a request's first token to its last.", labels);
  return text;
}

} // namespace glm::server

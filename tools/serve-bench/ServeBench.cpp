// glmc-serve-bench: measures an OpenAI-compatible server the way `vllm bench serve` does, so
// that glmc's numbers sit beside vLLM's (server.md §3.3). Streamed chat requests with
// include_usage and ignore_eos, all sent at once behind a concurrency limit, at each level asked;
// greedy unless --temperature asks the server to sample.
//
//   TTFT  send → first chunk with choices      ITL   gaps between later chunks with choices
//   E2EL  send → last chunk with choices       TPOT  (E2EL − TTFT) / (output tokens − 1)
//
// Output tokens come from the usage chunk. Results print under vLLM's labels and, with --json,
// are saved with vLLM's keys, one object per concurrency level.
//
// Lengths can vary as in vLLM's random dataset: with --range-ratio R, each request's output
// length, and its prompt length when --input-words N is given, is drawn uniformly from
// [L(1-R), L(1+R)] (seeded). A mixed workload is what shows how prefills stall running streams.
//
// With --second-turn N each request is a conversation of two turns: once the first reply ends,
// the same client sends the first prompt, the reply and N more words, the way an agent resends
// its history; the second turns' TTFT and cached prompt tokens are reported apart (a server that
// keeps prompt states resumes them). With --probe PATH a thread GETs PATH (e.g. /health) every
// 20 ms while a level runs and reports how long the answers took: what monitoring sees under load.
//
// Speculative decoding: /metrics is read before and after each level, and the deltas of vLLM's
// spec_decode counters are reported (the server's counts, so other clients' traffic counts too):
// drafts (verify rounds that carried drafts), draft tokens, accepted tokens, and the tokens a
// verify round yields on average, 1 + accepted / drafts. --no-draft sends glmc's `"draft": false`
// in every request: the serial reference, to set against the drafted run.
#include "tools/glmc/CommandLine.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct Options {
  std::string host = "127.0.0.1";
  int port = 8888;
  std::string model;
  std::string apiKey;
  std::string prompt;
  int64_t inputWords = 0; // 0: the prompt as given
  int64_t outputTokens = 128;
  double rangeRatio = 0;
  double temperature = 0; // greedy, as vLLM's benchmark asks by default
  uint64_t seed = 0;
  int64_t requests = 0; // per level; 0 means 4 × the level
  std::vector<int64_t> levels{1, 8};
  int64_t secondTurnWords = 0; // 0: one turn a request
  std::string probe;           // empty: no probe
  bool noDraft = false;        // send "draft": false (no speculative drafts)
};

struct RequestResult {
  bool ok = false;
  std::string error;
  double ttft = 0, e2el = 0;
  std::vector<double> itl;
  int64_t promptTokens = 0, outputTokens = 0, cachedTokens = 0;
  std::string reply; // the reply's content, which a second turn resends
};

/// What one request asks for.
struct RequestShape {
  std::string prompt;
  int64_t outputTokens = 0;
  std::string followUp; // the second turn's new words (--second-turn)
};

/// The requests of one level, drawn from a generator seeded by --seed and the level.
std::vector<RequestShape> makeShapes(const Options &o, int64_t count, int64_t level) {
  std::mt19937_64 rng(o.seed * 1000003u + static_cast<uint64_t>(level));
  auto draw = [&](int64_t base) {
    const auto lo =
        static_cast<int64_t>(std::floor(static_cast<double>(base) * (1 - o.rangeRatio)));
    const auto hi = static_cast<int64_t>(std::ceil(static_cast<double>(base) * (1 + o.rangeRatio)));
    return std::uniform_int_distribution<int64_t>(std::max<int64_t>(lo, 1),
                                                  std::max<int64_t>(hi, 1))(rng);
  };
  static const char *const kWords[] = {"model", "tensor", "parallel", "expert", "token",
                                       "cache", "kernel", "memory",   "stream", "layer"};
  auto words = [&](int64_t n) {
    std::string text;
    for (int64_t w = n; w > 0; --w) {
      text += kWords[rng() % std::size(kWords)];
      text += w > 1 ? " " : ".";
    }
    return text;
  };
  std::vector<RequestShape> shapes(static_cast<size_t>(count));
  for (RequestShape &shape : shapes) {
    shape.prompt = o.inputWords > 0 ? words(draw(o.inputWords)) : o.prompt;
    shape.outputTokens = draw(o.outputTokens);
    if (o.secondTurnWords > 0) {
      shape.followUp = words(o.secondTurnWords);
    }
  }
  return shapes;
}

/// One streamed request, timed at each SSE event's arrival.
RequestResult runOne(const Options &o, const Json &messages, int64_t outputTokens) {
  RequestResult r;
  Json body = {{"model", o.model},
               {"messages", messages},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"max_completion_tokens", outputTokens},
               {"ignore_eos", true},
               {"temperature", o.temperature}};
  if (o.noDraft) {
    body["draft"] = false;
  }
  httplib::Client client(o.host, o.port);
  client.set_read_timeout(600, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  if (!o.apiKey.empty()) {
    req.set_header("Authorization", "Bearer " + o.apiKey);
  }
  std::string pending;
  Clock::time_point last;
  const Clock::time_point start = Clock::now();
  bool sawChoices = false;
  req.content_receiver = [&](const char *data, size_t size, uint64_t, uint64_t) {
    const Clock::time_point now = Clock::now();
    pending.append(data, size);
    size_t end;
    while ((end = pending.find("\n\n")) != std::string::npos) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") {
        continue;
      }
      Json chunk = Json::parse(event.substr(6), nullptr, false);
      if (chunk.is_discarded()) {
        r.error = "a stream event is not JSON: " + event.substr(0, 120);
        return false;
      }
      if (chunk.contains("error")) {
        r.error = chunk["error"].value("message", "error event");
        return false;
      }
      if (chunk.contains("choices") && !chunk["choices"].empty()) {
        if (sawChoices) {
          r.itl.push_back(std::chrono::duration<double>(now - last).count());
        } else {
          r.ttft = std::chrono::duration<double>(now - start).count();
          sawChoices = true;
        }
        last = now;
        const Json &delta = chunk["choices"][0].value("delta", Json::object());
        if (delta.contains("content") && delta["content"].is_string()) {
          r.reply += delta["content"].get<std::string>();
        }
      } else if (chunk.contains("usage") && chunk["usage"].is_object()) {
        r.promptTokens = chunk["usage"].value("prompt_tokens", int64_t{0});
        r.outputTokens = chunk["usage"].value("completion_tokens", int64_t{0});
        const Json &details = chunk["usage"].value("prompt_tokens_details", Json::object());
        if (details.is_object()) {
          r.cachedTokens = details.value("cached_tokens", int64_t{0});
        }
      }
    }
    return true;
  };
  httplib::Result res = client.send(req);
  if (!res) {
    if (r.error.empty()) {
      r.error = "request failed: " + httplib::to_string(res.error());
    }
    return r;
  }
  if (res->status != 200) {
    r.error = "HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 200);
    return r;
  }
  r.e2el = std::chrono::duration<double>(last - start).count();
  r.ok = sawChoices && r.error.empty();
  if (!sawChoices && r.error.empty()) {
    r.error = "the stream carried no choices";
  }
  return r;
}

struct Summary {
  double mean = 0, median = 0, stdev = 0, p99 = 0;
};

/// vLLM's statistics: numpy mean, median, population std and linear-interpolated percentile.
Summary summarise(std::vector<double> v) {
  Summary s;
  if (v.empty()) {
    return s;
  }
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
  double sq = 0;
  for (double x : v) {
    sq += (x - s.mean) * (x - s.mean);
  }
  s.stdev = std::sqrt(sq / n);
  auto percentile = [&](double p) {
    const double pos = p / 100.0 * (n - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  s.median = percentile(50);
  s.p99 = percentile(99);
  return s;
}

/// Adds vLLM's mean_/median_/std_/p99_<name>_ms keys for `values` (in ms).
void addSummary(Json &out, const std::string &name, const std::vector<double> &values) {
  const Summary s = summarise(values);
  out["mean_" + name + "_ms"] = s.mean;
  out["median_" + name + "_ms"] = s.median;
  out["std_" + name + "_ms"] = s.stdev;
  out["p99_" + name + "_ms"] = s.p99;
}

/// GETs `path` every 20 ms until `stop`, one connection kept alive; each answer's latency in ms.
std::vector<double> probe(const Options &o, const std::string &path, const std::atomic<bool> &stop,
                          int64_t &failures) {
  std::vector<double> latencies;
  httplib::Client client(o.host, o.port);
  client.set_read_timeout(60, 0);
  while (!stop) {
    const Clock::time_point start = Clock::now();
    httplib::Result res = client.Get(path);
    if (res && res->status == 200) {
      latencies.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    } else {
      ++failures;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return latencies;
}

/// The server's speculative-decoding counters (vLLM's spec_decode_* families), each summed over
/// its series; acceptedPerPosition[i] is the series with position="i".
struct SpecCounters {
  double drafts = 0, draftTokens = 0, accepted = 0;
  std::vector<double> acceptedPerPosition;
};

/// The counters in a Prometheus text, or nullopt when it has no drafts family (a server without
/// speculative decoding).
std::optional<SpecCounters> parseSpecCounters(const std::string &text) {
  SpecCounters c;
  bool found = false;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') {
      continue;
    }
    const size_t nameEnd = line.find_first_of("{ ");
    const size_t valueStart = line.rfind(' ');
    if (nameEnd == std::string::npos || valueStart == std::string::npos) {
      continue;
    }
    const std::string name = line.substr(0, nameEnd);
    char *end = nullptr;
    const double value = std::strtod(line.c_str() + valueStart + 1, &end);
    if (end == line.c_str() + valueStart + 1) {
      continue;
    }
    if (name == "vllm:spec_decode_num_drafts_total") {
      c.drafts += value;
      found = true;
    } else if (name == "vllm:spec_decode_num_draft_tokens_total") {
      c.draftTokens += value;
    } else if (name == "vllm:spec_decode_num_accepted_tokens_total") {
      c.accepted += value;
    } else if (name == "vllm:spec_decode_num_accepted_tokens_per_pos_total") {
      const size_t label = line.find("position=\"", nameEnd);
      if (label == std::string::npos || label > valueStart) {
        continue;
      }
      const long position = std::strtol(line.c_str() + label + 10, &end, 10);
      if (*end != '"' || position < 0 || position > 1024) {
        continue;
      }
      if (c.acceptedPerPosition.size() <= static_cast<size_t>(position)) {
        c.acceptedPerPosition.resize(static_cast<size_t>(position) + 1, 0.0);
      }
      c.acceptedPerPosition[static_cast<size_t>(position)] += value;
    }
  }
  return found ? std::optional<SpecCounters>(c) : std::nullopt;
}

/// GET /metrics, its speculative-decoding counters; nullopt (after saying why on stderr) when
/// they cannot be read, so that a server without them is still measured.
std::optional<SpecCounters> readSpecCounters(const Options &o) {
  httplib::Client client(o.host, o.port);
  client.set_read_timeout(60, 0);
  httplib::Headers headers;
  if (!o.apiKey.empty()) {
    headers.emplace("Authorization", "Bearer " + o.apiKey);
  }
  httplib::Result res = client.Get("/metrics", headers);
  if (!res || res->status != 200) {
    std::fprintf(stderr, "glmc-serve-bench: speculative decoding not reported: GET /metrics %s\n",
                 res ? ("answered HTTP " + std::to_string(res->status)).c_str()
                     : ("failed: " + httplib::to_string(res.error())).c_str());
    return std::nullopt;
  }
  std::optional<SpecCounters> counters = parseSpecCounters(res->body);
  if (!counters) {
    std::fprintf(stderr, "glmc-serve-bench: speculative decoding not reported: /metrics has no "
                         "vllm:spec_decode_num_drafts_total\n");
  }
  return counters;
}

/// The level's speculative decoding, from the counters before and after it: the raw deltas
/// under vLLM's bench keys, spec_accepted_tokens_per_round = 1 + accepted / drafts (vLLM's
/// acceptance length, under both names), the acceptance rate (accepted / drafted, in %) and
/// each position's acceptance (accepted there / drafts). The ratios are null without drafts.
void addSpecDeltas(Json &out, const SpecCounters &before, const SpecCounters &after) {
  const auto drafts = static_cast<int64_t>(std::llround(after.drafts - before.drafts));
  const auto draftTokens =
      static_cast<int64_t>(std::llround(after.draftTokens - before.draftTokens));
  const auto accepted = static_cast<int64_t>(std::llround(after.accepted - before.accepted));
  out["spec_decode_num_drafts"] = drafts;
  out["spec_decode_draft_tokens"] = draftTokens;
  out["spec_decode_accepted_tokens"] = accepted;
  Json perRound = nullptr, rate = nullptr, perPosition = Json::array();
  if (drafts > 0) {
    perRound = 1.0 + static_cast<double>(accepted) / static_cast<double>(drafts);
    for (size_t i = 0; i < after.acceptedPerPosition.size(); ++i) {
      const double was = i < before.acceptedPerPosition.size() ? before.acceptedPerPosition[i] : 0;
      perPosition.push_back((after.acceptedPerPosition[i] - was) / static_cast<double>(drafts));
    }
  }
  if (draftTokens > 0) {
    rate = 100.0 * static_cast<double>(accepted) / static_cast<double>(draftTokens);
  }
  out["spec_accepted_tokens_per_round"] = perRound;
  out["spec_decode_acceptance_length"] = perRound;
  out["spec_decode_acceptance_rate"] = rate;
  out["spec_decode_per_position_acceptance_rates"] = perPosition;
}

Json runLevel(const Options &o, int64_t concurrency) {
  const int64_t total = o.requests > 0 ? o.requests : 4 * concurrency;
  const std::vector<RequestShape> shapes = makeShapes(o, total, concurrency);
  std::vector<RequestResult> results(static_cast<size_t>(total));
  std::vector<RequestResult> second(o.secondTurnWords > 0 ? static_cast<size_t>(total) : 0);
  std::atomic<int64_t> next{0};
  std::atomic<bool> stopProbe{false};
  std::vector<double> probed;
  int64_t probeFailures = 0;
  std::thread prober;
  const std::optional<SpecCounters> specBefore = readSpecCounters(o);
  if (!o.probe.empty()) {
    prober = std::thread([&] { probed = probe(o, o.probe, stopProbe, probeFailures); });
  }
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> workers;
  for (int64_t w = 0; w < std::min(concurrency, total); ++w) {
    workers.emplace_back([&] {
      for (int64_t i; (i = next++) < total;) {
        const RequestShape &shape = shapes[static_cast<size_t>(i)];
        Json messages = {{{"role", "user"}, {"content", shape.prompt}}};
        RequestResult &first = results[static_cast<size_t>(i)];
        first = runOne(o, messages, shape.outputTokens);
        if (!second.empty() && first.ok) {
          messages.push_back({{"role", "assistant"}, {"content", first.reply}});
          messages.push_back({{"role", "user"}, {"content", shape.followUp}});
          second[static_cast<size_t>(i)] = runOne(o, messages, shape.outputTokens);
        }
      }
    });
  }
  for (std::thread &t : workers) {
    t.join();
  }
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();
  stopProbe = true;
  if (prober.joinable()) {
    prober.join();
  }
  const std::optional<SpecCounters> specAfter = specBefore ? readSpecCounters(o) : std::nullopt;

  std::vector<double> ttft, tpot, itl, e2el;
  int64_t completed = 0, inputTokens = 0, outputTokens = 0;
  for (const RequestResult &r : results) {
    if (!r.ok) {
      std::fprintf(stderr, "glmc-serve-bench: %s\n", r.error.c_str());
      continue;
    }
    ++completed;
    inputTokens += r.promptTokens;
    outputTokens += r.outputTokens;
    ttft.push_back(r.ttft * 1e3);
    e2el.push_back(r.e2el * 1e3);
    for (double gap : r.itl) {
      itl.push_back(gap * 1e3);
    }
    if (r.outputTokens > 1) {
      tpot.push_back((r.e2el - r.ttft) * 1e3 / static_cast<double>(r.outputTokens - 1));
    }
  }
  std::vector<double> secondTtft;
  int64_t secondFailed = 0, secondPrompt = 0, secondCached = 0;
  for (size_t i = 0; i < second.size(); ++i) {
    const RequestResult &r = second[i];
    if (!r.ok) {
      // A first turn that failed was counted above; its second turn never ran.
      if (results[i].ok) {
        ++secondFailed;
        std::fprintf(stderr, "glmc-serve-bench: second turn: %s\n", r.error.c_str());
      }
      continue;
    }
    secondTtft.push_back(r.ttft * 1e3);
    secondPrompt += r.promptTokens;
    secondCached += r.cachedTokens;
    outputTokens += r.outputTokens;
    inputTokens += r.promptTokens;
  }
  Json out = {
      {"max_concurrency", concurrency},
      {"draft", !o.noDraft},
      {"num_prompts", total},
      {"completed", completed},
      {"failed", total - completed + secondFailed},
      {"duration", duration},
      {"total_input_tokens", inputTokens},
      {"total_output_tokens", outputTokens},
      {"request_throughput", static_cast<double>(completed) / duration},
      {"output_throughput", static_cast<double>(outputTokens) / duration},
      {"total_token_throughput", static_cast<double>(inputTokens + outputTokens) / duration}};
  addSummary(out, "ttft", ttft);
  addSummary(out, "tpot", tpot);
  addSummary(out, "itl", itl);
  addSummary(out, "e2el", e2el);
  if (!second.empty()) {
    addSummary(out, "second_turn_ttft", secondTtft);
    out["second_turn_prompt_tokens"] = secondPrompt;
    out["second_turn_cached_tokens"] = secondCached;
  }
  if (!o.probe.empty()) {
    addSummary(out, "probe", probed);
    out["max_probe_ms"] = probed.empty() ? 0.0 : *std::max_element(probed.begin(), probed.end());
    out["probe_answers"] = static_cast<int64_t>(probed.size());
    out["probe_failures"] = probeFailures;
  }
  if (specBefore && specAfter) {
    addSpecDeltas(out, *specBefore, *specAfter);
  }
  return out;
}

void printLevel(const Json &r) {
  auto line = [](const char *label, double value) { std::printf("%-40s %-10.2f\n", label, value); };
  auto count = [](const char *label, int64_t value) {
    std::printf("%-40s %-10lld\n", label, static_cast<long long>(value));
  };
  std::printf("============ Serving Benchmark Result ============\n");
  count("Maximum request concurrency:", r["max_concurrency"]);
  count("Successful requests:", r["completed"]);
  count("Failed requests:", r["failed"]);
  line("Benchmark duration (s):", r["duration"]);
  count("Total input tokens:", r["total_input_tokens"]);
  count("Total generated tokens:", r["total_output_tokens"]);
  line("Request throughput (req/s):", r["request_throughput"]);
  line("Output token throughput (tok/s):", r["output_throughput"]);
  line("Total token throughput (tok/s):", r["total_token_throughput"]);
  const std::pair<const char *, const char *> sections[] = {
      {"ttft", "Time to First Token"},
      {"tpot", "Time per Output Token (excl. 1st token)"},
      {"itl", "Inter-token Latency"},
      {"e2el", "End-to-end Latency"}};
  for (const auto &[key, title] : sections) {
    std::printf("-%s-\n", title);
    char upper[8] = {};
    for (size_t i = 0; key[i] != '\0' && i + 1 < sizeof upper; ++i) {
      upper[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(key[i])));
    }
    const std::string k = key;
    for (const char *stat : {"Mean", "Median", "P99"}) {
      char label[64];
      std::snprintf(label, sizeof label, "%s %s (ms):", stat, upper);
      std::string field = std::string(stat) + "_" + k + "_ms";
      std::transform(field.begin(), field.end(), field.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      line(label, r[field]);
    }
  }
  if (r.contains("median_second_turn_ttft_ms")) {
    std::printf("-Second turn-\n");
    line("Mean TTFT (ms):", r["mean_second_turn_ttft_ms"]);
    line("Median TTFT (ms):", r["median_second_turn_ttft_ms"]);
    line("P99 TTFT (ms):", r["p99_second_turn_ttft_ms"]);
    count("Prompt tokens:", r["second_turn_prompt_tokens"]);
    count("Cached prompt tokens:", r["second_turn_cached_tokens"]);
  }
  if (r.contains("median_probe_ms")) {
    std::printf("-Probe-\n");
    count("Answers:", r["probe_answers"]);
    count("Failures:", r["probe_failures"]);
    line("Median latency (ms):", r["median_probe_ms"]);
    line("P99 latency (ms):", r["p99_probe_ms"]);
    line("Max latency (ms):", r["max_probe_ms"]);
  }
  if (r.contains("spec_decode_num_drafts")) {
    std::printf("-Speculative Decoding%s-\n", r["draft"].get<bool>() ? "" : " (--no-draft)");
    count("Drafts:", r["spec_decode_num_drafts"]);
    count("Draft tokens:", r["spec_decode_draft_tokens"]);
    count("Accepted tokens:", r["spec_decode_accepted_tokens"]);
    if (!r["spec_accepted_tokens_per_round"].is_null()) {
      line("Tokens per verify round:", r["spec_accepted_tokens_per_round"]);
    }
    if (!r["spec_decode_acceptance_rate"].is_null()) {
      line("Acceptance rate (%):", r["spec_decode_acceptance_rate"]);
    }
    const Json &positions = r["spec_decode_per_position_acceptance_rates"];
    for (size_t i = 0; i < positions.size(); ++i) {
      char label[64];
      std::snprintf(label, sizeof label, "Accepted at position %zu (%%):", i);
      line(label, 100.0 * positions[i].get<double>());
    }
  }
  std::printf("==================================================\n");
}

int fail(const std::string &message) {
  std::fprintf(stderr, "glmc-serve-bench: %s\n", message.c_str());
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  glm::tools::CommandLine cl("glmc-serve-bench", "--model NAME [options]",
                             "Streams chat completions to a running server at each concurrency "
                             "level and reports vLLM's\nserving metrics.");
  cl.option("model", "NAME", "the served model name")
      .option("host", "H", "the server's address (default 127.0.0.1)")
      .option("port", "P", "the server's port (default 8888)")
      .option("api-key", "K", "the server's --api-key")
      .option("prompt", "TEXT", "the prompt every request sends")
      .option("input-words", "N", "random prompts of N words instead")
      .option("range-ratio", "R",
              "lengths drawn from [(1-R) x, (1+R) x], R in 0..1 (vLLM's random)")
      .option("output-tokens", "N", "tokens each request generates (default 128)")
      .option("seed", "S", "the random prompts' seed")
      .option("temperature", "T", "sampling temperature, 0..2 (default 0)")
      .option("concurrency", "C,...", "concurrency levels (default 1,8)")
      .option("requests", "N", "requests per level (default 4 x concurrency)")
      .option("second-turn", "N",
              "each request is two turns: the reply and N more words are sent again")
      .option("probe", "PATH", "GET PATH (e.g. /health) every 20 ms while a level runs")
      .flag("no-draft", "send \"draft\": false: no speculative drafts (the serial reference)")
      .option("json", "OUT", "also write the results as JSON");
  if (std::optional<int> exit = cl.parseOrExit(std::vector<std::string>(argv + 1, argv + argc))) {
    return *exit;
  }
  Options o;
  if (!cl.get("model")) {
    return fail("--model NAME is required (the served model name)");
  }
  o.model = *cl.get("model");
  o.host = cl.get("host").value_or(o.host);
  o.apiKey = cl.get("api-key").value_or("");
  o.prompt = cl.get("prompt").value_or(
      "Explain how tensor parallelism splits a transformer's attention and MLP across GPUs.");
  auto port = cl.getInt("port", 1, 65535);
  auto outputTokens = cl.getInt("output-tokens", 1, 1 << 20);
  auto requests = cl.getInt("requests", 1, 1 << 20);
  auto inputWords = cl.getInt("input-words", 1, 1 << 20);
  auto seed = cl.getInt("seed", 0, std::numeric_limits<int32_t>::max());
  auto secondTurn = cl.getInt("second-turn", 1, 1 << 20);
  for (auto *v : {&port, &outputTokens, &requests, &inputWords, &seed, &secondTurn}) {
    if (!v->ok()) {
      return fail(v->status().message());
    }
  }
  o.port = static_cast<int>(port->value_or(o.port));
  o.outputTokens = outputTokens->value_or(o.outputTokens);
  o.requests = requests->value_or(0);
  o.inputWords = inputWords->value_or(0);
  o.seed = static_cast<uint64_t>(seed->value_or(0));
  o.secondTurnWords = secondTurn->value_or(0);
  o.probe = cl.get("probe").value_or("");
  o.noDraft = cl.has("no-draft");
  if (!o.probe.empty() && o.probe[0] != '/') {
    return fail("--probe wants a path that starts with '/', not '" + o.probe + "'");
  }
  if (std::optional<std::string> ratio = cl.get("range-ratio")) {
    char *end = nullptr;
    o.rangeRatio = std::strtod(ratio->c_str(), &end);
    if (ratio->empty() || *end != '\0' || !(o.rangeRatio >= 0 && o.rangeRatio < 1)) {
      return fail("--range-ratio wants a number in [0, 1), not '" + *ratio + "'");
    }
  }
  if (std::optional<std::string> temperature = cl.get("temperature")) {
    // Above 0 the server samples, which is what clients that leave it at OpenAI's default get.
    char *end = nullptr;
    o.temperature = std::strtod(temperature->c_str(), &end);
    if (temperature->empty() || *end != '\0' || !(o.temperature >= 0 && o.temperature <= 2)) {
      return fail("--temperature wants a number in [0, 2], not '" + *temperature + "'");
    }
  }
  if (std::optional<std::string> levels = cl.get("concurrency")) {
    o.levels.clear();
    std::stringstream in(*levels);
    for (std::string item; std::getline(in, item, ',');) {
      char *end = nullptr;
      const long long level = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || level < 1 || level > 4096) {
        return fail("--concurrency wants a comma-separated list of levels in [1, 4096], not '" +
                    *levels + "'");
      }
      o.levels.push_back(level);
    }
  }
  Json all = Json::array();
  for (int64_t level : o.levels) {
    Json r = runLevel(o, level);
    printLevel(r);
    all.push_back(r);
  }
  if (std::optional<std::string> path = cl.get("json")) {
    std::ofstream out(*path);
    out << all.dump(2) << "\n";
    if (!out) {
      return fail("cannot write " + *path);
    }
  }
  for (const Json &r : all) {
    if (r["failed"].get<int64_t>() != 0) {
      return 1;
    }
  }
  return 0;
}

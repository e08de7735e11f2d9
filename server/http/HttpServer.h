// The OpenAI-compatible HTTP server (cpp-httplib): the routes, auth, limits and graceful stop.
#pragma once

#include "base/Status.h"
#include "runtime/api/EngineApi.h"
#include "server/http/BoundedServer.h"
#include "server/http/PreparedRequest.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace glm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8888;                  // 0: any free port (tests)
  std::vector<std::string> apiKeys; // empty: no authentication
  std::vector<std::string> servedNames = {"glm"};
  int64_t maxContext = 0; // tokens a request may span (prompt + output)
  size_t maxBodyBytes = 32u << 20;
  /// The API listener's bounds (its maxBodyBytes is maxBodyBytes above), the bytes of bodies it
  /// holds at once included.
  ConnectionLimits connections;
  /// Requests whose prompt is built at once (parsed, rendered, counted): the rest wait their turn
  /// holding only their body. A maximal body costs about five times its size while its prompt
  /// is built (docs/performance.md), so this with connections.maxBodyMemory bounds what request
  /// bodies cost the server. 0: as many as the cores, 2 to 4.
  int maxPreparing = 0;
  /// A second listener serving only /health and /metrics, with connections of its own, so that
  /// neither generation nor clients holding the API's connections can keep a probe waiting.
  /// -1: none; 0: any free port (tests).
  int monitorPort = -1;
  std::string monitorHost = "127.0.0.1";
  /// /metrics without the API key even when one is set (for scrapers that hold none).
  bool metricsOpen = false;
  /// The responses /v1/responses keeps for GET and previous_response_id (store: true), in count
  /// and bytes (their JSON); the least recently used go first.
  size_t maxStoredResponses = 1024;
  size_t maxStoredResponseBytes = 64u << 20;
};

class HttpServer {
public:
  HttpServer(ServerOptions options, runtime::EngineApi &engine, ServedModel model);
  ~HttpServer();

  /// Binds the port (SO_REUSEADDR only, so a second server on the port fails instead of sharing
  /// it), and the monitoring port if any. Returns the API's bound port.
  Expected<int> bind();
  /// The monitoring listener's bound port (after bind()); -1 when there is none.
  int monitorPort() const;
  /// Serves until stop(); returns when the listeners close.
  void serve();
  /// Graceful stop: new generation requests get 503 and /health answers 503 at once; requests
  /// already running finish, up to `drainSeconds`; at that deadline each is cut (a stream gets an
  /// error event, its choices' finish_reason and [DONE]; a whole reply a 503) and its generation
  /// cancelled. Then the listeners close and every connection ends. Returns the requests cut.
  int64_t stop(int drainSeconds = 30);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace glm::server

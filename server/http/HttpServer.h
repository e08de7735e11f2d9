// The OpenAI-compatible HTTP server (cpp-httplib): the routes, auth, limits and graceful stop.
#pragma once

#include "base/Status.h"
#include "runtime/api/EngineApi.h"
#include "server/http/PreparedRequest.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace httplib {
class Server;
}

namespace glm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8888;                  // 0: any free port (tests)
  std::vector<std::string> apiKeys; // empty: no authentication
  std::vector<std::string> servedNames = {"glm"};
  int64_t maxContext = 0; // tokens a request may span (prompt + output)
  size_t maxBodyBytes = 32u << 20;
  int threads = 16;
};

class HttpServer {
public:
  HttpServer(ServerOptions options, runtime::EngineApi &engine, ServedModel model);
  ~HttpServer();

  /// Binds the port (SO_REUSEADDR only, so a second server on the port fails instead of sharing
  /// it). Returns the bound port.
  Expected<int> bind();
  /// Serves until stop(); returns when the listener closes.
  void serve();
  /// Graceful stop: new generation requests get 503 and /health answers 503 at once; requests
  /// already running finish (up to `drainSeconds`), then the listener closes.
  void stop(int drainSeconds = 30);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace glm::server

// cpp-httplib's Server with every connection bounded: how many there are (in all and per client
// address), how long a request's headers and body may take to arrive, how long a connection may
// idle between requests, how large the headers may be, and which framings are accepted.
//
// cpp-httplib 0.11.4 (Debian's, a compiled .so) has none of these as settings: its read timeout
// applies to each recv() alone (a client sending a byte every few seconds is never timed out), its
// thread pool takes every accepted connection into an unbounded queue (16 slow clients hold all
// 16 threads and the rest wait, /health included), it reads header lines of any length into
// memory, skips header lines it cannot parse, and reads a chunked body without its payload limit.
// Its levers are used instead: the task queue (new_task_queue) is ours and refuses beyond the
// limit, and the per-connection loop (the virtual process_and_close_socket) is ours, running
// cpp-httplib's own request parser and router (process_request) over our Stream, whose reads
// carry the deadlines and check the header bytes as the parser takes them. See
// docs/performance.md ("Hostile clients") for what each bound costs and protects.
#pragma once

#include "base/Status.h"
#include "server/http/Metrics.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace glm::server {

struct ConnectionLimits {
  /// Open connections; one beyond gets a 503 at once and is closed (by the accepting thread,
  /// which never waits on it). Each open connection holds a thread.
  int maxConnections = 256;
  /// Open connections from one client address; one beyond gets a 429 and is closed.
  int maxPerClient = 32;
  /// From a connection's opening (its first request) or a request's first byte (later ones) to
  /// the end of its headers: a client that sends them slowly gets 408 and is closed.
  int headerTimeoutMs = 10000;
  /// From the end of the headers to the end of the body (33 MB/s carries the default 32 MiB body
  /// limit in 1 s; the bound is for clients that trickle).
  int bodyTimeoutMs = 30000;
  /// How long a kept-alive connection may wait for its next request before it is closed.
  int idleTimeoutMs = 5000;
  /// How long one write may wait for a client that does not read (an SSE stream's client that
  /// stopped reading is then taken for gone).
  int writeTimeoutMs = 30000;
  /// Requests per connection before it is closed (a client reconnects; the limits count anew).
  int keepAliveRequests = 100;
  /// The request line and headers together; beyond, 431.
  size_t maxHeaderBytes = 32 << 10;
  /// Header fields; beyond, 431.
  int maxHeaders = 100;
  /// Request bodies; beyond, 413 (a declared Content-Length before reading, a chunked body as it
  /// arrives; see readBody).
  size_t maxBodyBytes = 32u << 20;
  /// Bytes of request bodies held in memory at once, over every connection (RequestBody): a
  /// body that would take more gets 503 (retry shortly) instead of being read. With the body
  /// limit this bounds what bodies cost, however many connections send them.
  size_t maxBodyMemory = 768u << 20;
  /// The listen backlog (cpp-httplib's compiled one is 5).
  int backlog = 512;
};

/// A request body read by BoundedServer::readBody, counted against its maxBodyMemory until
/// released (or destroyed).
class RequestBody {
public:
  RequestBody() = default;
  RequestBody(const RequestBody &) = delete;
  RequestBody &operator=(const RequestBody &) = delete;
  ~RequestBody() { release(); }
  std::string &text() { return text_; }
  /// Frees the text and gives its bytes back to the budget (once its content has moved on, e.g.
  /// into a parsed request).
  void release();

private:
  friend class BoundedServer;
  std::string text_;
  std::atomic<int64_t> *budget_ = nullptr; // the server's bytes in use
  int64_t counted_ = 0;
};

/// The connection a request runs on, for its handler (current() on the handler's thread): whether
/// the client went away, and asking for the connection to close after the reply.
class ClientConnection {
public:
  /// The connection of the calling thread's request; null outside one.
  static ClientConnection *current();

  /// Whether the client is gone, without waiting: its connection reset or errored. A client that
  /// only closed its sending side (a half-close, which HTTP allows after a whole request) still
  /// waits for its reply; the first time that shows, it is sent a `100 Continue`, harmless to
  /// every HTTP/1.1 client, whose reset then tells a closed client from a half-closed one.
  virtual bool gone() = 0;
  /// The connection closes once this request's reply is written (a body left unread, a framing
  /// error, a shutdown).
  virtual void closeAfterReply() = 0;

protected:
  ~ClientConnection() = default;
};

class BoundedServer : public httplib::Server {
public:
  BoundedServer(ConnectionLimits limits, ConnectionStats &stats);
  ~BoundedServer() override;

  /// Binds `host`:`port` (0: any free port) with SO_REUSEADDR only (cpp-httplib's SO_REUSEPORT
  /// would let a second server share the port silently) and the configured backlog. Returns the
  /// bound port.
  Expected<int> bindTo(const std::string &host, int port);

  /// Called after the headers, before the body is read, for requests that pass the framing
  /// checks: Handled answers the request without reading its body (which then closes the
  /// connection). For what must not cost a body read: authentication, admission.
  void setGate(HandlerWithResponse gate) { gate_ = std::move(gate); }

  /// Reads a request's body through `reader` (a content-reader handler's), at most the body
  /// limit: false after answering `res` (413 for a larger body, chunked or not; 408 for one that
  /// came too slowly; 400 otherwise), the connection then closing.
  /// The body is counted against maxBodyMemory as it arrives (its declared length first): one
  /// that would exceed it gets 503.
  bool readBody(const httplib::Request &req, const httplib::ContentReader &reader,
                RequestBody &body, httplib::Response &res);

  /// From now on every connection closes after its current request (a drain).
  void closeAfterCurrentRequests() { draining_ = true; }
  /// Stops listening and ends every connection: idle ones at once, reads and writes in progress
  /// at their next poll (a tenth of a second). Handlers still running finish first.
  void halt();

  const ConnectionLimits &limits() const { return limits_; }

  class Connection; // a connection's Stream (BoundedServer.cpp)
  class Pool;       // the task queue

private:
  bool process_and_close_socket(socket_t sock) override;
  /// The checks every request passes after its headers: methods, framing, the declared length.
  HandlerResponse screen(const httplib::Request &req, httplib::Response &res);
  /// Counts a connection from `address`; false when it has as many as it may.
  bool enter(const std::string &address);
  void leave(const std::string &address);

  ConnectionLimits limits_;
  ConnectionStats &stats_;
  HandlerWithResponse gate_;
  /// Takes `bytes` more of the body budget for `body`; false when that would exceed it.
  bool reserve(RequestBody &body, int64_t bytes);

  std::atomic<int64_t> bodyBytes_{0}; // held by RequestBodies
  std::atomic<bool> draining_{false};
  std::atomic<bool> halted_{false};
  std::mutex clientsMutex_;
  std::map<std::string, int> clients_; // open connections per client address
};

/// Writes an OpenAI error object with `status` to `res`.
void sendErrorJson(httplib::Response &res, int status, const std::string &type,
                   const std::string &code, const std::string &message);

} // namespace glm::server

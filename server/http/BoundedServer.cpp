// The bounded connection loop: our task queue, our per-connection loop and our Stream around
// cpp-httplib's request parser and router (see the header for why each is ours).
#include "server/http/BoundedServer.h"

#include "server/openai/Protocol.h"

#include <arpa/inet.h>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace glm::server {
namespace {

using Clock = std::chrono::steady_clock;

/// A thread's next connection is to be refused: the pool is full. Set by the pool around the
/// cpp-httplib task it runs on the accepting thread instead of queueing it.
thread_local bool tRefuseBusy = false;

/// Polls at most this long at a time, so that a halt ends every wait promptly.
constexpr int kSliceMs = 100;
/// How long a connection closed with a body unread keeps reading (and dropping) it.
constexpr int kLingerMs = 2000;

int64_t msUntil(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
}

/// The client's address ("203.0.113.7", "::1"), the per-client limit's key.
std::string peerAddress(int fd, int *port = nullptr) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  char host[INET6_ADDRSTRLEN] = "";
  int p = -1;
  if (::getpeername(fd, reinterpret_cast<sockaddr *>(&address), &length) == 0) {
    if (address.ss_family == AF_INET) {
      const auto *a = reinterpret_cast<const sockaddr_in *>(&address);
      ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      p = ntohs(a->sin_port);
    } else if (address.ss_family == AF_INET6) {
      const auto *a = reinterpret_cast<const sockaddr_in6 *>(&address);
      ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      p = ntohs(a->sin6_port);
    }
  }
  if (port != nullptr) {
    *port = p;
  }
  return host;
}

std::string localAddress(int fd, int *port) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  char host[INET6_ADDRSTRLEN] = "";
  *port = -1;
  if (::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length) == 0) {
    if (address.ss_family == AF_INET) {
      const auto *a = reinterpret_cast<const sockaddr_in *>(&address);
      ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      *port = ntohs(a->sin_port);
    } else if (address.ss_family == AF_INET6) {
      const auto *a = reinterpret_cast<const sockaddr_in6 *>(&address);
      ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      *port = ntohs(a->sin6_port);
    }
  }
  return host;
}

std::string errorBody(const std::string &type, const std::string &code,
                      const std::string &message) {
  ApiError error;
  error.type = type;
  error.code = code;
  error.message = message;
  return error.toJson().dump();
}

/// Ends a connection without leaving the client a reset where it can help it: our side is shut
/// first, and what the client sends meanwhile is read and dropped, since closing a socket with
/// unread bytes resets it and the client may lose the reply. Up to `lingerMs` (a lingering close,
/// as nginx's, for a client still sending a body we refused), else only what has arrived.
void closeGently(int fd, int lingerMs = 0, const std::atomic<bool> *halted = nullptr) {
  ::shutdown(fd, SHUT_WR);
  char sink[16384];
  const Clock::time_point until = Clock::now() + std::chrono::milliseconds(lingerMs);
  uint64_t dropped = 0;
  while (dropped < (uint64_t{256} << 20)) {
    const ssize_t got = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (got > 0) {
      dropped += static_cast<uint64_t>(got);
      continue;
    }
    const int64_t left = msUntil(until);
    if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) || left <= 0 ||
        (halted != nullptr && *halted)) {
      break;
    }
    pollfd p{fd, POLLIN, 0};
    (void)::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kSliceMs)));
  }
  ::close(fd);
}

/// A whole reply written without waiting (the socket is fresh: its buffer takes it), then the
/// connection closed: refusals must never hold the accepting thread.
void refuse(int fd, int status, const char *reason, const std::string &type,
            const std::string &code, const std::string &message) {
  const std::string body = errorBody(type, code, message);
  const std::string reply = strCat("HTTP/1.1 ", status, " ", reason,
                                   "\r\nContent-Type: application/json\r\nConnection: close\r\n",
                                   status == 503 || status == 429 ? "Retry-After: 1\r\n" : "",
                                   "Content-Length: ", body.size(), "\r\n\r\n", body);
  (void)::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  closeGently(fd);
}

/// RFC 9110's tchar: what a field name is made of.
bool isTokenChar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

std::string trimmed(const std::string &s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) {
    return "";
  }
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

std::string lowered(std::string s) {
  for (char &c : s) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return s;
}

} // namespace

void sendErrorJson(httplib::Response &res, int status, const std::string &type,
                   const std::string &code, const std::string &message) {
  res.status = status;
  res.set_content(errorBody(type, code, message), "application/json");
}

//===------------------------------------------------------------------------------------------===//
// The pool: a thread per open connection, up to the limit; beyond it, a refusal at once.
//===------------------------------------------------------------------------------------------===//

class BoundedServer::Pool final : public httplib::TaskQueue {
public:
  explicit Pool(int limit) : limit_(limit) {}
  ~Pool() override { shutdown(); }

  void enqueue(std::function<void()> task) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (stopping_ || active_ >= limit_) {
      lock.unlock();
      // cpp-httplib's task is our process_and_close_socket; flagged, it refuses the connection
      // in a single non-blocking send, here on the accepting thread.
      tRefuseBusy = true;
      task();
      tRefuseBusy = false;
      return;
    }
    ++active_;
    tasks_.push_back(std::move(task));
    // Every queued task has a thread of its own: a connection never waits behind another.
    if (tasks_.size() > idle_) {
      threads_.emplace_back([this] { run(); });
    } else {
      wake_.notify_one();
    }
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread &t : threads_) {
      if (t.joinable()) {
        t.join();
      }
    }
    threads_.clear();
  }

private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      ++idle_;
      wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      --idle_;
      if (tasks_.empty()) {
        return; // stopping, nothing left
      }
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
      --active_;
    }
  }

  const int limit_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_; // at most limit_: threads are kept for the next connections
  size_t idle_ = 0;
  int active_ = 0; // connections queued or running
  bool stopping_ = false;
};

//===------------------------------------------------------------------------------------------===//
// The connection: cpp-httplib's Stream over the socket, with the deadlines and header checks.
//===------------------------------------------------------------------------------------------===//

class BoundedServer::Connection final : public httplib::Stream, public ClientConnection {
public:
  enum class Fault { None, Timeout, HeaderTooLarge, TooManyHeaders, BadHeader, BodyTooLarge };

  Connection(BoundedServer &server, int fd) : server_(server), fd_(fd) {}

  /// Waits up to `ms` for the first byte of the next request: false on timeout, end of the
  /// connection, or a halt.
  bool awaitRequest(int ms) {
    if (off_ < len_) {
      return true; // pipelined
    }
    const Clock::time_point until = Clock::now() + std::chrono::milliseconds(ms);
    while (!server_.halted_) {
      const int64_t left = msUntil(until);
      if (left <= 0) {
        return false;
      }
      pollfd p{fd_, POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kSliceMs)));
      if (n < 0 && errno != EINTR) {
        return false;
      }
      if (n > 0) {
        char c;
        const ssize_t got = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return got > 0;
      }
    }
    return false;
  }

  /// A request begins: its headers are due by `start` + the header timeout.
  void beginRequest(Clock::time_point start) {
    deadline_ = start + std::chrono::milliseconds(server_.limits_.headerTimeoutMs);
    headers_ = true;
    fault_ = Fault::None;
    detail_.clear();
    close_ = probed_ = false;
    headerBytes_ = bodyBytes_ = lineLength_ = 0;
    lines_ = 0;
    sawCr_ = false;
    inName_ = true;
  }

  Fault fault() const { return fault_; }
  const std::string &detail() const { return detail_; }
  bool closing() const { return close_; }
  uint64_t written() const { return written_; }

  /// The reply to a request whose first line did not arrive in time (cpp-httplib writes none).
  void replyTimedOut() { refuseLike(408, "Request Timeout", "request_timeout", detail_); }

  // httplib::Stream
  bool is_readable() const override {
    if (off_ < len_) {
      return true;
    }
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

  /// False once the connection has failed (a reset, an error), not when the client only closed
  /// its sending side: a stream's next write finds a closed client out.
  bool is_writable() const override {
    if (server_.halted_) {
      return false;
    }
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, 0) < 0) {
      return false;
    }
    return (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
  }

  ssize_t read(char *ptr, size_t size) override {
    if (fault_ != Fault::None) {
      return -1;
    }
    if (off_ == len_) {
      const ssize_t got = fill();
      if (got <= 0) {
        return got;
      }
    }
    size_t n = std::min(size, len_ - off_);
    if (headers_) {
      const ssize_t allowed = scan(buffer_ + off_, n);
      if (allowed < 0) {
        return -1;
      }
      n = static_cast<size_t>(allowed);
    } else {
      bodyBytes_ += n;
      // A backstop: every body is read through BoundedServer::readBody, which stops at the
      // limit exactly; this bounds any other reader, chunk framing included.
      if (bodyBytes_ > 4 * server_.limits_.maxBodyBytes + (1u << 20)) {
        return failWith(Fault::BodyTooLarge, "the request body is too large");
      }
    }
    std::memcpy(ptr, buffer_ + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char *ptr, size_t size) override {
    size_t done = 0;
    Clock::time_point progress = Clock::now();
    while (done < size) {
      const ssize_t sent = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent > 0) {
        done += static_cast<size_t>(sent);
        progress = Clock::now();
        continue;
      }
      if (sent < 0 && errno == EINTR) {
        continue;
      }
      if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        // A client that takes nothing for the write timeout is taken for gone.
        const int64_t left =
            server_.limits_.writeTimeoutMs -
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - progress).count();
        if (left <= 0 || server_.halted_) {
          return -1;
        }
        pollfd p{fd_, POLLOUT, 0};
        (void)::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kSliceMs)));
        continue;
      }
      return -1;
    }
    written_ += size;
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string &ip, int &port) const override {
    ip = peerAddress(fd_, &port);
  }
  void get_local_ip_and_port(std::string &ip, int &port) const override {
    ip = localAddress(fd_, &port);
  }
  socket_t socket() const override { return fd_; }

  // ClientConnection
  bool gone() override {
    if (off_ < len_) {
      return false; // the client's next request is here already
    }
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) {
      return false;
    }
    if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
      return true;
    }
    char c;
    const ssize_t got = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (got > 0) {
      return false;
    }
    if (got < 0) {
      return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    }
    // The client's sending side ended: it closed, or only half-closed and waits for the reply.
    // An interim 100 response tells them apart: a closed client's kernel answers it with a reset.
    if (!probed_) {
      probed_ = true;
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      if (::send(fd_, kContinue.data(), kContinue.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
          errno != EAGAIN && errno != EWOULDBLOCK) {
        return true;
      }
    }
    return false;
  }
  void closeAfterReply() override { close_ = lingers_ = true; }
  /// Whether the connection ends with a body left unread: its close lingers.
  bool lingers() const { return lingers_; }

private:
  ssize_t failWith(Fault fault, std::string detail) {
    fault_ = fault;
    detail_ = std::move(detail);
    close_ = true;
    return -1;
  }

  /// Receives more bytes before the phase's deadline: their count, 0 at the end, -1 on a fault.
  ssize_t fill() {
    while (true) {
      if (server_.halted_) {
        return failWith(Fault::Timeout, "the server is shutting down");
      }
      const int64_t left = msUntil(deadline_);
      if (left <= 0) {
        return failWith(Fault::Timeout, headers_
                                            ? strCat("the request's headers did not arrive within ",
                                                     server_.limits_.headerTimeoutMs / 1000.0, " s")
                                            : strCat("the request's body did not arrive within ",
                                                     server_.limits_.bodyTimeoutMs / 1000.0, " s"));
      }
      pollfd p{fd_, POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kSliceMs)));
      if (n < 0 && errno != EINTR) {
        return -1;
      }
      if (n <= 0) {
        continue;
      }
      const ssize_t got = ::recv(fd_, buffer_, sizeof buffer_, MSG_DONTWAIT);
      if (got > 0) {
        off_ = 0;
        len_ = static_cast<size_t>(got);
        return got;
      }
      if (got == 0) {
        return 0;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return -1;
      }
    }
  }

  /// Checks header bytes as the parser takes them (it takes them one at a time): returns how many
  /// of `n` it may take (up to the end of the headers, after which the body's deadline runs), or
  /// -1 for a request that no server in front of us may read otherwise: bare LF or CR, obsolete
  /// line folding, a line without a colon, a field name that is not a token (a space before the
  /// colon), control bytes (NUL) in a value, too many or too large headers. cpp-httplib would
  /// skip some of those lines and keep reading lines of any length.
  ssize_t scan(const char *p, size_t n) {
    const ConnectionLimits &limits = server_.limits_;
    for (size_t i = 0; i < n; ++i) {
      const auto c = static_cast<unsigned char>(p[i]);
      if (++headerBytes_ > limits.maxHeaderBytes) {
        return failWith(Fault::HeaderTooLarge, strCat("the request line and headers exceed ",
                                                      limits.maxHeaderBytes, " bytes"));
      }
      if (sawCr_) {
        if (c != '\n') {
          return failWith(Fault::BadHeader, "a CR not followed by LF in the request's headers");
        }
        sawCr_ = false;
        if (lines_ == 0) {
          if (lineLength_ == 0) {
            return failWith(Fault::BadHeader, "an empty request line");
          }
        } else if (lineLength_ == 0) {
          // The blank line: the headers are whole, the body's deadline starts.
          headers_ = false;
          deadline_ = Clock::now() + std::chrono::milliseconds(limits.bodyTimeoutMs);
          return static_cast<ssize_t>(i + 1);
        } else if (inName_) {
          return failWith(Fault::BadHeader, "a header line without a colon");
        } else if (lines_ > limits.maxHeaders) {
          return failWith(Fault::TooManyHeaders,
                          strCat("more than ", limits.maxHeaders, " header fields"));
        }
        ++lines_;
        lineLength_ = 0;
        inName_ = true;
        continue;
      }
      if (c == '\r') {
        sawCr_ = true;
        continue;
      }
      if (c == '\n') {
        return failWith(Fault::BadHeader, "a line of the request's headers ends in a bare LF");
      }
      if (lines_ == 0) {
        if (c < 0x20 || c == 0x7F) {
          return failWith(Fault::BadHeader, "a control character in the request line");
        }
      } else if (lineLength_ == 0 && (c == ' ' || c == '\t')) {
        return failWith(Fault::BadHeader, "obsolete line folding in the request's headers");
      } else if (inName_) {
        if (c == ':') {
          if (lineLength_ == 0) {
            return failWith(Fault::BadHeader, "a header with an empty name");
          }
          inName_ = false;
        } else if (!isTokenChar(c)) {
          return failWith(Fault::BadHeader, "an invalid character in a header name");
        }
      } else if ((c < 0x20 && c != '\t') || c == 0x7F) {
        return failWith(Fault::BadHeader, "a control character in a header value");
      }
      ++lineLength_;
    }
    return static_cast<ssize_t>(n);
  }

  void refuseLike(int status, const char *reason, const std::string &code,
                  const std::string &message) {
    const std::string body = errorBody("invalid_request_error", code, message);
    const std::string reply = strCat("HTTP/1.1 ", status, " ", reason,
                                     "\r\nContent-Type: application/json\r\nConnection: "
                                     "close\r\nContent-Length: ",
                                     body.size(), "\r\n\r\n", body);
    (void)write(reply.data(), reply.size());
  }

  BoundedServer &server_;
  const int fd_;
  char buffer_[16384];
  size_t off_ = 0, len_ = 0;
  bool headers_ = true; // reading the request line and headers; else the body
  Clock::time_point deadline_;
  Fault fault_ = Fault::None;
  std::string detail_;
  bool close_ = false, lingers_ = false, probed_ = false;
  uint64_t written_ = 0, bodyBytes_ = 0;
  // The header scan: bytes so far, lines done (0: the request line), the current line.
  size_t headerBytes_ = 0, lineLength_ = 0;
  int lines_ = 0;
  bool sawCr_ = false, inName_ = true;
};

namespace {
thread_local BoundedServer::Connection *tConnection = nullptr;
} // namespace

ClientConnection *ClientConnection::current() { return tConnection; }

//===------------------------------------------------------------------------------------------===//
// The server
//===------------------------------------------------------------------------------------------===//

BoundedServer::BoundedServer(ConnectionLimits limits, ConnectionStats &stats)
    : limits_(limits), stats_(stats) {
  new_task_queue = [this] { return new Pool(limits_.maxConnections); };
  // Its own timeouts are for its own loop, which is ours now; the payload limit is a second
  // guard for a body read other than through readBody.
  set_payload_max_length(limits_.maxBodyBytes);
  // What the Keep-Alive header it writes advertises: our loop's values.
  set_keep_alive_timeout(std::max(1, limits_.idleTimeoutMs / 1000));
  set_keep_alive_max_count(static_cast<size_t>(std::max(1, limits_.keepAliveRequests)));
  set_pre_routing_handler([this](const httplib::Request &req, httplib::Response &res) {
    if (screen(req, res) == HandlerResponse::Handled) {
      return HandlerResponse::Handled;
    }
    return gate_ ? gate_(req, res) : HandlerResponse::Unhandled;
  });
  // cpp-httplib answers some errors itself with an empty body: give them OpenAI's shape, and
  // the status of what went wrong reading the request (it says 400 for all of them).
  set_error_handler([this](const httplib::Request &, httplib::Response &res) {
    Connection *c = tConnection;
    if (c != nullptr && c->fault() != Connection::Fault::None) {
      if (c->fault() != Connection::Fault::Timeout) {
        c->closeAfterReply(); // a body may follow, unread: the close lingers
      }
      res.set_header("Connection", "close");
      switch (c->fault()) {
      case Connection::Fault::Timeout:
        return sendErrorJson(res, 408, "invalid_request_error", "request_timeout", c->detail());
      case Connection::Fault::HeaderTooLarge:
      case Connection::Fault::TooManyHeaders:
        return sendErrorJson(res, 431, "invalid_request_error", "request_header_fields_too_large",
                             c->detail());
      case Connection::Fault::BodyTooLarge:
        return sendErrorJson(res, 413, "invalid_request_error", "request_too_large", c->detail());
      default:
        return sendErrorJson(res, 400, "invalid_request_error", "malformed_request", c->detail());
      }
    }
    if (!res.body.empty()) {
      return;
    }
    const int status = res.status;
    const char *message = status == 413   ? "the request body is too large"
                          : status == 404 ? "no such endpoint"
                          : status == 405 ? "method not allowed"
                                          : "bad request";
    sendErrorJson(res, status, "invalid_request_error",
                  status == 413 ? "request_too_large" : "invalid_request_error", message);
  });
}

BoundedServer::~BoundedServer() = default;

Expected<int> BoundedServer::bindTo(const std::string &host, int port) {
  set_socket_options([](int fd) {
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  int bound = port;
  if (port == 0) {
    bound = bind_to_any_port(host);
    if (bound <= 0) {
      return Status(StatusCode::Unavailable, strCat("cannot bind ", host));
    }
  } else if (!bind_to_port(host, port)) {
    return Status(StatusCode::Unavailable, strCat("cannot bind ", host, ":", port, " (in use?)"));
  }
  // listen() again on a listening socket sets its backlog: cpp-httplib's compiled one is 5.
  ::listen(svr_sock_, limits_.backlog);
  return bound;
}

void BoundedServer::halt() {
  halted_ = true;
  stop();
}

bool BoundedServer::enter(const std::string &address) {
  std::lock_guard<std::mutex> lock(clientsMutex_);
  int &count = clients_[address];
  if (count >= limits_.maxPerClient) {
    if (count == 0) {
      clients_.erase(address);
    }
    return false;
  }
  ++count;
  return true;
}

void BoundedServer::leave(const std::string &address) {
  std::lock_guard<std::mutex> lock(clientsMutex_);
  auto it = clients_.find(address);
  if (it != clients_.end() && --it->second <= 0) {
    clients_.erase(it);
  }
}

bool BoundedServer::process_and_close_socket(socket_t sock) {
  if (tRefuseBusy) {
    ++stats_.refusedBusy;
    refuse(
        sock, 503, "Service Unavailable", "server_error", "server_overloaded",
        strCat("the server has its ", limits_.maxConnections, " connections open; retry shortly"));
    return false;
  }
  const Clock::time_point opened = Clock::now();
  const std::string address = peerAddress(sock);
  if (!enter(address)) {
    ++stats_.refusedClient;
    refuse(sock, 429, "Too Many Requests", "rate_limit_error", "too_many_connections",
           strCat("this address has ", limits_.maxPerClient, " connections open; retry shortly"));
    return false;
  }
  ++stats_.open;
  const int flags = ::fcntl(sock, F_GETFL, 0);
  ::fcntl(sock, F_SETFL, flags | O_NONBLOCK);
  bool linger = false;
  {
    Connection connection(*this, sock);
    tConnection = &connection;
    for (int served = 0; served < limits_.keepAliveRequests && !halted_; ++served) {
      // The first request's headers are due from the connection's opening: a client that
      // connects and sends nothing holds it no longer than one that sends slowly.
      if (!connection.awaitRequest(served == 0 ? limits_.headerTimeoutMs : limits_.idleTimeoutMs)) {
        break;
      }
      connection.beginRequest(served == 0 ? opened : Clock::now());
      const bool last = served + 1 == limits_.keepAliveRequests || draining_ || halted_;
      bool closedByClient = false;
      const bool answered = process_request(connection, last, closedByClient, nullptr);
      if (connection.fault() == Connection::Fault::Timeout) {
        ++stats_.timedOut;
        if (!answered && connection.written() == 0) {
          connection.replyTimedOut();
        }
      } else if (connection.fault() != Connection::Fault::None) {
        ++stats_.malformed;
      }
      if (!answered || closedByClient || last || connection.closing()) {
        break;
      }
    }
    linger = connection.lingers();
    tConnection = nullptr;
  }
  // A client refused before its body was read may still be sending it: it gets time to finish
  // and read the reply (bounded, and cut short by a halt).
  closeGently(sock, linger ? kLingerMs : 0, &halted_);
  --stats_.open;
  leave(address);
  return true;
}

httplib::Server::HandlerResponse BoundedServer::screen(const httplib::Request &req,
                                                       httplib::Response &res) {
  ClientConnection *c = ClientConnection::current();
  auto refuseRequest = [&](int status, const std::string &code, const std::string &message) {
    // The body stays unread: the connection cannot be reused.
    if (c != nullptr) {
      c->closeAfterReply();
    }
    res.set_header("Connection", "close");
    ++stats_.malformed;
    sendErrorJson(res, status, "invalid_request_error", code, message);
    return HandlerResponse::Handled;
  };
  const std::string &method = req.method;
  if (method != "GET" && method != "HEAD" && method != "POST" && method != "OPTIONS") {
    return refuseRequest(405, "method_not_allowed",
                         strCat("method ", method.substr(0, 16), " is not served here"));
  }
  // Request smuggling: a proxy in front and this server must agree where a request ends, so
  // any framing two readers could read two ways is refused (RFC 9112 §6.1, §6.3).
  const size_t lengths = req.get_header_value_count("Content-Length");
  const size_t codings = req.get_header_value_count("Transfer-Encoding");
  std::optional<uint64_t> length;
  for (size_t i = 0; i < lengths; ++i) {
    const std::string value = req.get_header_value("Content-Length", i);
    size_t from = 0;
    do {
      const size_t comma = value.find(',', from);
      const std::string item = trimmed(value.substr(from, comma - from));
      from = comma == std::string::npos ? comma : comma + 1;
      if (item.empty() || item.size() > 18 ||
          item.find_first_not_of("0123456789") != std::string::npos) {
        return refuseRequest(400, "invalid_content_length",
                             "Content-Length is not a decimal number");
      }
      const uint64_t n = std::stoull(item);
      if (length && *length != n) {
        return refuseRequest(400, "invalid_content_length", "conflicting Content-Length values");
      }
      length = n;
    } while (from != std::string::npos);
  }
  if (codings > 0) {
    if (lengths > 0) {
      return refuseRequest(400, "invalid_content_length",
                           "a request with both Content-Length and Transfer-Encoding");
    }
    if (codings > 1 || lowered(trimmed(req.get_header_value("Transfer-Encoding"))) != "chunked") {
      return refuseRequest(501, "unsupported_transfer_encoding",
                           "Transfer-Encoding other than a single `chunked` is not supported");
    }
    if (req.version == "HTTP/1.0") {
      return refuseRequest(400, "invalid_transfer_encoding",
                           "Transfer-Encoding in an HTTP/1.0 request");
    }
  }
  if (method == "POST" && !length && codings == 0) {
    // cpp-httplib would read such a body until the connection ends.
    return refuseRequest(411, "length_required",
                         "a POST needs Content-Length or chunked Transfer-Encoding");
  }
  if (method == "POST" &&
      lowered(req.get_header_value("Content-Type")).rfind("multipart/", 0) == 0) {
    return refuseRequest(415, "unsupported_media_type", "multipart bodies are not served here");
  }
  if (length && *length > limits_.maxBodyBytes) {
    return refuseRequest(413, "request_too_large",
                         strCat("the request body of ", *length, " bytes is over the limit of ",
                                limits_.maxBodyBytes, " bytes"));
  }
  const bool hasBody = (length && *length > 0) || codings > 0;
  if (hasBody && method != "POST" && c != nullptr) {
    c->closeAfterReply(); // cpp-httplib reads no body here: it would be taken for a request
  }
  return HandlerResponse::Unhandled;
}

void RequestBody::release() {
  std::string().swap(text_);
  if (budget_ != nullptr && counted_ > 0) {
    budget_->fetch_sub(counted_);
  }
  counted_ = 0;
}

bool BoundedServer::reserve(RequestBody &body, int64_t bytes) {
  const int64_t limit = static_cast<int64_t>(limits_.maxBodyMemory);
  int64_t used = bodyBytes_.load();
  do {
    if (used + bytes > limit) {
      return false;
    }
  } while (!bodyBytes_.compare_exchange_weak(used, used + bytes));
  body.budget_ = &bodyBytes_;
  body.counted_ += bytes;
  return true;
}

bool BoundedServer::readBody(const httplib::Request &req, const httplib::ContentReader &reader,
                             RequestBody &body, httplib::Response &res) {
  std::string &text = body.text();
  bool tooLarge = false, overBudget = false;
  // A declared length was checked against the limit (screen): the string is made once, and
  // counted whole before a byte is read.
  if (const std::string length = req.get_header_value("Content-Length"); !length.empty()) {
    const uint64_t declared =
        std::min<uint64_t>(limits_.maxBodyBytes, std::strtoull(length.c_str(), nullptr, 10));
    overBudget = !reserve(body, static_cast<int64_t>(declared));
    if (!overBudget) {
      text.reserve(declared);
    }
  }
  const bool read = !overBudget && reader([&](const char *data, size_t n) {
    if (text.size() + n > limits_.maxBodyBytes) {
      tooLarge = true;
      return false;
    }
    if (text.capacity() < text.size() + n) {
      // Grows by half, not doubling, and never past the limit: a chunked body's string is at
      // most the limit and at most half again its size.
      const size_t grown = std::min(
          limits_.maxBodyBytes, std::max(text.size() + n, text.size() + text.size() / 2 + 4096));
      if (static_cast<int64_t>(grown) > body.counted_ &&
          !reserve(body, static_cast<int64_t>(grown) - body.counted_)) {
        overBudget = true;
        return false;
      }
      text.reserve(grown);
    }
    text.append(data, n);
    return true;
  });
  if (read && !tooLarge && !overBudget) {
    return true;
  }
  body.release();
  Connection *c = tConnection;
  if (c != nullptr) {
    c->closeAfterReply();
  }
  res.set_header("Connection", "close");
  if (overBudget) {
    res.set_header("Retry-After", "1");
    sendErrorJson(res, 503, "server_error", "server_overloaded",
                  strCat("the server holds ", limits_.maxBodyMemory,
                         " bytes of request bodies already; retry shortly"));
  } else if (tooLarge || (c != nullptr && c->fault() == Connection::Fault::BodyTooLarge)) {
    ++stats_.malformed;
    sendErrorJson(res, 413, "invalid_request_error", "request_too_large",
                  strCat("the request body is over the limit of ", limits_.maxBodyBytes, " bytes"));
  } else if (c != nullptr && c->fault() == Connection::Fault::Timeout) {
    sendErrorJson(res, 408, "invalid_request_error", "request_timeout", c->detail());
  } else {
    ++stats_.malformed;
    sendErrorJson(res, 400, "invalid_request_error", "malformed_request",
                  "the request body could not be read (malformed chunked encoding, or the "
                  "connection ended)");
  }
  return false;
}

} // namespace glm::server

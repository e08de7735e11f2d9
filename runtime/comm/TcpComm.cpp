// TCP collectives: framed messages over non-blocking sockets, every wait bounded by poll().
#include "runtime/comm/TcpComm.h"

#include "base/Hmac.h"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <limits>
#include <utility>

namespace glm::runtime {
namespace {

// Floats and lengths travel in host order: every target glmc builds for is little-endian.
static_assert(std::endian::native == std::endian::little, "TcpComm sends host-order values");

constexpr uint32_t kMagic = 0x544d4c47; // "GLMT"
// 2: the hello carries a nonce, answered by rank 0's challenge and the worker's proof (HMACs).
constexpr uint32_t kProtocolVersion = 2;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
/// A hello's fixed part: version, rank, world, the worker's nonce; its identity follows.
constexpr size_t kHelloFixedBytes = 12 + kNonceBytes;
/// Identities are a few hundred bytes; a connection that announces more is dropped.
constexpr uint64_t kMaxHelloBytes = 64 << 10;
/// What each side's MAC covers besides the hello and the nonces, so that one side's MAC can never
/// be replayed as the other's.
constexpr std::string_view kRankZeroLabel = "glmc tensor-parallel v2: rank 0";
constexpr std::string_view kWorkerLabel = "glmc tensor-parallel v2: worker";
constexpr uint64_t kMaxHandshakeBytes = 1 << 20;
constexpr int kHandshakeTimeoutMs = 10000;
constexpr int kRetryPauseMs = 200;

enum class Kind : uint32_t {
  Hello = 1,       // worker -> rank 0: version, rank, world, the worker's nonce, identity
  Welcome = 2,     // rank 0 -> worker: admitted
  Refuse = 3,      // rank 0 -> worker: refused for good (message)
  RefuseRetry = 4, // rank 0 -> worker: not now, try again (message)
  Reduce = 10,     // worker -> rank 0: an all-reduce contribution
  Reduced = 11,    // rank 0 -> worker: the sum
  Gather = 12,     // worker -> rank 0: an all-gather piece
  Gathered = 13,   // rank 0 -> worker: the whole tensor
  Broadcast = 14,  // rank 0 -> worker: a broadcast buffer
  Heartbeat = 15,  // either way, no payload: "alive", skipped by every reader
  Challenge = 16,  // rank 0 -> worker: rank 0's nonce and its MAC (it holds the secret too)
  Proof = 17,      // worker -> rank 0: the worker's MAC
};

const char *kindName(uint32_t kind) {
  switch (static_cast<Kind>(kind)) {
  case Kind::Hello:
    return "a hello";
  case Kind::Welcome:
    return "a welcome";
  case Kind::Refuse:
  case Kind::RefuseRetry:
    return "a refusal";
  case Kind::Reduce:
  case Kind::Reduced:
    return "an all-reduce";
  case Kind::Gather:
  case Kind::Gathered:
    return "an all-gather";
  case Kind::Broadcast:
    return "a broadcast";
  case Kind::Heartbeat:
    return "a heartbeat";
  case Kind::Challenge:
    return "a challenge";
  case Kind::Proof:
    return "a proof";
  }
  return "an unknown message";
}

struct FrameHeader {
  uint32_t magic;
  uint32_t kind;
  uint64_t bytes;
};

using Clock = std::chrono::steady_clock;

int64_t msLeft(Clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
}

/// How long one exchange may wait: until `deadline` in all (the progress bound, `timeoutMs` from
/// its start), and at most `silenceMs` at a time without a byte from the peer (the liveness
/// bound: a live peer's heartbeats arrive well within it).
struct Wait {
  Clock::time_point deadline;
  int timeoutMs = 0;
  int silenceMs = 0;
  static Wait of(int timeoutMs, int silenceMs) {
    return {Clock::now() + std::chrono::milliseconds(timeoutMs), timeoutMs,
            std::min(silenceMs, timeoutMs)};
  }
};

/// Waits for `events` on `fd`; the error says the peer went quiet, or took too long.
Status waitFor(int fd, short events, const Wait &wait) {
  pollfd p{fd, events, 0};
  while (true) {
    const int64_t left = msLeft(wait.deadline);
    if (left <= 0) {
      return Status(StatusCode::Unavailable,
                    strCat("did not answer within ", wait.timeoutMs, " ms"));
    }
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, wait.silenceMs)));
    if (n > 0) {
      return Status::success(); // readiness or an error condition: the next call reports it
    }
    if (n == 0 && msLeft(wait.deadline) > 0) {
      return Status(StatusCode::Unavailable,
                    strCat(events == POLLIN ? "sent nothing" : "read nothing", " for ",
                           wait.silenceMs,
                           " ms, not even a heartbeat (stopped, or the network is down)"));
    }
    if (n < 0 && errno != EINTR) {
      return Status(StatusCode::Unavailable, strCat("poll failed: ", std::strerror(errno)));
    }
  }
}

/// Sends all of `data`, waiting for the peer to make room as `wait` allows.
Status sendBytes(int fd, const void *data, size_t n, const Wait &wait) {
  const auto *p = static_cast<const uint8_t *>(data);
  while (n > 0) {
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent > 0) {
      p += sent;
      n -= static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      GLM_RETURN_IF_ERROR(waitFor(fd, POLLOUT, wait));
      continue;
    }
    if (sent < 0 && errno == EINTR) {
      continue;
    }
    return Status(StatusCode::Unavailable,
                  strCat("closed the connection (send: ", std::strerror(errno), ")"));
  }
  return Status::success();
}

/// Receives exactly `n` bytes, waiting for more as `wait` allows.
Status recvBytes(int fd, void *data, size_t n, const Wait &wait) {
  auto *p = static_cast<uint8_t *>(data);
  while (n > 0) {
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got > 0) {
      p += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) {
      return Status(StatusCode::Unavailable, "closed the connection");
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      GLM_RETURN_IF_ERROR(waitFor(fd, POLLIN, wait));
      continue;
    }
    if (errno == EINTR) {
      continue;
    }
    return Status(StatusCode::Unavailable,
                  strCat("closed the connection (recv: ", std::strerror(errno), ")"));
  }
  return Status::success();
}

Status sendFrame(int fd, Kind kind, const void *payload, size_t bytes, const Wait &wait) {
  const FrameHeader header{kMagic, static_cast<uint32_t>(kind), bytes};
  GLM_RETURN_IF_ERROR(sendBytes(fd, &header, sizeof header, wait));
  return sendBytes(fd, payload, bytes, wait);
}

/// sendFrame under `mutex`, the connection's: the heartbeat thread sends on it too, and frames
/// must not interleave.
Status sendLocked(std::mutex &mutex, int fd, Kind kind, const void *payload, size_t bytes,
                  const Wait &wait) {
  std::lock_guard<std::mutex> lock(mutex);
  return sendFrame(fd, kind, payload, bytes, wait);
}

bool isHeartbeat(const FrameHeader &header) {
  return header.magic == kMagic && header.kind == static_cast<uint32_t>(Kind::Heartbeat) &&
         header.bytes == 0;
}

/// The next frame's header, past any heartbeats (which only say the peer lives).
Expected<FrameHeader> recvHeader(int fd, const Wait &wait) {
  while (true) {
    FrameHeader header{};
    GLM_RETURN_IF_ERROR(recvBytes(fd, &header, sizeof header, wait));
    if (header.magic != kMagic) {
      return Status(StatusCode::Unavailable, "sent bytes that are not a glmc TCP frame");
    }
    if (!isHeartbeat(header)) {
      return header;
    }
  }
}

/// Receives a frame that must be `kind` with exactly `bytes` of payload: anything else means the
/// ranks are no longer making the same calls.
Status recvFrame(int fd, Kind kind, void *payload, size_t bytes, const Wait &wait) {
  GLM_ASSIGN_OR_RETURN(FrameHeader header, recvHeader(fd, wait));
  if (header.kind != static_cast<uint32_t>(kind) || header.bytes != bytes) {
    return Status(StatusCode::Unavailable,
                  strCat("sent ", kindName(header.kind), " of ", header.bytes, " bytes where ",
                         kindName(static_cast<uint32_t>(kind)), " of ", bytes,
                         " bytes was due (the ranks are out of step)"));
  }
  return recvBytes(fd, payload, bytes, wait);
}

/// recvFrame, noting when the peer was last heard from (for checkPeers).
Status recvHeard(Clock::time_point &heard, int fd, Kind kind, void *payload, size_t bytes,
                 const Wait &wait) {
  GLM_RETURN_IF_ERROR(recvFrame(fd, kind, payload, bytes, wait));
  heard = Clock::now();
  return Status::success();
}

Expected<std::string> recvText(int fd, const FrameHeader &header, const Wait &wait) {
  if (header.bytes > kMaxHandshakeBytes) {
    return Status(StatusCode::Unavailable,
                  strCat("sent a ", header.bytes, "-byte handshake message (at most ",
                         kMaxHandshakeBytes, ")"));
  }
  std::string text(static_cast<size_t>(header.bytes), '\0');
  GLM_RETURN_IF_ERROR(recvBytes(fd, text.data(), text.size(), wait));
  return text;
}

Status setNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return ioError("fcntl(O_NONBLOCK): ", std::strerror(errno));
  }
  // Collectives are small and latency-bound: send each frame at once.
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return Status::success();
}

void closeFd(int &fd) {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
}

/// The handshake's exchanges: a peer that is not yet a rank sends no heartbeats.
Wait handshakeWait() { return Wait::of(kHandshakeTimeoutMs, kHandshakeTimeoutMs); }

void pause(int ms) { ::poll(nullptr, 0, ms); }

/// A handshake MAC: HMAC-SHA256 under the secret of the side's label, the hello (which holds the
/// worker's nonce, rank, world and identity) and rank 0's nonce.
Sha256Digest handshakeMac(const std::string &secret, std::string_view label,
                          const std::string &hello, const std::string &rankZeroNonce) {
  std::string message(label);
  message += hello;
  message += rankZeroNonce;
  return hmacSha256(secret, message);
}

std::string addressText(const sockaddr_storage &address) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (address.ss_family == AF_INET) {
    const auto *a = reinterpret_cast<const sockaddr_in *>(&address);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto *a = reinterpret_cast<const sockaddr_in6 *>(&address);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  return strCat(host, ":", port);
}

} // namespace

Expected<std::pair<std::string, int>> parseHostPort(const std::string &address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return invalidArgument("'", address, "' is not HOST:PORT");
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  for (char c : address.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535) {
      return invalidArgument("'", address, "' is not HOST:PORT (bad port)");
    }
    port = port * 10 + (c - '0');
  }
  if (port > 65535) {
    return invalidArgument("'", address, "' is not HOST:PORT (port above 65535)");
  }
  return std::pair(host, port);
}

TcpComm::TcpComm(int rank, int world, TcpCommOptions options)
    : rank_(rank), world_(world), options_(options),
      fds_(static_cast<size_t>(rank == 0 ? world : 1), -1), sendMutex_(new std::mutex[fds_.size()]),
      lastHeard_(fds_.size(), Clock::now()) {
  if (options_.heartbeatMs > 0) {
    heartbeat_ = std::thread([this] { sendHeartbeats(); });
  }
}

TcpComm::~TcpComm() {
  {
    std::lock_guard<std::mutex> lock(heartbeatMutex_);
    stopping_ = true;
  }
  heartbeatWake_.notify_all();
  if (heartbeat_.joinable()) {
    heartbeat_.join();
  }
  disconnect("the communicator was destroyed");
  closeFd(listenFd_);
}

void TcpComm::sendHeartbeats() {
  const FrameHeader beat{kMagic, static_cast<uint32_t>(Kind::Heartbeat), 0};
  std::unique_lock<std::mutex> wake(heartbeatMutex_);
  while (!heartbeatWake_.wait_for(wake, std::chrono::milliseconds(options_.heartbeatMs),
                                  [&] { return stopping_; })) {
    // Under stateMutex_, so that no connection closes (and its descriptor is reused) meanwhile.
    std::lock_guard<std::mutex> state(stateMutex_);
    for (size_t i = 0; i < fds_.size(); ++i) {
      // A connection busy with a frame needs no heartbeat: the frame says as much.
      if (fds_[i] < 0 || !sendMutex_[i].try_lock()) {
        continue;
      }
      std::lock_guard<std::mutex> frame(sendMutex_[i], std::adopt_lock);
      const ssize_t sent = ::send(fds_[i], &beat, sizeof beat, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent > 0 && static_cast<size_t>(sent) < sizeof beat) {
        // A nearly full buffer took part of it: the rest must follow before any other frame. A
        // failure here shows in the next collective on that connection.
        const auto *rest = reinterpret_cast<const uint8_t *>(&beat) + sent;
        (void)sendBytes(fds_[i], rest, sizeof beat - static_cast<size_t>(sent),
                        Wait::of(options_.silenceMs, options_.silenceMs));
      }
      // Nothing sent (a full buffer, a closed connection): the collectives will find out.
    }
  }
}

Expected<std::unique_ptr<TcpComm>> TcpComm::listen(const std::string &host, int port, int world,
                                                   TcpCommOptions options) {
  if (world < 1) {
    return invalidArgument("a TCP group of ", world, " ranks");
  }
  std::unique_ptr<TcpComm> comm(new TcpComm(0, world, options));
  comm->host_ = host;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo *found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return Status(StatusCode::Unavailable,
                  strCat("cannot resolve ", host, ": ", ::gai_strerror(rc)));
  }
  std::string why = "no address";
  for (addrinfo *a = found; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      continue;
    }
    comm->listenFd_ = fd;
    break;
  }
  ::freeaddrinfo(found);
  if (comm->listenFd_ < 0) {
    return Status(StatusCode::Unavailable, strCat("cannot listen on ", host, ":", port, ": ", why));
  }
  GLM_RETURN_IF_ERROR(setNonBlocking(comm->listenFd_));
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (::getsockname(comm->listenFd_, reinterpret_cast<sockaddr *>(&bound), &length) != 0) {
    return ioError("getsockname: ", std::strerror(errno));
  }
  comm->port_ =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6 *>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in *>(&bound)->sin_port);
  return comm;
}

Expected<std::unique_ptr<TcpComm>> TcpComm::worker(const std::string &host, int port, int rank,
                                                   int world, std::string identity,
                                                   TcpCommOptions options) {
  if (rank < 1 || rank >= world) {
    return invalidArgument("rank ", rank, " is not a worker rank of a TP ", world, " group (1..",
                           world - 1, ")");
  }
  std::unique_ptr<TcpComm> comm(new TcpComm(rank, world, options));
  comm->host_ = host;
  comm->port_ = port;
  comm->identity_ = std::move(identity);
  return comm;
}

TcpComm::Candidate &TcpComm::Candidate::operator=(Candidate &&other) noexcept {
  if (this != &other) {
    closeFd(fd);
    fd = std::exchange(other.fd, -1);
    rank = other.rank;
    world = other.world;
    identity = std::move(other.identity);
    peer = std::move(other.peer);
  }
  return *this;
}

TcpComm::Candidate::~Candidate() { closeFd(fd); }

/// A handshake in progress on rank 0: the bytes received so far, what was agreed, its deadline.
struct TcpComm::Pending {
  int fd = -1;
  std::string peer;
  Clock::time_point deadline;
  std::string in;          // received, not yet consumed
  bool challenged = false; // the hello was read and the challenge sent; the proof is due
  std::string hello;       // the hello's payload, which both MACs cover
  std::array<uint8_t, kNonceBytes> nonce{}; // rank 0's
  int32_t rank = 0, world = 0;
  ~Pending() { closeFd(fd); }
};

bool TcpComm::advance(Pending &p) {
  auto drop = [&](std::string why) {
    finished_.push_back(
        Status(StatusCode::Unavailable, strCat("a connection to the tensor-parallel port from ",
                                               p.peer, " was dropped: ", why)));
    return true;
  };
  auto refuse = [&](std::string why) {
    // Best effort, without waiting: the connection is not a member and must not hold rank 0.
    const FrameHeader header{kMagic, static_cast<uint32_t>(Kind::Refuse), why.size()};
    std::string frame(reinterpret_cast<const char *>(&header), sizeof header);
    frame += why;
    (void)::send(p.fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return drop(why);
  };
  while (true) {
    if (p.in.size() < sizeof(FrameHeader)) {
      return false;
    }
    FrameHeader header;
    std::memcpy(&header, p.in.data(), sizeof header);
    if (header.magic != kMagic) {
      return drop("it sent bytes that are not a glmc TCP frame");
    }
    if (isHeartbeat(header)) {
      p.in.erase(0, sizeof header);
      continue;
    }
    const Kind due = p.challenged ? Kind::Proof : Kind::Hello;
    const uint64_t most = p.challenged ? kMacBytes : kMaxHelloBytes;
    if (header.kind != static_cast<uint32_t>(due) || header.bytes > most) {
      return drop(strCat("it sent ", kindName(header.kind), " of ", header.bytes, " bytes where ",
                         kindName(static_cast<uint32_t>(due)), " was due"));
    }
    if (p.in.size() < sizeof header + header.bytes) {
      return false;
    }
    std::string payload = p.in.substr(sizeof header, static_cast<size_t>(header.bytes));
    p.in.erase(0, sizeof header + static_cast<size_t>(header.bytes));
    if (!p.challenged) {
      // version, rank, world, the worker's nonce, its identity.
      uint32_t version = 0;
      if (payload.size() >= 4) {
        std::memcpy(&version, payload.data(), 4);
      }
      if (version != kProtocolVersion) {
        return refuse(strCat("the worker speaks TCP protocol version ", version, "; rank 0 speaks ",
                             kProtocolVersion, ": every rank needs the same glmc"));
      }
      if (payload.size() < kHelloFixedBytes) {
        return drop("its hello is too short");
      }
      std::memcpy(&p.rank, payload.data() + 4, 4);
      std::memcpy(&p.world, payload.data() + 8, 4);
      if (!randomBytes(p.nonce.data(), p.nonce.size())) {
        return drop("rank 0 could not draw a nonce");
      }
      p.hello = std::move(payload);
      const std::string nonce(reinterpret_cast<const char *>(p.nonce.data()), p.nonce.size());
      const Sha256Digest mac = handshakeMac(options_.secret, kRankZeroLabel, p.hello, nonce);
      const FrameHeader challenge{kMagic, static_cast<uint32_t>(Kind::Challenge),
                                  kNonceBytes + kMacBytes};
      std::string frame(reinterpret_cast<const char *>(&challenge), sizeof challenge);
      frame += nonce;
      frame.append(reinterpret_cast<const char *>(mac.data()), mac.size());
      // A fresh connection's send buffer takes these 80 bytes whole.
      if (::send(p.fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
          static_cast<ssize_t>(frame.size())) {
        return drop("it did not take the challenge");
      }
      p.challenged = true;
      continue;
    }
    const std::string nonce(reinterpret_cast<const char *>(p.nonce.data()), p.nonce.size());
    const Sha256Digest expected = handshakeMac(options_.secret, kWorkerLabel, p.hello, nonce);
    Sha256Digest got{};
    if (payload.size() == got.size()) {
      std::memcpy(got.data(), payload.data(), got.size());
    }
    if (payload.size() != got.size() || !digestsEqual(got, expected)) {
      return refuse(strCat("rank ", p.rank,
                           " did not prove the tensor-parallel shared secret (is its "
                           "--tp-secret rank 0's?)"));
    }
    Candidate c;
    c.fd = std::exchange(p.fd, -1);
    c.rank = p.rank;
    c.world = p.world;
    c.identity = p.hello.substr(kHelloFixedBytes);
    c.peer = p.peer;
    finished_.push_back(std::move(c));
    return true;
  }
}

std::optional<Expected<TcpComm::Candidate>> TcpComm::handshake(int timeoutMs) {
  if (rank_ != 0 || listenFd_ < 0) {
    return Expected<Candidate>(internalError("handshake on a rank that does not listen"));
  }
  const Clock::time_point until = Clock::now() + std::chrono::milliseconds(timeoutMs);
  while (finished_.empty()) {
    // Drop handshakes past their deadline: a silent connection costs rank 0 nothing but a slot.
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < pending_.size();) {
      if (pending_[i]->deadline <= now) {
        finished_.push_back(
            Status(StatusCode::Unavailable,
                   strCat("a connection to the tensor-parallel port from ", pending_[i]->peer,
                          " was dropped: no valid hello within ", options_.helloTimeoutMs, " ms")));
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    if (!finished_.empty()) {
      break;
    }
    std::vector<pollfd> fds;
    fds.push_back({listenFd_, POLLIN, 0});
    Clock::time_point wake = until;
    for (const auto &p : pending_) {
      fds.push_back({p->fd, POLLIN, 0});
      wake = std::min(wake, p->deadline);
    }
    const int64_t waitMs = std::max<int64_t>(0, msLeft(wake));
    const int ready =
        ::poll(fds.data(), fds.size(),
               static_cast<int>(std::min<int64_t>(waitMs, std::numeric_limits<int>::max())));
    if (ready < 0 && errno != EINTR) {
      return Expected<Candidate>(
          Status(StatusCode::Unavailable, strCat("poll failed: ", std::strerror(errno))));
    }
    // Existing handshakes first (the indices of fds follow pending_ until it changes).
    std::vector<Pending *> over;
    for (size_t i = 1; ready > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) {
        continue;
      }
      Pending &p = *pending_[i - 1];
      char buffer[4096];
      const ssize_t got = ::recv(p.fd, buffer, sizeof buffer, MSG_DONTWAIT);
      if (got > 0) {
        p.in.append(buffer, static_cast<size_t>(got));
        if (advance(p)) {
          over.push_back(&p);
        }
      } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        finished_.push_back(
            Status(StatusCode::Unavailable, strCat("a connection to the tensor-parallel port from ",
                                                   p.peer, " closed during the handshake")));
        over.push_back(&p);
      }
    }
    std::erase_if(pending_, [&](const std::unique_ptr<Pending> &p) {
      return std::find(over.begin(), over.end(), p.get()) != over.end();
    });
    if (ready > 0 && (fds[0].revents & POLLIN) != 0) {
      sockaddr_storage from{};
      socklen_t length = sizeof from;
      const int fd = ::accept4(listenFd_, reinterpret_cast<sockaddr *>(&from), &length,
                               SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        if (pending_.size() >= kMaxPendingHandshakes) {
          // A flood of silent connections evicts its own oldest; a real worker completes its
          // handshake within a round trip, long before it would be the oldest.
          finished_.push_back(Status(
              StatusCode::Unavailable,
              strCat("a connection to the tensor-parallel port from ", pending_.front()->peer,
                     " was dropped: ", kMaxPendingHandshakes, " handshakes were waiting")));
          pending_.erase(pending_.begin());
        }
        auto p = std::make_unique<Pending>();
        p->fd = fd;
        p->peer = addressText(from);
        p->deadline = Clock::now() + std::chrono::milliseconds(options_.helloTimeoutMs);
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pending_.push_back(std::move(p));
      }
    }
    if (finished_.empty() && Clock::now() >= until) {
      return std::nullopt;
    }
  }
  Expected<Candidate> out = std::move(finished_.front());
  finished_.pop_front();
  return out;
}

Expected<int> TcpComm::admit(Candidate candidate, const Admit &admit) {
  int fd = std::exchange(candidate.fd, -1);
  auto refuse = [&](Kind kind, const std::string &why) -> Status {
    (void)sendFrame(fd, kind, why.data(), why.size(), handshakeWait());
    ::close(fd);
    return Status(StatusCode::Unavailable, why);
  };
  const int32_t rank = candidate.rank, world = candidate.world;
  if (world != world_) {
    return refuse(Kind::Refuse,
                  strCat("rank ", rank, " runs a TP ", world, " plan; rank 0 runs TP ", world_));
  }
  if (rank < 1 || rank >= world_) {
    return refuse(Kind::Refuse, strCat("rank ", rank, " is not a worker rank of TP ", world_,
                                       " (1..", world_ - 1, ")"));
  }
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    if (fds_[static_cast<size_t>(rank)] >= 0) {
      return refuse(Kind::RefuseRetry, strCat("rank ", rank, " is already connected"));
    }
  }
  if (Status s = admit(rank, candidate.identity); !s.ok()) {
    return refuse(Kind::Refuse, s.message());
  }
  if (Status s = sendFrame(fd, Kind::Welcome, nullptr, 0, handshakeWait()); !s.ok()) {
    ::close(fd);
    return s.withContext(strCat("welcoming rank ", rank));
  }
  lastHeard_[static_cast<size_t>(rank)] = Clock::now();
  std::lock_guard<std::mutex> lock(stateMutex_);
  fds_[static_cast<size_t>(rank)] = fd;
  return static_cast<int>(rank);
}

Expected<int> TcpComm::acceptPending(int timeoutMs, const Admit &admit) {
  std::optional<Expected<Candidate>> done = handshake(timeoutMs);
  if (!done) {
    return -1;
  }
  if (!done->ok()) {
    return done->status();
  }
  return this->admit(std::move(**done), admit);
}

bool TcpComm::waitForConnection(int timeoutMs) const {
  if (listenFd_ < 0) {
    return false;
  }
  pollfd p{listenFd_, POLLIN, 0};
  return ::poll(&p, 1, timeoutMs) > 0;
}

Status TcpComm::connect(int waitMs) {
  if (rank_ == 0) {
    return internalError("rank 0 listens; it does not connect");
  }
  disconnect("reconnecting");
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(waitMs);
  std::string why = "not tried";
  std::string hello(kHelloFixedBytes, '\0');
  const uint32_t version = kProtocolVersion;
  const int32_t rank = rank_, world = world_;
  std::memcpy(hello.data(), &version, 4);
  std::memcpy(hello.data() + 4, &rank, 4);
  std::memcpy(hello.data() + 8, &world, 4);
  hello += identity_;
  for (bool first = true;; first = false) {
    if (!first) {
      if (msLeft(deadline) <= 0) {
        return Status(StatusCode::Unavailable,
                      strCat("rank ", rank_, " could not join rank 0 at ", host_, ":", port_,
                             " within ", waitMs, " ms: ", why));
      }
      pause(kRetryPauseMs);
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo *found = nullptr;
    const std::string service = std::to_string(port_);
    if (int rc = ::getaddrinfo(host_.c_str(), service.c_str(), &hints, &found); rc != 0) {
      why = strCat("cannot resolve ", host_, ": ", ::gai_strerror(rc));
      continue;
    }
    int fd = -1;
    for (addrinfo *a = found; a != nullptr && fd < 0; a = a->ai_next) {
      fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        why = std::strerror(errno);
        continue;
      }
      if (Status s = setNonBlocking(fd); !s.ok()) {
        why = s.message();
        closeFd(fd);
        continue;
      }
      if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        int error = errno;
        if (error == EINPROGRESS) {
          const int wait = static_cast<int>(std::clamp<int64_t>(msLeft(deadline), 1, 5000));
          socklen_t length = sizeof error;
          error = waitFor(fd, POLLOUT, Wait::of(wait, wait)).ok() &&
                          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0
                      ? error
                      : ETIMEDOUT;
        }
        if (error != 0) {
          why = std::strerror(error);
          closeFd(fd);
        }
      }
    }
    ::freeaddrinfo(found);
    if (fd < 0) {
      continue;
    }
    // A fresh nonce for every attempt: rank 0's challenge must answer this one.
    if (!randomBytes(reinterpret_cast<uint8_t *>(hello.data()) + 12, kNonceBytes)) {
      closeFd(fd);
      return Status(StatusCode::Internal, "could not draw a nonce (getrandom)");
    }
    // Rank 0 answers once its monitor takes the connection; a busy or restarting rank 0 may not,
    // which is retried like a refused connection.
    if (Status s = sendFrame(fd, Kind::Hello, hello.data(), hello.size(), handshakeWait());
        !s.ok()) {
      why = strCat("rank 0 ", s.message());
      closeFd(fd);
      continue;
    }
    Expected<FrameHeader> header = recvHeader(fd, handshakeWait());
    if (header.ok() && header->kind == static_cast<uint32_t>(Kind::Challenge)) {
      // Rank 0 proves it holds the secret before this rank answers with its own proof.
      std::string challenge(kNonceBytes + kMacBytes, '\0');
      Status s = header->bytes == challenge.size()
                     ? recvBytes(fd, challenge.data(), challenge.size(), handshakeWait())
                     : Status(StatusCode::Unavailable, "sent a malformed challenge");
      if (!s.ok()) {
        why = strCat("rank 0 ", s.message(), " during the handshake");
        closeFd(fd);
        continue;
      }
      const std::string nonce = challenge.substr(0, kNonceBytes);
      Sha256Digest theirs{};
      std::memcpy(theirs.data(), challenge.data() + kNonceBytes, kMacBytes);
      if (!digestsEqual(theirs, handshakeMac(options_.secret, kRankZeroLabel, hello, nonce))) {
        closeFd(fd);
        return invalidArgument("rank 0 at ", host_, ":", port_,
                               " did not prove the tensor-parallel shared secret (is --tp-secret "
                               "the same on every rank?)");
      }
      const Sha256Digest proof = handshakeMac(options_.secret, kWorkerLabel, hello, nonce);
      if (Status sent = sendFrame(fd, Kind::Proof, proof.data(), proof.size(), handshakeWait());
          !sent.ok()) {
        why = strCat("rank 0 ", sent.message(), " during the handshake");
        closeFd(fd);
        continue;
      }
      header = recvHeader(fd, handshakeWait());
    }
    if (!header.ok()) {
      why = strCat("rank 0 ", header.status().message(), " during the handshake");
      closeFd(fd);
      continue;
    }
    if (header->kind == static_cast<uint32_t>(Kind::Welcome)) {
      lastHeard_[0] = Clock::now();
      std::lock_guard<std::mutex> lock(stateMutex_);
      fds_[0] = fd;
      lastError_.clear();
      return Status::success();
    }
    Expected<std::string> text = recvText(fd, *header, handshakeWait());
    closeFd(fd);
    const std::string message = text.ok() ? *text : text.status().message();
    if (header->kind == static_cast<uint32_t>(Kind::RefuseRetry)) {
      why = strCat("rank 0 asked to retry: ", message);
      continue;
    }
    return invalidArgument("rank 0 at ", host_, ":", port_, " refused rank ", rank_, ": ", message);
  }
}

void TcpComm::disconnect(const std::string &why) {
  std::lock_guard<std::mutex> lock(stateMutex_);
  bool any = false;
  for (int &fd : fds_) {
    any = any || fd >= 0;
    closeFd(fd);
  }
  if (any) {
    lastError_ = why;
  }
}

std::vector<int> TcpComm::missingRanks() const {
  std::lock_guard<std::mutex> lock(stateMutex_);
  std::vector<int> missing;
  for (size_t r = 0; r < fds_.size(); ++r) {
    if (fds_[r] < 0 && (rank_ != 0 || r != 0)) {
      missing.push_back(rank_ == 0 ? static_cast<int>(r) : 0);
    }
  }
  return missing;
}

std::string TcpComm::lastError() const {
  std::lock_guard<std::mutex> lock(stateMutex_);
  return lastError_;
}

Status TcpComm::checkAllConnected(const char *what) const {
  for (int r : missingRanks()) {
    return Status(StatusCode::Unavailable,
                  strCat("tensor-parallel rank ", r, " is not connected (", what, ")"));
  }
  return Status::success();
}

Status TcpComm::fail(Status status) {
  disconnect(status.message());
  return status;
}

Status TcpComm::peerFailure(int peer, const Status &status, const char *what) {
  return fail(Status(StatusCode::Unavailable,
                     strCat("tensor-parallel rank ", peer, peer == 0 ? " (rank 0) " : " ",
                            status.message(), " during ", what)));
}

Status TcpComm::checkPeers(const char *what) {
  GLM_RETURN_IF_ERROR(checkAllConnected(what));
  for (int peer = rank_ == 0 ? 1 : 0; peer < (rank_ == 0 ? world_ : 1); ++peer) {
    GLM_ASSIGN_OR_RETURN(int fd, socketTo(peer, what));
    // What waits to be read: heartbeats (dropped: they have said what they had to say), the
    // start of the peer's next frame (left for its collective), or the end of the connection (a
    // dead process's sockets are closed by its kernel), which only a read tells apart.
    while (true) {
      FrameHeader next{};
      const ssize_t got = ::recv(fd, &next, sizeof next, MSG_PEEK | MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        break; // nothing yet
      }
      if (got <= 0) {
        return peerFailure(
            peer,
            Status(StatusCode::Unavailable,
                   got == 0 ? std::string("closed the connection")
                            : strCat("closed the connection (recv: ", std::strerror(errno), ")")),
            what);
      }
      lastHeard(peer) = Clock::now();
      if (static_cast<size_t>(got) < sizeof next || !isHeartbeat(next)) {
        break; // a frame on its way
      }
      (void)::recv(fd, &next, sizeof next, MSG_DONTWAIT); // the heartbeat, whole: drop it
    }
    const int64_t silentMs =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - lastHeard(peer))
            .count();
    const int silenceMs = std::min(options_.silenceMs, options_.timeoutMs);
    if (silentMs > silenceMs) {
      return peerFailure(peer,
                         Status(StatusCode::Unavailable,
                                strCat("sent nothing for ", silentMs,
                                       " ms, not even a heartbeat (stopped, or the network is "
                                       "down)")),
                         what);
    }
  }
  return Status::success();
}

Expected<int> TcpComm::socketTo(int peer, const char *what) const {
  std::lock_guard<std::mutex> lock(stateMutex_);
  const int fd = fds_[static_cast<size_t>(rank_ == 0 ? peer : 0)];
  if (fd < 0) {
    return Status(StatusCode::Unavailable,
                  strCat("tensor-parallel rank ", peer, " is not connected (", what, ")"));
  }
  return fd;
}

Status TcpComm::allReduce(float *buffer, size_t count) {
  const char *what = "an all-reduce";
  GLM_RETURN_IF_ERROR(checkAllConnected(what));
  const size_t bytes = count * sizeof(float);
  const Wait timeout = Wait::of(options_.timeoutMs, options_.silenceMs);
  if (rank_ != 0) {
    GLM_ASSIGN_OR_RETURN(int fd, socketTo(0, what));
    if (Status s = sendLocked(sendMutex(0), fd, Kind::Reduce, buffer, bytes, timeout); !s.ok()) {
      return peerFailure(0, s, what);
    }
    if (Status s = recvHeard(lastHeard(0), fd, Kind::Reduced, buffer, bytes, timeout); !s.ok()) {
      return peerFailure(0, s, what);
    }
    return Status::success();
  }
  // Rank 0 adds each rank's contribution in rank order, as the loopback group does, so the
  // result has the same bits whatever the transport.
  scratch_.resize(count);
  for (int r = 1; r < world_; ++r) {
    GLM_ASSIGN_OR_RETURN(int fd, socketTo(r, what));
    if (Status s = recvHeard(lastHeard(r), fd, Kind::Reduce, scratch_.data(), bytes, timeout);
        !s.ok()) {
      return peerFailure(r, s, what);
    }
    for (size_t i = 0; i < count; ++i) {
      buffer[i] += scratch_[i];
    }
  }
  for (int r = 1; r < world_; ++r) {
    GLM_ASSIGN_OR_RETURN(int fd, socketTo(r, what));
    if (Status s = sendLocked(sendMutex(r), fd, Kind::Reduced, buffer, bytes, timeout); !s.ok()) {
      return peerFailure(r, s, what);
    }
  }
  return Status::success();
}

Status TcpComm::allGather(const float *piece, float *out, size_t rows, size_t width, int axis) {
  const char *what = "an all-gather";
  if (axis != 0 && axis != 1) {
    return invalidArgument("TCP all-gather along axis ", axis, " of a 2-D tensor");
  }
  GLM_RETURN_IF_ERROR(checkAllConnected(what));
  const size_t pieceBytes = rows * width * sizeof(float);
  const size_t world = static_cast<size_t>(world_);
  const Wait timeout = Wait::of(options_.timeoutMs, options_.silenceMs);
  if (rank_ != 0) {
    GLM_ASSIGN_OR_RETURN(int fd, socketTo(0, what));
    if (Status s = sendLocked(sendMutex(0), fd, Kind::Gather, piece, pieceBytes, timeout);
        !s.ok()) {
      return peerFailure(0, s, what);
    }
    if (Status s = recvHeard(lastHeard(0), fd, Kind::Gathered, out, pieceBytes * world, timeout);
        !s.ok()) {
      return peerFailure(0, s, what);
    }
    return Status::success();
  }
  auto place = [&](size_t r, const float *in) {
    if (axis == 0) {
      std::memcpy(out + r * rows * width, in, pieceBytes);
      return;
    }
    for (size_t row = 0; row < rows; ++row) {
      std::memcpy(out + row * world * width + r * width, in + row * width, width * sizeof(float));
    }
  };
  place(0, piece);
  scratch_.resize(rows * width);
  for (int r = 1; r < world_; ++r) {
    GLM_ASSIGN_OR_RETURN(int fd, socketTo(r, what));
    if (Status s = recvHeard(lastHeard(r), fd, Kind::Gather, scratch_.data(), pieceBytes, timeout);
        !s.ok()) {
      return peerFailure(r, s, what);
    }
    place(static_cast<size_t>(r), scratch_.data());
  }
  for (int r = 1; r < world_; ++r) {
    GLM_ASSIGN_OR_RETURN(int fd, socketTo(r, what));
    if (Status s = sendLocked(sendMutex(r), fd, Kind::Gathered, out, pieceBytes * world, timeout);
        !s.ok()) {
      return peerFailure(r, s, what);
    }
  }
  return Status::success();
}

Status TcpComm::broadcast(void *buffer, size_t bytes) {
  const char *what = "a broadcast";
  GLM_RETURN_IF_ERROR(checkAllConnected(what));
  const Wait timeout = Wait::of(options_.timeoutMs, options_.silenceMs);
  if (rank_ != 0) {
    GLM_ASSIGN_OR_RETURN(int fd, socketTo(0, what));
    if (Status s = recvHeard(lastHeard(0), fd, Kind::Broadcast, buffer, bytes, timeout); !s.ok()) {
      return peerFailure(0, s, what);
    }
    return Status::success();
  }
  for (int r = 1; r < world_; ++r) {
    GLM_ASSIGN_OR_RETURN(int fd, socketTo(r, what));
    if (Status s = sendLocked(sendMutex(r), fd, Kind::Broadcast, buffer, bytes, timeout); !s.ok()) {
      return peerFailure(r, s, what);
    }
  }
  return Status::success();
}

} // namespace glm::runtime

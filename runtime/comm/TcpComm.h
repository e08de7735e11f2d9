// Collectives between processes over TCP: rank 0 listens, every other rank connects to it, and
// each collective is a star through rank 0 (gather to rank 0, combine in rank order, send back).
#pragma once

#include "runtime/comm/Comm.h"

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace glm::runtime {

/// Splits "HOST:PORT" (the port after the last colon; "[::1]:PORT" for IPv6 literals).
Expected<std::pair<std::string, int>> parseHostPort(const std::string &address);

struct TcpCommOptions {
  /// The longest one collective may wait on its peers in all (progress). It bounds how far ranks
  /// may drift apart, so it must exceed the longest stretch of computation between two
  /// collectives (rank 0 pings idle workers well inside it).
  int timeoutMs = 30000;
  /// A peer that sends nothing at all for this long, not even a heartbeat, fails the collective
  /// waiting on it at once, however long timeoutMs is (liveness): it is stopped, or the network
  /// is down. Capped at timeoutMs. Live peers send heartbeats every heartbeatMs, so it must be
  /// well above theirs.
  int silenceMs = 5000;
  /// How often this rank tells its peers that it lives, from a thread of its own, whatever the
  /// rank is doing (computing, waiting on a GPU); 0 sends none, and peers then take a computation
  /// longer than their silenceMs for a stopped rank.
  int heartbeatMs = 1000;
  /// The group's shared secret (`--tp-secret`, `--tp-secret-file`). A connecting rank proves it
  /// holds it, and rank 0 proves it back, by HMAC-SHA256 over a nonce of each side and the hello;
  /// the secret itself never travels. Empty: the MACs still bind the hello, but anyone who can
  /// reach rank 0's port can join (`glmc serve` allows that on loopback only).
  std::string secret;
  /// How long rank 0 gives a new connection to complete its handshake (hello, proof) before it
  /// drops it. Handshakes run apart from the group's calls, so a connection that is not yet a
  /// member never holds one up, however long it stays silent.
  int helloTimeoutMs = 5000;
};

/// One rank's end of a TCP group. The star through rank 0 costs two hops per collective; that is
/// fine for the small decode collectives and for a control channel, not a bandwidth transport.
///
/// Any failure ends the group: the failing rank closes its sockets (rank 0 closes every worker's),
/// so no rank waits on a collective that will never complete. Rank 0 keeps listening: workers
/// rejoin through acceptPending(), and collectives work again once every rank is back.
///
/// Liveness and progress are bounded apart (TcpCommOptions): a thread of each rank sends a
/// heartbeat frame on every connection each heartbeatMs, which readers skip, so a peer that goes
/// silent is found within silenceMs while a peer that computes for long is waited on for up to
/// timeoutMs.
///
/// Not thread-safe, except missingRanks(), complete() and lastError(), which other threads may
/// call to report health.
class TcpComm : public GroupComm {
public:
  /// Rank 0: binds host:port (port 0 picks a free one) and listens for ranks 1..world-1. Returns
  /// at once; collectives fail until acceptPending() has admitted every rank.
  static Expected<std::unique_ptr<TcpComm>> listen(const std::string &host, int port, int world,
                                                   TcpCommOptions options = {});
  /// Rank `rank` > 0 of `world`: a communicator that connect() joins to rank 0 at host:port.
  /// `identity` is what this rank proves to rank 0 (plan and weights hashes).
  static Expected<std::unique_ptr<TcpComm>> worker(const std::string &host, int port, int rank,
                                                   int world, std::string identity,
                                                   TcpCommOptions options = {});
  ~TcpComm() override;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  Status allReduce(float *buffer, size_t count) override;
  Status allGather(const float *piece, float *out, size_t rows, size_t width, int axis) override;
  Status broadcast(void *buffer, size_t bytes) override;

  /// Rank 0's bound port.
  int port() const { return port_; }
  const TcpCommOptions &options() const { return options_; }

  /// Rank 0 decides whether a connecting rank may join from the identity it presents: an error
  /// refuses it, and its message is sent to the worker.
  using Admit = std::function<Status(int rank, const std::string &identity)>;
  /// A connection that completed the handshake (it proved the shared secret), and what it
  /// presented; admit() decides whether it joins.
  struct Candidate {
    int fd = -1; // owned: closed with the candidate unless admit() takes it
    int rank = 0, world = 0;
    std::string identity;
    std::string peer; // its address, for messages
    Candidate() = default;
    Candidate(Candidate &&other) noexcept { *this = std::move(other); }
    Candidate &operator=(Candidate &&other) noexcept;
    ~Candidate();
  };
  /// Rank 0: accepts connections and advances every handshake in progress for up to `timeoutMs`,
  /// then returns the first that finished: an authenticated candidate, or why a connection was
  /// dropped (no valid hello within helloTimeoutMs, a wrong MAC, another protocol version).
  /// nullopt when none finished. At most kMaxPendingHandshakes wait at once (a new one evicts the
  /// oldest). Touches no group state, so it runs while another thread makes calls; one thread at
  /// a time.
  std::optional<Expected<Candidate>> handshake(int timeoutMs);
  /// Rank 0: admits `candidate` when its rank is missing, its world matches and `admit` agrees
  /// (it is sent a welcome); otherwise it is refused (a rank already connected is told to retry)
  /// and closed. Returns the admitted rank or why it was refused.
  Expected<int> admit(Candidate candidate, const Admit &admit);
  /// handshake() then admit(): waits up to `timeoutMs` for one connecting rank and answers it.
  /// Returns the admitted rank, -1 when nobody came, or why the connection was refused.
  Expected<int> acceptPending(int timeoutMs, const Admit &admit);
  static constexpr size_t kMaxPendingHandshakes = 64;
  /// Rank 0: whether a connection waits to be accepted, within `timeoutMs`. Touches no group
  /// state, so it may run while another thread uses the communicator.
  bool waitForConnection(int timeoutMs) const;

  /// A worker: connects to rank 0 and presents its identity, retrying while rank 0 is not up yet
  /// or still holds this rank's previous connection, for up to `waitMs`. An error when rank 0
  /// refuses the identity (not retried) or does not answer in time.
  Status connect(int waitMs);
  /// A worker: the identity the next connect() presents (a rank learns its weights' digest only
  /// once it has loaded them, after its communicator exists).
  void setIdentity(std::string identity) { identity_ = std::move(identity); }

  /// Whether every peer still lives, without waiting: for a rank that waits on something other
  /// than this communicator (an NCCL collective on the GPU) and would otherwise learn that a peer
  /// died or stopped only from a timeout. A closed connection, or a peer heard nothing from (no
  /// frame, no heartbeat) for silenceMs, fails like a collective would (the group ends, the error
  /// names the rank and `what`). It reads and drops the heartbeats waiting on each connection and
  /// leaves any other frame, a peer that got further, for the collective that reads it.
  Status checkPeers(const char *what);
  /// Closes every connection (the group ends; see the class comment). `why` becomes lastError().
  void disconnect(const std::string &why) override;

  /// Ranks not connected to rank 0 (rank 0's view); for a worker, {0} while it is not joined.
  std::vector<int> missingRanks() const override;
  /// The failure that last ended the group, or "" when none did.
  std::string lastError() const override;

private:
  TcpComm(int rank, int world, TcpCommOptions options);
  /// The socket to `peer` (rank 0: any worker; a worker: 0), or an error naming it when missing.
  Expected<int> socketTo(int peer, const char *what) const;
  /// Ends the group after a failure and returns it, with the rank and the collective named.
  Status fail(Status status);
  /// fail() for a send or receive to `peer` that went wrong during collective `what`.
  Status peerFailure(int peer, const Status &status, const char *what);
  Status checkAllConnected(const char *what) const;
  /// The connection to `peer`'s send lock: a frame at a time, the heartbeat thread's included.
  std::mutex &sendMutex(int peer) { return sendMutex_[rank_ == 0 ? peer : 0]; }
  /// When `peer` was last heard from (a frame or a heartbeat), for checkPeers.
  std::chrono::steady_clock::time_point &lastHeard(int peer) {
    return lastHeard_[static_cast<size_t>(rank_ == 0 ? peer : 0)];
  }
  /// The heartbeat thread: a heartbeat on every connection each options_.heartbeatMs.
  void sendHeartbeats();

  int rank_;
  int world_;
  TcpCommOptions options_;
  int listenFd_ = -1;
  int port_ = 0;
  std::string host_;
  std::string identity_;
  mutable std::mutex stateMutex_; // guards fds_ against the health readers, and lastError_
  std::vector<int> fds_;          // rank 0: per rank (-1 when missing); a worker: [0] is rank 0
  std::string lastError_;
  std::vector<float> scratch_;
  std::unique_ptr<std::mutex[]> sendMutex_;                      // per connection, as fds_
  std::vector<std::chrono::steady_clock::time_point> lastHeard_; // per connection, as fds_
  std::mutex heartbeatMutex_;                                    // guards stopping_
  std::condition_variable heartbeatWake_;
  bool stopping_ = false;
  /// Rank 0's handshakes in progress and finished ones not yet returned (handshake()'s thread).
  struct Pending;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::deque<Expected<Candidate>> finished_;
  /// Advances one handshake on newly received bytes; true when it is over (finished_ has it).
  bool advance(Pending &p);
  std::thread heartbeat_; // last: started once every member above exists
};

} // namespace glm::runtime

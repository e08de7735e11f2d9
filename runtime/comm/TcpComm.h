// Collectives between processes over TCP: rank 0 listens, every other rank connects to it, and
// each collective is a star through rank 0 (gather to rank 0, combine in rank order, send back).
#pragma once

#include "runtime/comm/Comm.h"

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace glm::runtime {

/// Splits "HOST:PORT" (the port after the last colon; "[::1]:PORT" for IPv6 literals).
Expected<std::pair<std::string, int>> parseHostPort(const std::string &address);

struct TcpCommOptions {
  /// A peer that sends nothing for this long while a collective waits on it fails the collective.
  /// It bounds how far ranks may drift apart, so it must exceed the longest stretch of
  /// computation between two collectives (rank 0 pings idle workers well inside it).
  int timeoutMs = 30000;
};

/// One rank's end of a TCP group. The star through rank 0 costs two hops per collective; that is
/// fine for the small decode collectives and for a control channel, not a bandwidth transport.
///
/// Any failure ends the group: the failing rank closes its sockets (rank 0 closes every worker's),
/// so no rank waits on a collective that will never complete. Rank 0 keeps listening: workers
/// rejoin through acceptPending(), and collectives work again once every rank is back.
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
  /// Rank 0: waits up to `timeoutMs` for one connecting rank and answers it: admitted when its
  /// rank is missing, the world matches and `admit` agrees; refused otherwise (a rank already
  /// connected is told to retry). Returns the admitted rank, -1 when nobody came, or why the
  /// connection was refused.
  Expected<int> acceptPending(int timeoutMs, const Admit &admit);
  /// Rank 0: whether a connection waits to be accepted, within `timeoutMs`. Touches no group
  /// state, so it may run while another thread uses the communicator.
  bool waitForConnection(int timeoutMs) const;

  /// A worker: connects to rank 0 and presents its identity, retrying while rank 0 is not up yet
  /// or still holds this rank's previous connection, for up to `waitMs`. An error when rank 0
  /// refuses the identity (not retried) or does not answer in time.
  Status connect(int waitMs);

  /// Whether every peer's connection is still open, without waiting and without consuming what
  /// they sent: for a rank that waits on something other than this communicator (an NCCL
  /// collective on the GPU) and would otherwise learn that a peer process died only from a
  /// timeout. A closed connection fails like a collective would (the group ends, the error names
  /// the rank and `what`); data waiting to be read is a peer that got further, not a failure.
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
};

} // namespace glm::runtime

// TcpComm over localhost: the collectives give the loopback group's bits for 2 and 4 ranks, and a
// peer that closes or goes quiet fails the collective with an error naming it, within the timeout.
#include "runtime/comm/TcpComm.h"
#include "base/Hmac.h"
#include "runtime/comm/LoopbackComm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <random>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace glm::runtime {
namespace {

TcpComm::Admit admitAll() {
  return [](int, const std::string &) { return Status::success(); };
}

/// A TCP group of `world` ranks over localhost: rank 0 listens on a free port, the workers join.
/// Rank r has options[r], or the last of `options` where there are fewer.
std::vector<std::unique_ptr<TcpComm>> tcpGroup(int world,
                                               std::vector<TcpCommOptions> options = {{}}) {
  auto of = [&](int r) { return options[std::min<size_t>(r, options.size() - 1)]; };
  std::vector<std::unique_ptr<TcpComm>> comms(static_cast<size_t>(world));
  comms[0] = std::move(TcpComm::listen("127.0.0.1", 0, world, of(0))).value();
  std::vector<std::thread> joiners;
  for (int r = 1; r < world; ++r) {
    comms[static_cast<size_t>(r)] =
        std::move(TcpComm::worker("127.0.0.1", comms[0]->port(), r, world, "id", of(r))).value();
    joiners.emplace_back(
        [&, r] { EXPECT_TRUE(comms[static_cast<size_t>(r)]->connect(20000).ok()); });
  }
  while (!comms[0]->complete()) {
    Expected<int> joined = comms[0]->acceptPending(20000, admitAll());
    EXPECT_TRUE(joined.ok() && *joined > 0) << joined.status().toString();
    if (!joined.ok() || *joined <= 0) {
      break;
    }
  }
  for (std::thread &t : joiners) {
    t.join();
  }
  return comms;
}

/// What one rank ends up with after a fixed series of collectives on `comm`.
struct Outcome {
  std::vector<float> reduced, gathered0, gathered1;
  std::vector<uint8_t> broadcast;
  Status status;
};

Outcome runCollectives(Comm &comm) {
  Outcome o;
  // Values of very different magnitudes, so that the order of the additions shows in the bits.
  std::mt19937 random(1234 + static_cast<unsigned>(comm.rank()));
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  o.reduced.resize(1000);
  for (size_t i = 0; i < o.reduced.size(); ++i) {
    o.reduced[i] = unit(random) * std::pow(10.0f, static_cast<float>(i % 9) - 4.0f);
  }
  auto fail = [&](Status s) {
    o.status = std::move(s);
    return o;
  };
  if (Status s = comm.allReduce(o.reduced.data(), o.reduced.size()); !s.ok()) {
    return fail(s);
  }
  const size_t rows = 3, width = 5, world = static_cast<size_t>(comm.world());
  std::vector<float> piece(rows * width);
  for (float &x : piece) {
    x = unit(random);
  }
  o.gathered0.resize(rows * width * world);
  o.gathered1.resize(rows * width * world);
  if (Status s = comm.allGather(piece.data(), o.gathered0.data(), rows, width, 0); !s.ok()) {
    return fail(s);
  }
  if (Status s = comm.allGather(piece.data(), o.gathered1.data(), rows, width, 1); !s.ok()) {
    return fail(s);
  }
  o.broadcast.assign(37, static_cast<uint8_t>(comm.rank() * 7 + 1));
  if (Status s = comm.broadcast(o.broadcast.data(), o.broadcast.size()); !s.ok()) {
    return fail(s);
  }
  return o;
}

std::vector<Outcome> runOnRanks(std::vector<Comm *> comms) {
  std::vector<Outcome> outcomes(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] { outcomes[r] = runCollectives(*comms[r]); });
  }
  for (std::thread &t : threads) {
    t.join();
  }
  return outcomes;
}

template <typename T> bool sameBits(const std::vector<T> &a, const std::vector<T> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

class TcpCommWorlds : public ::testing::TestWithParam<int> {};

TEST_P(TcpCommWorlds, CollectivesGiveTheLoopbackBits) {
  const int world = GetParam();
  LoopbackGroup group(world);
  std::vector<std::unique_ptr<Comm>> loopback;
  std::vector<Comm *> loopbackRanks;
  for (int r = 0; r < world; ++r) {
    loopback.push_back(group.comm(r));
    loopbackRanks.push_back(loopback.back().get());
  }
  std::vector<std::unique_ptr<TcpComm>> tcp = tcpGroup(world);
  std::vector<Comm *> tcpRanks;
  for (auto &c : tcp) {
    tcpRanks.push_back(c.get());
  }
  const std::vector<Outcome> expected = runOnRanks(loopbackRanks);
  const std::vector<Outcome> got = runOnRanks(tcpRanks);
  for (int r = 0; r < world; ++r) {
    const Outcome &e = expected[static_cast<size_t>(r)], &g = got[static_cast<size_t>(r)];
    ASSERT_TRUE(g.status.ok()) << "rank " << r << ": " << g.status.toString();
    EXPECT_TRUE(sameBits(e.reduced, g.reduced)) << "all-reduce, rank " << r;
    EXPECT_TRUE(sameBits(e.gathered0, g.gathered0)) << "all-gather axis 0, rank " << r;
    EXPECT_TRUE(sameBits(e.gathered1, g.gathered1)) << "all-gather axis 1, rank " << r;
    EXPECT_TRUE(sameBits(e.broadcast, g.broadcast)) << "broadcast, rank " << r;
    EXPECT_EQ(g.broadcast[0], 1) << "rank 0's bytes reach rank " << r;
  }
  // Every rank has the same sum.
  for (int r = 1; r < world; ++r) {
    EXPECT_TRUE(sameBits(got[0].reduced, got[static_cast<size_t>(r)].reduced));
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, TcpCommWorlds, ::testing::Values(2, 4));

TEST(TcpComm, APeerClosingMidCollectiveFailsEveryRankNamingIt) {
  // Rank 1 has sent its part and waits for the sum when rank 2 goes away: rank 0's collective
  // names rank 2, and rank 0 ends the group, so rank 1 is told at once rather than timing out.
  std::vector<std::unique_ptr<TcpComm>> comms = tcpGroup(3);
  std::promise<void> rank1Sent;
  Status status0, status1;
  std::thread rank1([&] {
    std::vector<float> x(8, 1.0f);
    rank1Sent.set_value(); // its frame is at most in flight: rank 0 reads rank 1 first anyway
    status1 = comms[1]->allReduce(x.data(), x.size());
  });
  rank1Sent.get_future().wait();
  comms[2]->disconnect("rank 2 leaves");
  const auto start = std::chrono::steady_clock::now();
  std::vector<float> x(8, 1.0f);
  status0 = comms[0]->allReduce(x.data(), x.size());
  rank1.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_FALSE(status0.ok());
  EXPECT_EQ(status0.code(), StatusCode::Unavailable);
  EXPECT_NE(status0.message().find("rank 2"), std::string::npos) << status0.message();
  ASSERT_FALSE(status1.ok());
  EXPECT_NE(status1.message().find("rank 0"), std::string::npos) << status1.message();
  EXPECT_EQ(comms[0]->missingRanks(), (std::vector<int>{1, 2}));
  EXPECT_NE(comms[0]->lastError().find("rank 2"), std::string::npos);
  // The group is over until the ranks rejoin: collectives fail at once, naming a missing rank.
  Status again = comms[0]->allReduce(x.data(), x.size());
  EXPECT_NE(again.message().find("rank 1 is not connected"), std::string::npos) << again.message();
}

TEST(TcpComm, AQuietPeerTimesOutNamingIt) {
  TcpCommOptions options;
  options.timeoutMs = 300;
  std::vector<std::unique_ptr<TcpComm>> comms = tcpGroup(2, {options});
  // Rank 1 stays connected but never joins the collective.
  const auto start = std::chrono::steady_clock::now();
  std::vector<float> piece(2, 1.0f), out(4);
  Status s = comms[0]->allGather(piece.data(), out.data(), 1, 2, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 1 did not answer within 300 ms during an all-gather"),
            std::string::npos)
      << s.message();
}

TEST(TcpComm, CheckPeersTellsAClosedConnectionFromAFrameWaitingToBeRead) {
  // What an NCCL wait watches (NcclCommOptions::watch): it must not take a peer that got ahead
  // (its next frame already sent) for a dead one, nor consume that frame.
  std::vector<std::unique_ptr<TcpComm>> comms = tcpGroup(3);
  EXPECT_TRUE(comms[0]->checkPeers("a wait").ok());
  EXPECT_TRUE(comms[1]->checkPeers("a wait").ok());
  std::vector<float> sum(4, 0.0f);
  Status status1;
  std::thread rank1([&] {
    std::vector<float> x(4, 1.0f);
    status1 = comms[1]->allReduce(x.data(), x.size()); // sends its part, waits for the sum
  });
  // Rank 1's frame may or may not have arrived yet: either way rank 1 is alive.
  EXPECT_TRUE(comms[0]->checkPeers("a wait").ok());
  comms[2]->disconnect("rank 2 leaves");
  // The close reaches rank 0's socket promptly, but not synchronously; the deadline only keeps
  // a broken checkPeers from hanging the test.
  Status seen = Status::success();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (seen.ok() && std::chrono::steady_clock::now() < deadline) {
    seen = comms[0]->checkPeers("a wait");
    std::this_thread::yield();
  }
  rank1.join();
  EXPECT_EQ(seen.code(), StatusCode::Unavailable);
  EXPECT_NE(seen.message().find("tensor-parallel rank 2 closed the connection during a wait"),
            std::string::npos)
      << seen.message();
  // Like a failed collective, it ends the group, so rank 1 learns at once.
  EXPECT_EQ(comms[0]->missingRanks(), (std::vector<int>{1, 2}));
  ASSERT_FALSE(status1.ok());
  EXPECT_NE(status1.message().find("rank 0"), std::string::npos) << status1.message();
}

TEST(TcpComm, CheckPeersLeavesAFrameForTheCollectiveThatReadsIt) {
  // Rank 1 sends a heartbeat every millisecond, so its frame arrives among heartbeats, which
  // checkPeers drops; the frame must come through whole.
  TcpCommOptions busy;
  busy.heartbeatMs = 1;
  std::vector<std::unique_ptr<TcpComm>> comms = tcpGroup(2, {TcpCommOptions{}, busy});
  std::vector<float> piece0 = {1.0f, 2.0f}, piece1 = {3.0f, 4.0f}, out0(4), out1(4);
  Status status1;
  std::thread rank1([&] { status1 = comms[1]->allGather(piece1.data(), out1.data(), 1, 2, 1); });
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(comms[0]->checkPeers("a wait").ok());
  }
  ASSERT_TRUE(comms[0]->allGather(piece0.data(), out0.data(), 1, 2, 1).ok());
  rank1.join();
  ASSERT_TRUE(status1.ok()) << status1.toString();
  EXPECT_EQ(out0, (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
  EXPECT_EQ(out1, out0);
}

/// Options of a rank that never sends a heartbeat: to its peers, a stopped process.
TcpCommOptions silent() {
  TcpCommOptions options;
  options.heartbeatMs = 0;
  return options;
}

TEST(TcpComm, ASilentPeerIsFoundBySilenceNotByTheTimeout) {
  TcpCommOptions patient;
  patient.timeoutMs = 600000;
  patient.silenceMs = 300;
  std::vector<std::unique_ptr<TcpComm>> comms = tcpGroup(2, {patient, silent()});
  std::vector<float> x(4, 1.0f);
  Status s = comms[0]->allReduce(x.data(), x.size());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tensor-parallel rank 1 sent nothing for 300 ms, not even a "
                             "heartbeat"),
            std::string::npos)
      << s.message();
}

TEST(TcpComm, ALivePeerMayComputeLongerThanTheSilenceBound) {
  // Rank 1 computes for 1.5 s before it joins; its heartbeats (every 50 ms) keep it alive for
  // rank 0, whose silence bound is 500 ms and whose timeout is ten minutes.
  TcpCommOptions patient;
  patient.timeoutMs = 600000;
  patient.silenceMs = 500;
  TcpCommOptions beating;
  beating.heartbeatMs = 50;
  std::vector<std::unique_ptr<TcpComm>> comms = tcpGroup(2, {patient, beating});
  Status status1;
  std::thread rank1([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    std::vector<float> x(4, 2.0f);
    status1 = comms[1]->allReduce(x.data(), x.size());
  });
  std::vector<float> x(4, 1.0f);
  Status status0 = comms[0]->allReduce(x.data(), x.size());
  rank1.join();
  ASSERT_TRUE(status0.ok()) << status0.toString();
  ASSERT_TRUE(status1.ok()) << status1.toString();
  EXPECT_EQ(x, std::vector<float>(4, 3.0f));
}

TEST(TcpComm, CheckPeersDropsHeartbeatsAndFindsASilentPeer) {
  // Rank 1 beats every 10 ms, rank 2 never: checkPeers keeps dropping rank 1's heartbeats and,
  // once rank 2 has been silent for rank 0's 500 ms, names it.
  TcpCommOptions watching;
  watching.silenceMs = 500;
  TcpCommOptions beating;
  beating.heartbeatMs = 10;
  std::vector<std::unique_ptr<TcpComm>> comms = tcpGroup(3, {watching, beating, silent()});
  Status seen = Status::success();
  int checks = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (seen.ok() && std::chrono::steady_clock::now() < deadline) {
    seen = comms[0]->checkPeers("a wait");
    ++checks;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_FALSE(seen.ok());
  EXPECT_GT(checks, 1);
  EXPECT_NE(seen.message().find("tensor-parallel rank 2 sent nothing for"), std::string::npos)
      << seen.message();
  EXPECT_NE(seen.message().find("during a wait"), std::string::npos) << seen.message();
}

std::string hexDigest(const Sha256Digest &d) { return hexOf(d.data(), d.size()); }

TEST(TcpComm, Sha256AndHmacMatchThePublishedVectors) {
  // FIPS 180-4 examples.
  EXPECT_EQ(hexDigest(Sha256().add("abc").finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hexDigest(Sha256().finish()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(
      hexDigest(Sha256().add("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq").finish()),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // A million 'a's, added in pieces that straddle the 64-byte blocks.
  Sha256 million;
  const std::string piece(1000, 'a');
  for (int i = 0; i < 1000; ++i) {
    million.add(piece);
  }
  EXPECT_EQ(hexDigest(million.finish()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // RFC 4231 test cases 1, 2, 3, 4, 6 and 7 (5 is a truncated MAC).
  struct Case {
    std::string key, data, mac;
  };
  std::string key4;
  for (int i = 1; i <= 25; ++i) {
    key4 += static_cast<char>(i);
  }
  const std::vector<Case> cases = {
      {std::string(20, '\x0b'), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::string(20, '\xaa'), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {key4, std::string(50, '\xcd'),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {std::string(131, '\xaa'),
       "This is a test using a larger than block-size key and a larger than block-size data. "
       "The key needs to be hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(hexDigest(hmacSha256(cases[i].key, cases[i].data)), cases[i].mac) << "case " << i;
  }
  Sha256Digest a = hmacSha256("k", "m"), b = a;
  EXPECT_TRUE(digestsEqual(a, b));
  b[31] ^= 1;
  EXPECT_FALSE(digestsEqual(a, b));
}

/// A raw connection to rank 0's port that sends `bytes` (maybe none) and stays open.
class RawPeer {
public:
  RawPeer(int port, const std::string &bytes) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr *>(&to), sizeof to), 0);
    if (!bytes.empty()) {
      EXPECT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
                static_cast<ssize_t>(bytes.size()));
    }
  }
  ~RawPeer() { ::close(fd_); }

private:
  int fd_ = -1;
};

TEST(TcpComm, OnlyAWorkerHoldingTheSecretJoins) {
  TcpCommOptions secret;
  secret.secret = "the group's secret, as a file holds it";
  auto head = std::move(TcpComm::listen("127.0.0.1", 0, 2, secret)).value();
  for (const char *other : {"", "another secret, of another group"}) {
    TcpCommOptions wrong;
    wrong.secret = other;
    auto impostor =
        std::move(TcpComm::worker("127.0.0.1", head->port(), 1, 2, "id", wrong)).value();
    std::thread accept([&] {
      Expected<int> r = head->acceptPending(20000, admitAll());
      EXPECT_FALSE(r.ok());
    });
    // Rank 0 proves the secret first: the worker finds that rank 0's MAC is not its own, and
    // gives up for good (a retry would not change the secrets).
    Status refused = impostor->connect(20000);
    accept.join();
    EXPECT_EQ(refused.code(), StatusCode::InvalidArgument) << refused.toString();
    EXPECT_NE(refused.message().find("shared secret"), std::string::npos) << refused.message();
    EXPECT_FALSE(head->complete());
  }
  auto member = std::move(TcpComm::worker("127.0.0.1", head->port(), 1, 2, "id", secret)).value();
  std::thread accept([&] { EXPECT_EQ(*head->acceptPending(20000, admitAll()), 1); });
  EXPECT_TRUE(member->connect(20000).ok());
  accept.join();
  EXPECT_TRUE(head->complete());
}

TEST(TcpComm, AWorkerThatCannotProveTheSecretIsRefusedByRankZero) {
  // A client that answers the challenge with a wrong MAC (it holds no secret but replays what it
  // can): rank 0 refuses it without admitting it.
  TcpCommOptions secret;
  secret.secret = "the group's secret, as a file holds it";
  auto head = std::move(TcpComm::listen("127.0.0.1", 0, 2, secret)).value();
  // A hello of the current protocol, then a proof of 32 zero bytes, sent without reading the
  // challenge.
  std::string hello(12 + 32, '\0');
  const uint32_t version = 2;
  const int32_t rank = 1, world = 2;
  std::memcpy(hello.data(), &version, 4);
  std::memcpy(hello.data() + 4, &rank, 4);
  std::memcpy(hello.data() + 8, &world, 4);
  auto frame = [](uint32_t kind, const std::string &payload) {
    struct {
      uint32_t magic, kind;
      uint64_t bytes;
    } header{0x544d4c47, kind, payload.size()};
    return std::string(reinterpret_cast<const char *>(&header), sizeof header) + payload;
  };
  RawPeer forger(head->port(), frame(1, hello) + frame(17, std::string(32, '\0')));
  Expected<int> r = head->acceptPending(20000, admitAll());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("did not prove the tensor-parallel shared secret"),
            std::string::npos)
      << r.status().message();
  EXPECT_FALSE(head->complete());
}

TEST(TcpComm, SilentAndGarbageConnectionsDoNotHoldUpAJoiningWorker) {
  // Their handshakes would last a minute; the worker's completes meanwhile, at once.
  TcpCommOptions options;
  options.helloTimeoutMs = 60000;
  auto head = std::move(TcpComm::listen("127.0.0.1", 0, 2, options)).value();
  RawPeer silent(head->port(), "");
  RawPeer partial(head->port(), "GLMT"); // the start of a frame, never finished
  auto worker = std::move(TcpComm::worker("127.0.0.1", head->port(), 1, 2, "id", options)).value();
  std::thread join([&] { EXPECT_TRUE(worker->connect(20000).ok()); });
  Expected<int> joined = head->acceptPending(20000, admitAll());
  join.join();
  ASSERT_TRUE(joined.ok()) << joined.status().toString();
  EXPECT_EQ(*joined, 1);
  EXPECT_TRUE(head->complete());
  // Garbage is dropped as soon as it shows.
  RawPeer garbage(head->port(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  std::optional<Expected<TcpComm::Candidate>> dropped;
  while (!dropped) {
    dropped = head->handshake(20000);
  }
  ASSERT_FALSE(dropped->ok());
  EXPECT_NE(dropped->status().message().find("not a glmc TCP frame"), std::string::npos)
      << dropped->status().message();
}

TEST(TcpComm, RefusedIdentitiesAndRejoins) {
  auto head = std::move(TcpComm::listen("127.0.0.1", 0, 2)).value();
  auto admit = [](int rank, const std::string &identity) {
    return identity == "good" ? Status::success()
                              : invalidArgument("rank ", rank, " has identity ", identity);
  };
  auto bad = std::move(TcpComm::worker("127.0.0.1", head->port(), 1, 2, "bad")).value();
  std::thread accept([&] {
    Expected<int> r = head->acceptPending(20000, admit);
    EXPECT_FALSE(r.ok());
  });
  Status refused = bad->connect(20000);
  accept.join();
  EXPECT_EQ(refused.code(), StatusCode::InvalidArgument);
  EXPECT_NE(refused.message().find("rank 1 has identity bad"), std::string::npos)
      << refused.message();
  EXPECT_FALSE(head->complete());

  // A worker of a different world is refused too.
  auto wrongWorld = std::move(TcpComm::worker("127.0.0.1", head->port(), 1, 3, "good")).value();
  accept = std::thread([&] { EXPECT_FALSE(head->acceptPending(20000, admit).ok()); });
  Status s = wrongWorld->connect(20000);
  accept.join();
  EXPECT_NE(s.message().find("TP 3"), std::string::npos) << s.message();

  // The right one joins; after the group ends it rejoins and collectives work again.
  auto good = std::move(TcpComm::worker("127.0.0.1", head->port(), 1, 2, "good")).value();
  for (int round = 0; round < 2; ++round) {
    accept = std::thread([&] { EXPECT_EQ(*head->acceptPending(20000, admit), 1); });
    ASSERT_TRUE(good->connect(20000).ok());
    accept.join();
    ASSERT_TRUE(head->complete());
    float a = 1.5f, b = 2.0f;
    std::thread worker([&] { EXPECT_TRUE(good->allReduce(&b, 1).ok()); });
    EXPECT_TRUE(head->allReduce(&a, 1).ok());
    worker.join();
    EXPECT_EQ(a, 3.5f);
    EXPECT_EQ(b, 3.5f);
    head->disconnect("next round");
  }
}

} // namespace
} // namespace glm::runtime

// `glmc worker`: one tensor-parallel rank in its own process. It loads its weight slices, joins
// rank 0 (`glmc serve --tp-listen`), proves it has the same plan and checkpoint, then makes the
// engine calls rank 0 sends, in lockstep; when rank 0 drops it, it rejoins.
#include "runtime/comm/TcpComm.h"
#include "runtime/engine/CpuEngine.h"
#include "runtime/engine/LockstepEngine.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"
#include "tools/glmc/OpenEngine.h"

#include <cstdio>

namespace glm::tools {

int runWorker(const std::vector<std::string> &args) {
  CommandLine cl("worker");
  cl.option("model").option("rank").option("head").option("wait").option("tp-timeout");
  cl.positional(1, 1);
  if (!cl.parseOrReport(args)) {
    return 2;
  }
  if (!cl.get("model") || !cl.get("rank") || !cl.get("head")) {
    return cl.fail(invalidArgument("--model DIR, --rank R and --head HOST:PORT are required"));
  }
  Expected<std::optional<int64_t>> rank = cl.getInt("rank", 1, 1 << 16);
  Expected<std::optional<int64_t>> wait = cl.getInt("wait", 1, 1 << 24);
  if (!rank.ok() || !wait.ok()) {
    return cl.fail(!rank.ok() ? rank.status() : wait.status());
  }
  // How long to keep trying to reach rank 0, at start and after losing it.
  const int waitMs = static_cast<int>(wait->value_or(300) * 1000);
  Expected<std::optional<int64_t>> tpTimeout =
      cl.getInt("tp-timeout", kMinTpTimeoutS, kMaxTpTimeoutS);
  if (!tpTimeout.ok()) {
    return cl.fail(tpTimeout.status());
  }
  Expected<std::pair<std::string, int>> head = runtime::parseHostPort(*cl.get("head"));
  if (!head.ok()) {
    return cl.fail(head.status().withContext("--head"));
  }
  Expected<std::unique_ptr<runtime::PlanFile>> plan = runtime::PlanFile::open(cl.positionals()[0]);
  if (!plan.ok()) {
    return cl.fail(plan.status());
  }
  if ((*plan)->root().target()->arch() != plan::Arch::Cpu) {
    return cl.fail(invalidArgument((*plan)->source(), ": workers run plans compiled with "
                                                      "--target cpu for now"));
  }
  const int world = static_cast<int>((*plan)->root().tp());
  Expected<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::open(*cl.get("model"));
  if (!checkpoint.ok()) {
    return cl.fail(checkpoint.status());
  }
  Expected<std::unique_ptr<runtime::TcpComm>> comm = runtime::TcpComm::worker(
      head->first, head->second, static_cast<int>(**rank), world,
      runtime::lockstepIdentity(**plan, **checkpoint), tpTimeoutOption(*tpTimeout));
  if (!comm.ok()) {
    return cl.fail(comm.status().withContext((*plan)->source()));
  }
  runtime::CpuEngineOptions options;
  options.comm = comm->get();
  Expected<std::unique_ptr<runtime::CpuEngine>> engine =
      runtime::CpuEngine::create(std::move(plan).value(), **checkpoint, options);
  if (!engine.ok()) {
    return cl.fail(engine.status());
  }
  auto log = [](const std::string &message) {
    std::fprintf(stderr, "glmc worker: %s\n", message.c_str());
  };
  while (true) {
    if (Status s = (*comm)->connect(waitMs); !s.ok()) {
      return cl.fail(s);
    }
    std::printf("glmc worker: rank %d of %d joined rank 0 at %s:%d\n", static_cast<int>(**rank),
                world, head->first.c_str(), head->second);
    std::fflush(stdout);
    const Status why = runtime::runLockstepWorker(**comm, **engine, log);
    log(strCat("lost rank 0 (", why.message(), "); rejoining"));
  }
}

} // namespace glm::tools

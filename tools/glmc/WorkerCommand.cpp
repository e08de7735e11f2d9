// `glmc worker`: one tensor-parallel rank in its own process. It loads its weight slices (digesting
// their bytes as it copies them), joins rank 0 (`glmc serve --tp-listen`), proves it holds the
// group's secret, the same plan and checkpoint and the weight bytes rank 0 expects for its rank,
// then makes the engine calls rank 0 sends, in lockstep; when rank 0 drops it, it rejoins.
#include "models/glm53/Config.h"
#include "runtime/comm/TcpComm.h"
#include "runtime/engine/LockstepEngine.h"
#include "tools/glmc/AblateOption.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"
#include "tools/glmc/OpenEngine.h"
#include "tools/glmc/PlanMemory.h"

#include <cstdio>

namespace glm::tools {

int runWorker(const std::vector<std::string> &args) {
  CommandLine cl("glmc worker", "PLAN.glmp --model DIR --rank R --head HOST:PORT [options]",
                 "Tensor-parallel rank R of a --tp N plan: joins `glmc serve --tp-listen` at "
                 "HOST:PORT (same plan and\ncheckpoint), runs its calls in lockstep and rejoins "
                 "when dropped.");
  cl.option("model", "DIR", "the checkpoint the plan was compiled from")
      .option("rank", "R", "this process's rank, 1 to N-1")
      .option("head", "HOST:PORT", "rank 0's --tp-listen address")
      .option("wait", "SECONDS", "exit when rank 0 cannot be reached for this long (default 300)")
      .option("device", "N", "the CUDA device of a GPU plan (default 0)");
  addTpOptions(cl);
  addMemoryReserveOption(cl);
  cl.positional(1, 1);
  addAblateOptions(cl);
  if (std::optional<int> exit = cl.parseOrExit(args)) {
    return *exit;
  }
  if (!cl.get("model") || !cl.get("rank") || !cl.get("head")) {
    return cl.fail(invalidArgument("--model DIR, --rank R and --head HOST:PORT are required"));
  }
  Expected<std::optional<int64_t>> rank = cl.getInt("rank", 1, 1 << 16);
  Expected<std::optional<int64_t>> wait = cl.getInt("wait", 1, 1 << 24);
  Expected<std::optional<int64_t>> device = cl.getInt("device", 0, 1 << 16);
  for (const auto *value : {&rank, &wait, &device}) {
    if (!value->ok()) {
      return cl.fail(value->status());
    }
  }
  // How long to keep trying to reach rank 0, at start and after losing it.
  const int waitMs = static_cast<int>(wait->value_or(300) * 1000);
  Expected<runtime::TcpCommOptions> tpOptions = tpOptionsFrom(cl);
  if (!tpOptions.ok()) {
    return cl.fail(tpOptions.status());
  }
  Expected<std::pair<std::string, int>> head = runtime::parseHostPort(*cl.get("head"));
  if (!head.ok()) {
    return cl.fail(head.status().withContext("--head"));
  }
  Expected<std::unique_ptr<runtime::PlanFile>> plan = runtime::PlanFile::open(cl.positionals()[0]);
  if (!plan.ok()) {
    return cl.fail(plan.status());
  }
  if (device->has_value() && (*plan)->root().target()->arch() == plan::Arch::Cpu) {
    return cl.fail(invalidArgument("--device picks the GPU of a GPU plan's rank; ",
                                   (*plan)->source(), " was compiled with --target cpu"));
  }
  const int world = static_cast<int>((*plan)->root().tp());
  // Before any weight loads (on a GB10 running out freezes the machine).
  if (Status fits = checkHostMemoryForPlan(cl, **plan, 1); !fits.ok()) {
    return cl.fail(fits);
  }
  Expected<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::open(*cl.get("model"));
  if (!checkpoint.ok()) {
    return cl.fail(checkpoint.status());
  }
  Expected<glm53::Glm53Config> config = glm53::loadGlm53Config(*cl.get("model"));
  if (!config.ok()) {
    return cl.fail(config.status());
  }
  Expected<std::optional<Ablation>> ablation = ablationFromOptions(cl, *config);
  if (!ablation.ok()) {
    return cl.fail(ablation.status());
  }
  WeightLoadOptions weights;
  if (*ablation) {
    weights.ablation = &**ablation;
  }
  // The load digests the weight bytes it reads, which the identity presents to rank 0.
  WeightDigest digest;
  weights.digest = &digest;
  const std::string identity = runtime::lockstepIdentity(**plan, **checkpoint, weights.ablation);
  Expected<std::unique_ptr<runtime::TcpComm>> comm = runtime::TcpComm::worker(
      head->first, head->second, static_cast<int>(**rank), world, identity, *tpOptions);
  if (!comm.ok()) {
    return cl.fail(comm.status().withContext((*plan)->source()));
  }
  // The device transport is rank 0's choice, sent when the group forms.
  Expected<ProcessRank> engine = openProcessRank(std::move(plan).value(), **checkpoint, **comm,
                                                 static_cast<int>(device->value_or(0)),
                                                 runtime::DeviceTransport::Nccl, weights);
  if (!engine.ok()) {
    return cl.fail(engine.status());
  }
  (*comm)->setIdentity(
      runtime::withWeightDigest(identity, digest.hex(static_cast<uint32_t>(**rank))));
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
    const Status why = runtime::runLockstepWorker(**comm, *engine->engine, log, engine->formGroup);
    if ((*comm)->complete()) {
      // Still connected: this rank could not set up its part of the group, and would not on a
      // rejoin either (see runLockstepWorker).
      return cl.fail(why.withContext(strCat("rank ", **rank)));
    }
    log(strCat("lost rank 0 (", why.message(), "); rejoining"));
  }
}

} // namespace glm::tools

// `glmc up`'s checks of both machines: each failure says what is wrong and what to do.
#include "tools/glmc/UpChecks.h"

#include <algorithm>
#include <arpa/inet.h>
#include <map>
#include <sstream>

namespace glm::tools {

Status checkSameBuild(const MachineFacts &head, const MachineFacts &worker,
                      const MachineNames &names) {
  if (head.planFormat != worker.planFormat) {
    return Status(StatusCode::Unavailable,
                  strCat(names.worker, "'s glmc reads plan format ", worker.planFormat, " and ",
                         names.head, "'s writes format ", head.planFormat,
                         ": install the same glmc build on both (--worker-glmc / "
                         "GLMC_WORKER_GLMC names the worker's)"));
  }
  return Status::success();
}

Status checkGpu(const PlanMemory &plan, const MachineFacts &facts, const std::string &where) {
  if (plan.target == "cpu") {
    return Status::success();
  }
  if (facts.gpus.empty()) {
    return Status(StatusCode::Unavailable,
                  strCat(where, " has no CUDA GPU for the ", plan.target, " plan (",
                         facts.gpuError.empty() ? "none found" : facts.gpuError,
                         "): install the NVIDIA driver there, or compile for the CPU (--target "
                         "cpu / GLMC_TARGET=cpu)"));
  }
  const GpuFacts &gpu = facts.gpus.front();
  if (gpu.arch != plan.target) {
    return Status(StatusCode::Unavailable,
                  strCat(where, "'s GPU is a ", gpu.name, " (", gpu.arch, "), and the plan is for ",
                         plan.target, ": set --target / GLMC_TARGET to ", gpu.arch));
  }
  return Status::success();
}

Status checkCheckpoint(const MachineFacts &head, const MachineFacts &worker,
                       const MachineNames &names) {
  const CheckpointFacts &here = head.checkpoint, &there = worker.checkpoint;
  if (!here.error.empty()) {
    return notFound("the checkpoint ", here.dir, " on ", names.head, " ", here.error,
                    ": give the checkpoint directory (MODEL_DIR, --model / GLMC_MODEL)");
  }
  const std::string copyHint =
      strCat("copy it there (e.g. rsync -a --delete ", here.dir, "/ <worker>:", there.dir,
             "/), or name the worker's copy with --worker-model / GLMC_WORKER_MODEL");
  if (!there.error.empty()) {
    return notFound("the checkpoint ", there.dir, " on ", names.worker, " ", there.error, ": ",
                    copyHint);
  }
  std::map<std::string, const CheckpointFileFacts *> theirs;
  for (const CheckpointFileFacts &f : there.files) {
    theirs[f.name] = &f;
  }
  for (const CheckpointFileFacts &f : here.files) {
    auto it = theirs.find(f.name);
    if (it == theirs.end()) {
      return notFound(names.worker, "'s checkpoint ", there.dir, " lacks ", f.name, ": ", copyHint);
    }
    if (it->second->size != f.size) {
      return Status(StatusCode::Unavailable,
                    strCat(names.worker, "'s ", there.dir, "/", f.name, " is ", it->second->size,
                           " bytes, ", f.size, " on ", names.head,
                           " (a partial copy?): ", copyHint));
    }
    if (it->second->hash != f.hash) {
      return Status(StatusCode::Unavailable,
                    strCat(names.worker, "'s ", there.dir, "/", f.name,
                           " has the same size but other bytes than ", names.head, "'s (",
                           here.hashMode, " SHA-256 ", it->second->hash.substr(0, 12), " against ",
                           f.hash.substr(0, 12), "): ", copyHint));
    }
  }
  std::map<std::string, bool> ours;
  for (const CheckpointFileFacts &f : here.files) {
    ours[f.name] = true;
  }
  for (const CheckpointFileFacts &f : there.files) {
    if (!ours.count(f.name) && f.name.size() > 12 &&
        f.name.compare(f.name.size() - 12, 12, ".safetensors") == 0) {
      return Status(StatusCode::Unavailable,
                    strCat(names.worker, "'s checkpoint ", there.dir, " has ", f.name, ", which ",
                           names.head, "'s lacks: the two are different checkpoints; ", copyHint));
    }
  }
  return Status::success();
}

Status checkMachineMemory(const PlanMemory &plan, const MachineFacts &facts, int ranksHere,
                          uint64_t reserve, const std::string &where) {
  if (!facts.memError.empty()) {
    return Status(StatusCode::Unavailable,
                  strCat(where, ": the free memory is unknown (", facts.memError, ")"));
  }
  if (plan.unifiedMemory) {
    return checkMemoryFits(plan, ranksHere, facts.memAvailable, reserve, where);
  }
  // A discrete GPU holds its rank's arenas; the host needs only its reserve.
  if (!facts.gpus.empty() && facts.gpus.front().memoryBytes < plan.perRankBytes) {
    PlanMemory device = plan;
    return checkMemoryFits(device, 1, facts.gpus.front().memoryBytes, 0,
                           strCat(where, "'s GPU (", facts.gpus.front().name, ")"));
  }
  if (facts.memAvailable < reserve) {
    return Status(StatusCode::Unavailable,
                  strCat(where, ": only ", byteSizeText(facts.memAvailable),
                         " of memory is available, below the ", byteSizeText(reserve),
                         " host reserve: free memory there, or lower --memory-reserve / "
                         "GLMC_MEMORY_RESERVE"));
  }
  return Status::success();
}

Status checkPortsFree(const MachineFacts &head, const std::vector<int> &ports,
                      const std::vector<std::string> &settings, const std::vector<int> &heldByUs) {
  for (size_t i = 0; i < ports.size(); ++i) {
    const int port = ports[i];
    for (size_t j = 0; j < i; ++j) {
      if (ports[j] == port) {
        return invalidArgument(settings[j], " and ", settings[i], " are both ", port,
                               ": rank 0 needs two ports");
      }
    }
    const bool busy =
        std::find(head.portsInUse.begin(), head.portsInUse.end(), port) != head.portsInUse.end();
    const bool ours = std::find(heldByUs.begin(), heldByUs.end(), port) != heldByUs.end();
    if (busy && !ours) {
      return Status(StatusCode::Unavailable,
                    strCat("port ", port, " (", settings[i],
                           ") is already in use on this machine: stop what listens there (ss "
                           "-ltnp 'sport = :",
                           port, "' shows it), or choose another port"));
    }
  }
  return Status::success();
}

bool isLoopbackAddress(const std::string &address) {
  in_addr v4{};
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, address.c_str(), &v6) == 1) {
    static const uint8_t kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::equal(v6.s6_addr, v6.s6_addr + 16, kLoopback)) {
      return true;
    }
    return std::equal(v6.s6_addr, v6.s6_addr + 12, kMapped) && v6.s6_addr[12] == 127;
  }
  return false;
}

std::vector<std::string> loopbackInterfacesSelected(const std::string &ncclSocketIfname,
                                                    const MachineFacts &facts) {
  std::vector<std::string> selected;
  if (ncclSocketIfname.empty()) {
    return selected;
  }
  std::string list = ncclSocketIfname;
  // "^a,b": every interface except these; NCCL then may pick lo only if it is not excluded, and
  // it never picks lo by itself when another interface is up, so an exclusion list is fine.
  if (list[0] == '^') {
    return selected;
  }
  bool exact = false;
  if (list[0] == '=') {
    exact = true;
    list = list.substr(1);
  }
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) {
      continue;
    }
    for (const InterfaceFacts &i : facts.interfaces) {
      const bool matches = exact ? i.name == item : i.name.rfind(item, 0) == 0;
      if (matches && i.loopback &&
          std::find(selected.begin(), selected.end(), i.name) == selected.end()) {
        selected.push_back(i.name);
      }
    }
    // "lo" names the loopback interface even where the facts list it without an address.
    if ((item == "lo" || (!exact && std::string("lo").rfind(item, 0) == 0)) &&
        std::find(selected.begin(), selected.end(), "lo") == selected.end()) {
      selected.push_back("lo");
    }
  }
  return selected;
}

Status checkNoLoopback(bool twoMachines, const std::string &headAddress,
                       const std::vector<std::string> &headAddresses,
                       const std::string &ncclSocketIfname, const MachineFacts &head,
                       const MachineFacts &worker, const MachineNames &names) {
  if (!twoMachines) {
    return Status::success();
  }
  for (const std::string &address : headAddresses) {
    if (isLoopbackAddress(address)) {
      return invalidArgument(
          "the head address ", headAddress, (address == headAddress ? "" : " (" + address + ")"),
          " is a loopback address, and the worker is another machine: it would dial itself. Set "
          "--head-address / GLMC_HEAD_ADDRESS to ",
          names.head, "'s address on the link to the worker (ip -4 addr)");
    }
    for (const InterfaceFacts &i : head.interfaces) {
      if (i.address == address && i.loopback) {
        return invalidArgument(
            "the head address ", headAddress, " is held by the loopback interface ", i.name, " on ",
            names.head,
            " (an alias on lo): the worker cannot reach it over a cable. Set --head-address / "
            "GLMC_HEAD_ADDRESS to the address of the port cabled to the worker");
      }
    }
  }
  for (const auto *m : {&head, &worker}) {
    const std::vector<std::string> lo = loopbackInterfacesSelected(ncclSocketIfname, *m);
    if (!lo.empty()) {
      return invalidArgument("NCCL_SOCKET_IFNAME=", ncclSocketIfname,
                             " selects the loopback "
                             "interface ",
                             lo.front(), " on ", m == &head ? names.head : names.worker,
                             ": NCCL would bootstrap over 127.0.0.1 and the two machines' ranks "
                             "never meet. Name the interface of the link between them (e.g. "
                             "enp1s0f0np0; ip -br addr lists them)");
    }
  }
  return Status::success();
}

} // namespace glm::tools

// `glmc up`'s checks of both machines, over their facts (UpFacts.h): each returns success or a
// refusal that names what is wrong and what to do. They run before anything is stopped or
// started, so a restart whose settings fail them leaves the running server up.
#pragma once

#include "base/Status.h"
#include "tools/glmc/PlanMemory.h"
#include "tools/glmc/UpFacts.h"

#include <string>
#include <vector>

namespace glm::tools {

/// The two machines as the checks name them: "this machine (head)", "the worker (user@spark2)".
struct MachineNames {
  std::string head = "this machine";
  std::string worker = "the worker";
};

/// Both machines run the same glmc plan format (the plan compiled here must load there).
Status checkSameBuild(const MachineFacts &head, const MachineFacts &worker,
                      const MachineNames &names);

/// A GPU plan needs a GPU of its arch on the machine; a CPU plan needs none.
Status checkGpu(const PlanMemory &plan, const MachineFacts &facts, const std::string &where);

/// The checkpoint is readable on this machine, and the worker's holds the same files with the
/// same sizes and hashes.
Status checkCheckpoint(const MachineFacts &head, const MachineFacts &worker,
                       const MachineNames &names);

/// Both machines: `ranksHere` ranks of the plan plus the reserve within MemAvailable (for a
/// discrete GPU's plan, the device's memory instead). The refusal names the largest window that
/// fits.
Status checkMachineMemory(const PlanMemory &plan, const MachineFacts &facts, int ranksHere,
                          uint64_t reserve, const std::string &where);

/// Ports rank 0 listens on are free here (`heldByUs`: ports of the server being restarted, which
/// its stop frees). `names[i]` says which setting chose ports[i].
Status checkPortsFree(const MachineFacts &head, const std::vector<int> &ports,
                      const std::vector<std::string> &settings, const std::vector<int> &heldByUs);

/// A two-machine run cannot go through loopback: the head address the worker dials must not be a
/// loopback address or one held by a loopback interface (an alias on lo), and NCCL_SOCKET_IFNAME
/// must not name a loopback interface on either machine (NCCL would bootstrap over 127.0.0.1 and
/// the ranks never meet). `headAddresses` are what the head address resolves to.
Status checkNoLoopback(bool twoMachines, const std::string &headAddress,
                       const std::vector<std::string> &headAddresses,
                       const std::string &ncclSocketIfname, const MachineFacts &head,
                       const MachineFacts &worker, const MachineNames &names);

/// Whether `address` is in 127.0.0.0/8 or ::1 (or ::ffff:127.x).
bool isLoopbackAddress(const std::string &address);

/// Whether an NCCL_SOCKET_IFNAME value selects one of `facts`' loopback interfaces: a list of
/// prefixes ("enp,eth"), "=" for exact names, "^" to exclude.
std::vector<std::string> loopbackInterfacesSelected(const std::string &ncclSocketIfname,
                                                    const MachineFacts &facts);

} // namespace glm::tools

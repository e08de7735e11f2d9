// What `glmc up` learns about a machine before it starts anything there: memory, GPUs, the
// checkpoint's files, interfaces, ports, the glmc build. Gathered on this machine directly and on
// the worker by `glmc up probe` over ssh (the same code, its facts sent back as JSON), so the
// checks (UpChecks.h) see both machines alike and unit tests can hand them fakes.
#pragma once

#include "base/Status.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace glm::tools {

struct GpuFacts {
  std::string name;
  std::string arch; // "sm_121a", "sm_90a", else "sm_<major><minor>"
  uint64_t memoryBytes = 0;
};

struct CheckpointFileFacts {
  std::string name; // relative to the checkpoint directory
  uint64_t size = 0;
  std::string hash; // SHA-256 hex, of what the checkpoint-hash mode covers
};

struct CheckpointFacts {
  std::string dir;
  std::string error; // why it could not be read (missing, not a directory, unreadable file)
  std::string hashMode;
  std::vector<CheckpointFileFacts> files; // sorted by name
};

struct InterfaceFacts {
  std::string name;
  std::string address; // numeric IPv4 or IPv6
  bool loopback = false;
};

struct MachineFacts {
  std::string hostname;
  std::string bootId; // /proc/sys/kernel/random/boot_id: two machines differ, one host matches
  uint64_t memAvailable = 0;
  std::string memError;
  std::vector<GpuFacts> gpus;
  std::string gpuError; // why no GPU was found (no driver, no device)
  CheckpointFacts checkpoint;
  std::vector<InterfaceFacts> interfaces;
  std::vector<int> portsInUse; // of the ports asked about
  uint32_t planFormat = 0;
  std::string runDir; // absolute, created when asked for
  std::string runDirError;
};

nlohmann::json toJson(const MachineFacts &facts);
Expected<MachineFacts> machineFactsFromJson(const std::string &text);

/// What to look at.
struct ProbeRequest {
  std::string modelDir;
  std::string hashMode = "sampled"; // sampled | full
  std::string cacheDir;             // full hashes are kept here (by path, size and mtime)
  std::vector<int> ports;
  std::string runDir; // created if missing; reported absolute
};

/// The facts of this machine.
MachineFacts probeThisMachine(const ProbeRequest &request);

/// The checkpoint's files the ranks read (*.safetensors, *.json, *.jinja at its top level), each
/// with its size and a SHA-256 of its safetensors header, or of the whole file when small, plus 16
/// blocks of 64 KiB spread over it (sampled), or of every byte (full).
CheckpointFacts checkpointFacts(const std::string &dir, const std::string &hashMode,
                                const std::string &cacheDir);

/// Whether a TCP port can be bound on every address (it is free to listen on).
bool portIsFree(int port);

/// This machine's address on its route to `host` (no packet is sent: a UDP socket's connect picks
/// the source address), or an error naming the host.
Expected<std::string> sourceAddressToward(const std::string &host);

/// The numeric addresses `host` resolves to.
Expected<std::vector<std::string>> resolveHost(const std::string &host);

} // namespace glm::tools

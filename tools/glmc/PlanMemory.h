// What a plan needs in memory per rank, whether a machine has it before any weight loads, and the
// largest --max-context that fits when it does not (`glmc up`, `glmc serve`, `glmc worker`).
#pragma once

#include "base/Status.h"
#include "runtime/plan/PlanFile.h"
#include "tools/glmc/CommandLine.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

namespace glm::tools {

/// Prompt states `glmc serve` keeps by default for each sequence the plan serves (--kept-states).
inline constexpr uint64_t kKeptStatesPerSequence = 4;
inline uint64_t defaultKeptStates(uint64_t maxSequences) {
  return kKeptStatesPerSequence * std::max<uint64_t>(maxSequences, 1);
}

/// A rank's memory as the plan lays it out: every arena is one allocation per rank. The state
/// arena ends in the page pool every sequence draws its pages from (page_count pages: the pool's
/// tokens plus a partly filled page per sequence, plan-size-state-pool); max_context is each
/// request's window, which the pool must hold at least once. Beside the arenas, each kept prompt
/// state is a copy of one sequence's unpaged state (its pages are the pool's), and so is each
/// sequence's verify-window checkpoint where the plan verifies windows (speculative decoding).
/// All else is fixed.
struct PlanMemory {
  uint64_t perRankBytes = 0; // all arenas of one rank
  uint64_t poolBytes = 0;    // the state pool's pages (page_count * page_bytes)
  uint64_t pageBytes = 0;    // one page of every paged state
  uint64_t pageTokens = 0;
  uint64_t pageCount = 0;
  uint64_t maxSequences = 0;
  uint64_t maxContext = 0;     // each request's window
  uint64_t alignment = 0;      // the largest arena alignment: the slack a re-planned pool may add
  uint64_t keptStateBytes = 0; // one kept prompt state's copy, a rank (the unpaged states)
  uint64_t keptStates = 0;     // how many the server keeps (planMemory: serve's default)
  uint64_t checkpoints = 0;    // verify-window checkpoints: one a sequence with verify programs
  bool unifiedMemory = false;  // CPU plans and GB10 (sm_121a): the arenas are host memory
  std::string target;

  /// Bytes of state one more token of pool costs a rank (pages are page_tokens wide).
  double stateBytesPerToken() const {
    return pageTokens == 0 ? 0.0 : static_cast<double>(pageBytes) / static_cast<double>(pageTokens);
  }
  /// The tokens the pool holds beside the sequences' partly filled pages.
  uint64_t poolTokens() const {
    return pageCount > maxSequences ? (pageCount - maxSequences) * pageTokens : 0;
  }
  /// What a rank takes in all: its arenas, its kept states and its checkpoints.
  uint64_t rankBytes() const { return perRankBytes + (keptStates + checkpoints) * keptStateBytes; }
  /// The rank's bytes that do not depend on the pool: weights, slots, activations, io, kept
  /// states, checkpoints.
  uint64_t fixedBytes() const { return rankBytes() - poolBytes; }
};

/// The plan's memory, with serve's default number of kept states (kKeptStatesPerSequence a
/// sequence); set keptStates for another --kept-states.
PlanMemory planMemory(const plan::Plan &plan);

/// The most tokens (a multiple of page_tokens) a pool can hold with the rank in `budgetPerRank`
/// bytes: the largest --pool-tokens that fits, and so the largest --max-context window (a pool
/// of one window). nullopt when not even one page per sequence fits beside the fixed bytes; a
/// plan without paged state has no pool to shrink: nullopt when it does not fit as it is.
std::optional<uint64_t> largestFittingContext(const PlanMemory &memory, uint64_t budgetPerRank);

/// /proc/meminfo's MemAvailable in bytes: what the kernel can give without swapping, page cache
/// included. On a GB10 the GPU's memory is this memory.
Expected<uint64_t> parseMemAvailable(const std::string &meminfo);
Expected<uint64_t> hostMemAvailable(const std::string &path = "/proc/meminfo");

/// "8G", "512M", "1.5T", "4096" (bytes): sizes in settings and options (binary units).
Expected<uint64_t> parseByteSize(const std::string &text);
std::string byteSizeText(uint64_t bytes);

/// Whether `ranksHere` ranks of the plan fit in `available` bytes with `reserve` left over. The
/// refusal names the machine (`where`), the figures, and the largest pool (--pool-tokens) that
/// fits beside the window, or the largest window (--max-context) when not even one does.
Status checkMemoryFits(const PlanMemory &memory, int ranksHere, uint64_t available,
                       uint64_t reserve, const std::string &where);

/// The default host reserve: what must stay free beside the ranks and their kept prompt states
/// once they run (the server's own buffers, the CUDA context, page cache for loading). On a GB10
/// running out freezes the machine instead of failing an allocation, so its default is larger.
/// (glmc compile's --host-reserve is another figure: what the pool leaves of the target's whole
/// memory, the OS's share included.)
uint64_t defaultHostReserve(const PlanMemory &memory);

/// --memory-reserve of `glmc serve` and `glmc worker`.
void addMemoryReserveOption(CommandLine &cl);
/// The check serve and worker make before loading: `ranksHere` ranks of `plan` against this
/// host's MemAvailable less the reserve (--memory-reserve, else defaultHostReserve). A plan whose
/// arenas live in a discrete GPU's memory (sm_90a) is not held to the host's memory: its
/// allocation fails by itself, cleanly.
/// `keptStates`: the server's --kept-states (serve's default when not given; a worker keeps what
/// its rank 0 asks, serve's default unless told otherwise).
Status checkHostMemoryForPlan(const CommandLine &cl, const runtime::PlanFile &plan, int ranksHere,
                              std::optional<uint64_t> keptStates = std::nullopt);

} // namespace glm::tools

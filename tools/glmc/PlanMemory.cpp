// What a plan needs in memory per rank, whether a machine has it, and the largest window that fits.
#include "tools/glmc/PlanMemory.h"

#include "runtime/engine/Engine.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace glm::tools {

PlanMemory planMemory(const plan::Plan &plan) {
  PlanMemory m;
  for (const plan::Arena *a : *plan.arenas()) {
    m.perRankBytes += a->size();
    m.alignment = std::max<uint64_t>(m.alignment, a->alignment());
  }
  if (const plan::StatePool *pool = plan.state_pool()) {
    m.pageBytes = pool->page_bytes();
    m.pageTokens = pool->page_tokens();
    m.maxSequences = pool->max_sequences();
    m.maxContext = pool->max_context();
    m.pageCount = pool->page_count();
    m.poolBytes = static_cast<uint64_t>(pool->page_count()) * pool->page_bytes();
  }
  // What Engine::keepState copies: every state that is not paged.
  if (plan.states() != nullptr) {
    for (const plan::StateLayout *s : *plan.states()) {
      if (!s->paged()) {
        m.keptStateBytes += s->unit_bytes();
      }
    }
  }
  m.keptStates = defaultKeptStates(m.maxSequences);
  // Engine::checkpointSlots copies a sequence's unpaged states before a window with drafts.
  if (runtime::Engine::maxWindowOf(plan, 1) > 1) {
    m.checkpoints = std::max<uint64_t>(m.maxSequences, 1);
  }
  m.poolBytes = std::min(m.poolBytes, m.perRankBytes);
  m.unifiedMemory = plan.target()->arch() != plan::Arch::Sm90a;
  m.target = plan.target()->name() ? plan.target()->name()->str() : "";
  return m;
}

std::optional<uint64_t> largestFittingContext(const PlanMemory &memory, uint64_t budgetPerRank) {
  const uint64_t fixed = memory.fixedBytes();
  if (memory.pageBytes == 0 || memory.pageTokens == 0) {
    return fixed <= budgetPerRank ? std::optional<uint64_t>(memory.maxContext) : std::nullopt;
  }
  // A re-planned pool may end up to one alignment unit further on.
  const uint64_t slack = memory.alignment;
  if (budgetPerRank <= fixed + slack) {
    return std::nullopt;
  }
  const uint64_t pages = (budgetPerRank - fixed - slack) / memory.pageBytes;
  // Every sequence holds a partly filled page beyond the pool's tokens: below that, nothing.
  if (pages <= memory.maxSequences) {
    return std::nullopt;
  }
  return (pages - memory.maxSequences) * memory.pageTokens;
}

Expected<uint64_t> parseMemAvailable(const std::string &meminfo) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) {
      continue;
    }
    unsigned long long kib = 0;
    char unit[8] = {};
    if (std::sscanf(line.c_str(), "MemAvailable: %llu %7s", &kib, unit) != 2 ||
        std::string(unit) != "kB") {
      return formatError("/proc/meminfo: cannot read the MemAvailable line '", line, "'");
    }
    return static_cast<uint64_t>(kib) * 1024;
  }
  return notFound("/proc/meminfo has no MemAvailable line (a kernel older than 3.14?)");
}

Expected<uint64_t> hostMemAvailable(const std::string &path) {
  std::ifstream file(path);
  if (!file) {
    return ioError(path, ": cannot be read, so the free memory is unknown");
  }
  std::stringstream text;
  text << file.rdbuf();
  Expected<uint64_t> bytes = parseMemAvailable(text.str());
  if (!bytes.ok()) {
    return bytes.status().withContext(path);
  }
  return bytes;
}

Expected<uint64_t> parseByteSize(const std::string &text) {
  if (text.empty()) {
    return invalidArgument("a size is a number with an optional K, M, G or T (binary units), "
                           "got nothing");
  }
  size_t end = text.size();
  uint64_t scale = 1;
  char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  if (unit == 'B' && end >= 2) {
    // "8GB", "8GiB": the B (and i) say nothing more.
    --end;
    unit = static_cast<char>(std::toupper(static_cast<unsigned char>(text[end - 1])));
    if (unit == 'I' && end >= 2) {
      --end;
      unit = static_cast<char>(std::toupper(static_cast<unsigned char>(text[end - 1])));
    }
  }
  switch (unit) {
  case 'K':
    scale = uint64_t(1) << 10;
    --end;
    break;
  case 'M':
    scale = uint64_t(1) << 20;
    --end;
    break;
  case 'G':
    scale = uint64_t(1) << 30;
    --end;
    break;
  case 'T':
    scale = uint64_t(1) << 40;
    --end;
    break;
  default:
    break;
  }
  const std::string number = text.substr(0, end);
  double value = 0;
  auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc() || ptr != number.data() + number.size() || value < 0 ||
      !std::isfinite(value) || value * static_cast<double>(scale) > 1.8e19) {
    return invalidArgument("a size is a number with an optional K, M, G or T (binary units), got '",
                           text, "'");
  }
  return static_cast<uint64_t>(value * static_cast<double>(scale));
}

std::string byteSizeText(uint64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (uint64_t(1) << 30)) {
    std::snprintf(text, sizeof text, "%.2f GiB", b / double(uint64_t(1) << 30));
  } else if (bytes >= (uint64_t(1) << 20)) {
    std::snprintf(text, sizeof text, "%.1f MiB", b / double(uint64_t(1) << 20));
  } else if (bytes >= 1024) {
    std::snprintf(text, sizeof text, "%.1f KiB", b / 1024.0);
  } else {
    std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  }
  return text;
}

Status checkMemoryFits(const PlanMemory &memory, int ranksHere, uint64_t available,
                       uint64_t reserve, const std::string &where) {
  const uint64_t ranks = static_cast<uint64_t>(std::max(ranksHere, 1));
  const uint64_t need = ranks * memory.rankBytes() + reserve;
  if (need <= available) {
    return Status::success();
  }
  std::string rankText = ranks == 1 ? strCat("one rank of ", byteSizeText(memory.rankBytes()))
                                    : strCat(ranks, " ranks of ", byteSizeText(memory.rankBytes()));
  if (memory.keptStates > 0 && memory.keptStateBytes > 0) {
    rankText += strCat(", ", memory.keptStates, " kept prompt states of ",
                       byteSizeText(memory.keptStateBytes), " included (--kept-states)");
  }
  if (memory.checkpoints > 0 && memory.keptStateBytes > 0) {
    rankText += strCat(", ", memory.checkpoints, " verify-window checkpoints of ",
                       byteSizeText(memory.keptStateBytes), " included");
  }
  std::string message =
      strCat(where, ": not enough memory: the plan needs ", rankText, " (", memory.target, ", a ",
             memory.maxContext, "-token window, a pool of ", memory.poolTokens(),
             " tokens) plus the ", byteSizeText(reserve), " host reserve = ", byteSizeText(need),
             ", and MemAvailable is ", byteSizeText(available), ". ");
  const uint64_t budget = available > reserve ? (available - reserve) / ranks : 0;
  const std::optional<uint64_t> fits = largestFittingContext(memory, budget);
  char perToken[32];
  std::snprintf(perToken, sizeof perToken, "%.0f", memory.stateBytesPerToken());
  const std::string cost =
      strCat(" (the pool costs ", perToken, " bytes per token per rank beside ",
             byteSizeText(memory.fixedBytes()), " of weights and fixed state)");
  if (fits && memory.pageBytes > 0 && *fits >= memory.maxContext) {
    message += strCat("The largest pool that fits is --pool-tokens ", *fits, cost,
                      ", which keeps the window; or free memory on this machine");
  } else if (fits && memory.pageBytes > 0) {
    message += strCat("Not even one window fits: the largest --max-context that fits is ", *fits,
                      " tokens (with --pool-tokens ", *fits, ")", cost,
                      "; or free memory on this machine");
  } else {
    message += strCat("Not even the smallest window fits: the weights and fixed state alone are ",
                      byteSizeText(memory.fixedBytes()),
                      " per rank. Free memory on this machine, or use more ranks (--tp)");
  }
  message +=
      ". (A smaller reserve, --memory-reserve / GLMC_MEMORY_RESERVE, risks the machine: on a "
      "GB10 running out of memory freezes it instead of failing an allocation.)";
  return Status(StatusCode::Unavailable, message);
}

uint64_t defaultHostReserve(const PlanMemory &memory) {
  // GB10: the server's buffers, the CUDA driver's own allocations and the page cache the load
  // streams through share the 128 GB with the arenas (kept prompt states are counted apart, in
  // rankBytes); the peers hang near 110 GiB used. The compiler's pool already leaves 12 GiB of
  // the whole 119.2 GiB to the host, the OS's share included.
  if (memory.target == "sm_121a") {
    return uint64_t(4) << 30;
  }
  return uint64_t(1) << 30;
}

void addMemoryReserveOption(CommandLine &cl) {
  cl.option("memory-reserve", "SIZE",
            "memory to leave free beside the ranks (e.g. 8G; default 4G for a GB10\nplan, 1G "
            "otherwise): the plan's ranks plus this must fit in MemAvailable,\nchecked before any "
            "weight loads");
}

Status checkHostMemoryForPlan(const CommandLine &cl, const runtime::PlanFile &plan, int ranksHere,
                              std::optional<uint64_t> keptStates) {
  PlanMemory memory = planMemory(plan.root());
  if (keptStates) {
    memory.keptStates = *keptStates;
  }
  uint64_t reserve = defaultHostReserve(memory);
  if (std::optional<std::string> text = cl.get("memory-reserve")) {
    Expected<uint64_t> parsed = parseByteSize(*text);
    if (!parsed.ok()) {
      return parsed.status().withContext("--memory-reserve");
    }
    reserve = *parsed;
  }
  if (!memory.unifiedMemory) {
    return Status::success();
  }
  Expected<uint64_t> available = hostMemAvailable();
  if (!available.ok()) {
    return available.status();
  }
  return checkMemoryFits(memory, ranksHere, *available, reserve,
                         strCat(plan.source(), " on this machine"));
}

} // namespace glm::tools

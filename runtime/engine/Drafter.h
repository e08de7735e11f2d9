// Drafts for speculative decoding (Scheduler.cpp): a drafter guesses the tokens that follow a
// sequence's tokens, and a verify step (Engine::verifySample) keeps only the guesses equal to the
// tokens the sequence's own sampling draws there. A drafter decides the speed, never the reply.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

namespace glm::runtime {

class Drafter {
public:
  virtual ~Drafter() = default;
  /// Up to `max` guesses of the tokens that follow `tokens`: all the sequence holds, its prompt
  /// then its reply so far. Each round passes the same tokens extended by those accepted since.
  virtual std::vector<int32_t> draft(std::span<const int32_t> tokens, int64_t max) = 0;
};

/// Makes each sequence's drafter; a null drafter drafts nothing.
using DrafterFactory = std::function<std::unique_ptr<Drafter>()>;

/// Copy drafts (prompt lookup): when the last kMatch tokens occurred before, in the prompt or the
/// reply, the tokens that followed their latest earlier occurrence. An edit, a quotation or code
/// that repeats its identifiers is where they hit. The index grows with the tokens, so a round
/// costs a lookup, not a scan.
class CopyDrafter final : public Drafter {
public:
  static constexpr int64_t kMatch = 3;
  std::vector<int32_t> draft(std::span<const int32_t> tokens, int64_t max) override;

private:
  std::unordered_map<uint64_t, int64_t> latest_; // kMatch tokens -> their latest indexed start
  int64_t indexed_ = 0;                          // starts below this are indexed
};

} // namespace glm::runtime

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
  /// `headGuess` is the MTP head's guess of the next token, drawn with the last one (-1: none,
  /// a plan without the head).
  virtual std::vector<int32_t> draft(std::span<const int32_t> tokens, int32_t headGuess,
                                     int64_t max) = 0;
};

/// Makes each sequence's drafter; a null drafter drafts nothing.
using DrafterFactory = std::function<std::unique_ptr<Drafter>()>;

/// Copy drafts (prompt lookup): when the last kMatch tokens occurred before, in the prompt or the
/// reply, the tokens that followed their latest earlier occurrence. An edit, a quotation or code
/// that repeats its identifiers is where they hit. The index grows with the tokens, so a round
/// costs a lookup, not a scan.
class CopyDrafter : public Drafter {
public:
  static constexpr int64_t kMatch = 3;
  /// Ignores the head's guess.
  std::vector<int32_t> draft(std::span<const int32_t> tokens, int32_t headGuess,
                             int64_t max) override;

private:
  std::unordered_map<uint64_t, int64_t> latest_; // kMatch tokens -> their latest indexed start
  int64_t indexed_ = 0;                          // starts below this are indexed
};

/// The serving default, per sequence and round: copy drafts where the reply's last tokens
/// occurred before (up to `max`: an edit's long runs), else the MTP head's one guess. A guess
/// costs a verify row whether or not it is right, and copy drafts, when they exist, are the
/// likelier to run long.
class CopyOrHeadDrafter final : public CopyDrafter {
public:
  std::vector<int32_t> draft(std::span<const int32_t> tokens, int32_t headGuess,
                             int64_t max) override;
};

} // namespace glm::runtime

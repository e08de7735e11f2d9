// What the scheduler and `glmc generate` need of a backend: sequences with state, prefill and
// decode steps returning logits. CpuEngine (reference kernels) and CudaEngine (CUDA graphs)
// implement it over the same plan format and the same sequence bookkeeping.
#pragma once

#include "base/Status.h"
#include "kernels/sample/sample_params.h"
#include "runtime/api/EngineApi.h"
#include "runtime/schema/plan_generated.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace glm::runtime {

/// Sequence slots, kept states and the pages of the plan's state pool each holds. A page may be
/// held by several: a kept state shares the pages of the sequence it was taken from and lends them
/// to every sequence that resumes from it, since a sequence writes only the rows at or past its
/// own length (causal state); a page returns to the free list when its last holder lets it go.
class SequenceTable {
public:
  /// `pool` may be null (a plan without paged state).
  void init(int64_t maxSequences, const plan::StatePool *pool);

  /// A free slot, or Unavailable when all are taken.
  Expected<int> open();
  void close(int slot);
  /// Sequence `slot` holds nothing again: length 0, its pages let go.
  void empty(int slot);
  bool active(int slot) const;

  int64_t length(int slot) const;
  void advance(int slot, int64_t tokens);
  /// The sequence holds its first `length` tokens again (a rolled-back verify window); it keeps
  /// its pages, whose rows past `length` it writes again.
  void rewind(int slot, int64_t length);
  const std::vector<int32_t> &pages(int slot) const;
  /// Gives the sequence the pages its first `tokens` tokens need, from the free list.
  Status reserve(int slot, int64_t tokens);
  int64_t pagesNeeded(int slot, int64_t more) const;
  int64_t freePages() const { return static_cast<int64_t>(freePages_.size()); }
  int64_t pageTokens() const { return pageTokens_; }
  int64_t capacity() const { return static_cast<int64_t>(sequences_.size()); }

  /// A kept state of sequence `slot` at its length: the pages holding its tokens are shared.
  int keep(int slot);
  /// Lets a kept state's pages go (a page no one else holds is free again).
  void drop(int kept);
  bool kept(int kept) const;
  int64_t keptLength(int kept) const;
  /// Pages only kept states hold: what dropping every kept state would free.
  int64_t pagesOnlyKept() const;
  /// The page a sequence resuming from a kept state copies into a page of its own: the last,
  /// when the kept length ends inside it (the sequence will write that page's later rows).
  struct PageCopy {
    int32_t from = -1;
    int32_t to = -1;
  };
  /// Sequence `slot` (open, empty) takes kept state `kept`'s length and pages: the full ones
  /// shared, a partly filled last one replaced by a free page the caller copies into (returned;
  /// from < 0 when there is none). Unavailable when no page is free for it.
  Expected<PageCopy> resume(int kept, int slot);

private:
  struct Sequence {
    bool active = false;
    int64_t length = 0;
    std::vector<int32_t> pages;
  };
  void take(std::vector<int32_t> &pages);
  void release(std::vector<int32_t> &pages);
  std::vector<Sequence> sequences_;
  std::vector<Sequence> kept_; // kept states, by id; inactive entries are free ids
  std::vector<int32_t> freePages_;
  std::vector<int32_t> holders_; // per page: the sequences and kept states holding it
  int64_t pageTokens_ = 1;
  int64_t maxContext_ = 0;
  bool paged_ = false;
};

/// Which rows' logits a prefill returns.
enum class LogitRows { All, Last };

/// How one sequence samples in a step: its settings, and where its prompt ends (its tokens at
/// positions below promptTokens are the prompt's, which the repetition penalty also counts).
struct RowSampling {
  const SamplingParams *params = nullptr; // never null
  int64_t promptTokens = 0;
};

/// One sequence's part of a verify step (speculative decoding): the tokens it holds that its
/// state does not yet (at least one; the last is the one its next token follows), then guesses of
/// the tokens that follow them.
struct VerifyWindow {
  int slot = -1;
  std::span<const int32_t> known;
  std::span<const int32_t> drafts;
  RowSampling sampling;
};

/// What a verify step gives one sequence: the tokens serial decoding draws after its known
/// tokens, as far as the drafts agree with them (1 + the accepted drafts), and whether its state
/// took the whole window. A window not taken whole is rolled back: the state holds none of it,
/// and the sequence feeds its known and accepted tokens again in its next window.
struct VerifiedWindow {
  std::vector<SampledToken> tokens;
  bool fed = false;
};

class Engine {
public:
  virtual ~Engine() = default;

  // The sequence bookkeeping is virtual so that an engine wrapping another (LockstepEngine)
  // can forward it.

  /// A free state slot for a new sequence (its state cleared), or Unavailable when all max_seqs
  /// are taken.
  virtual Expected<int> newSequence();
  /// Frees a sequence's slot and pages.
  virtual void endSequence(int slot) { sequences_.close(slot); }
  /// A new slot holding a copy of sequence `from`'s state and length (its pages copied into pages
  /// of its own): the choices of an n > 1 request continue one prefilled prompt. Unavailable when
  /// no slot or not enough pages are free.
  virtual Expected<int> forkSequence(int from);
  /// Tokens a sequence holds.
  virtual int64_t length(int slot) const { return sequences_.length(slot); }

  // Kept states (prefix reuse, runtime/engine/PrefixCache.h): a sequence's state at its current
  // length, kept after it moves on or ends, and resumed by a new sequence whose tokens begin with
  // the same ones. A resumed sequence continues exactly as one prefilled with those tokens
  // would: its per-sequence slots are copied back and it reads the same pages. The token counts
  // the penalties read come back as those of prompt tokens, which is what the kept tokens are to
  // any request that resumes from them.

  /// Keeps sequence `slot`'s state at its length; returns the kept state's id. Its per-sequence
  /// slots are copied (on the device for a GPU engine), its pages shared.
  virtual Expected<int> keepState(int slot);
  /// A new sequence (from newSequence, nothing in it yet) takes kept state `kept`: its length,
  /// slots and pages. Unavailable when the pool has no page for a partly filled last page.
  virtual Status resumeState(int kept, int slot);
  /// Frees a kept state's copy and lets its pages go.
  virtual void dropState(int kept);
  /// Tokens a kept state holds (0 for an id not kept).
  virtual int64_t keptLength(int kept) const { return sequences_.keptLength(kept); }
  /// Pages that only kept states hold: what the pool gains when every kept state is dropped.
  virtual int64_t pagesOnlyKept() const { return sequences_.pagesOnlyKept(); }
  /// Bytes one kept state's copy of the per-sequence slots takes.
  int64_t keptStateBytes() const;
  /// State-pool pages a sequence must still take to hold `more` further tokens (0 for a plan
  /// without a pool), and the pages free now: the scheduler admits and preempts by them.
  virtual int64_t pagesNeeded(int slot, int64_t more) const {
    return sequences_.pagesNeeded(slot, more);
  }
  virtual int64_t freePages() const { return sequences_.freePages(); }
  /// Tokens a state-pool page holds.
  virtual int64_t pageTokens() const { return sequences_.pageTokens(); }
  /// Whether the engine can run calls now; an error (Unavailable) says what is missing, e.g. a
  /// tensor-parallel rank. Any thread may ask.
  virtual Status health() const { return Status::success(); }

  /// Appends `tokens` to a sequence through the plan's prefill programs (in chunks of at most the
  /// largest prefill size) and returns the logits of every row, [tokens, vocab], or of the last
  /// row only, [1, vocab] (what serving needs: at GLM-5.3's vocabulary a 512-row chunk's logits
  /// are 317 MB, which a GPU engine then need not copy back).
  virtual Expected<std::vector<float>> prefill(int slot, std::span<const int32_t> tokens,
                                               LogitRows rows = LogitRows::All);
  /// One decode step: token i goes to sequence slots[i]. Returns [slots, vocab] logits.
  virtual Expected<std::vector<float>> decode(std::span<const int> slots,
                                              std::span<const int32_t> tokens);

  /// What serving calls: prefill() and decode() with the plan's sampler, returning the token that
  /// follows each sequence (and the logprobs asked for) instead of logits. Only those cross to the
  /// host. Every chunk of a prefill runs with the sequence's sampling (its token counts follow
  /// the tokens); the last chunk's last row gives the token. With `logits`, the logits rows
  /// `rows` names (decode: every row) come back there too, for tools that compare them.
  virtual Expected<SampledToken> prefillSample(int slot, std::span<const int32_t> tokens,
                                               const RowSampling &sampling,
                                               std::vector<float> *logits = nullptr,
                                               LogitRows rows = LogitRows::Last);
  virtual Expected<std::vector<SampledToken>> decodeSample(std::span<const int> slots,
                                                           std::span<const int32_t> tokens,
                                                           std::span<const RowSampling> sampling,
                                                           std::vector<float> *logits = nullptr);
  /// The most rows one sequence's verify window may have in a step of `sequences` sequences: the
  /// largest R of the plan's decode programs of at least that batch (1: none verifies more).
  virtual int64_t maxWindow(size_t sequences) const;
  /// The same for any plan (what `glmc serve` checks before loading weights); `programs`, when
  /// given, receives the verify programs ("1x16", ...: decode programs of more than one row).
  static int64_t maxWindowOf(const plan::Plan &plan, size_t sequences,
                             std::vector<std::string> *programs = nullptr);
  /// Whether the plan's programs run the MTP head, whose guesses come with the drawn tokens
  /// (SampledToken::draft).
  static bool guessesAhead(const plan::Plan &plan);
  /// One verify step: every window in the smallest decode program that holds them (padding rows
  /// change nothing), each row drawing the token at its position with its sequence's key, as a
  /// serial step draws it. Draft j is accepted when it equals the token drawn after the row
  /// before it and every draft before it was accepted. A window with a rejected draft is rolled
  /// back (rollbackWindow) so that its state is exactly a serial one's.
  Expected<std::vector<VerifiedWindow>> verifySample(std::span<const VerifyWindow> windows);
  /// verifySample's parts, virtual so that LockstepEngine can run them on every rank: the step
  /// itself, returning every window row's draw (the per-sequence slots of the windows with drafts
  /// checkpointed first), and the rollback of one of those windows.
  virtual Expected<std::vector<std::vector<SampledToken>>>
  runWindows(std::span<const VerifyWindow> windows);
  virtual Status rollbackWindow(int slot, int64_t length);

  /// InvalidArgument naming the field when `params` cannot run on this plan (a logit_bias id
  /// outside the vocabulary, too many entries, a mask of the wrong size, top_logprobs above 20).
  Status checkSampling(const SamplingParams &params) const;

  /// Tokens one prefill program takes (the largest); prefill() splits longer inputs at multiples
  /// of it. 0 when the plan has no prefill program.
  int64_t prefillChunk() const { return prefill_ ? prefill_->rows() : 0; }
  int64_t vocabSize() const { return vocab_; }
  virtual const plan::Plan &plan() const = 0;

protected:
  /// Rows [first, first + count) of a run belong to sequence `slot`.
  struct RowGroup {
    int slot;
    int64_t first;
    int64_t count;
  };
  /// Which logits rows a run returns: all the rows it used, each group's last, or none.
  enum class LogitsBack { All, Last, None };
  /// What a run gives back: the logits rows asked for, group by group, and, when it samples, the
  /// token after each group's last row.
  struct RunOutput {
    std::vector<float> logits;
    std::vector<SampledToken> sampled;
  };
  /// How a run samples: each group's sampling (empty: every sequence greedy, all counted as
  /// generated), and whether the sampled tokens come back.
  struct RunSampling {
    std::span<const RowSampling> rows;
    bool readBack = false;
    /// The token drawn after every row of each group comes back (a verify window's), not only
    /// after its last.
    bool everyRow = false;
    /// Per group, the token after its rows where the caller knows it (a prefill chunk with more
    /// of the prompt after it): the MTP head's input for its last row. Empty: none.
    std::span<const int32_t> following = {};
  };
  /// Runs one program over `tokens` for `groups` (pages reserved, lengths advanced) and returns
  /// the logits rows `back` names, group by group, and the tokens sampled when asked. The
  /// prefill and decode calls use it; an engine that forwards those instead (LockstepEngine)
  /// need not implement it.
  virtual Expected<RunOutput> run(const plan::Program &program, std::span<const int32_t> tokens,
                                  const std::vector<RowGroup> &groups, LogitsBack back,
                                  RunSampling sampling);
  /// Copies sequence `from`'s per-sequence state slots to `to`'s, and its pages' contents to
  /// `to`'s pages (same count, in order). forkSequence calls it.
  virtual Status copyState(int from, int to) = 0;
  /// Kept states' storage: copies sequence `slot`'s per-sequence slots into kept state `kept`'s
  /// (allocated on first use; token counts made those of prompt tokens: countsAsPrompt), back
  /// into a sequence's slots, and frees it. A backend that forwards the kept-state calls instead
  /// (LockstepEngine) need not implement them.
  virtual Status saveKept(int slot, int kept);
  virtual Status loadKept(int kept, int slot);
  virtual void freeKept(int) {}
  /// A verify window's checkpoint: copies sequence `slot`'s per-sequence slots aside (one copy per
  /// slot, made before a window with drafts runs), and back (when the window is rolled back).
  virtual Status checkpointSlots(int slot);
  virtual Status restoreSlots(int slot);
  /// Copies one page of the pool to another (a resumed sequence's partly filled last page).
  virtual Status copyPage(int32_t from, int32_t to);
  /// A token_counts slot's words as a prompt of the same tokens leaves them: the prompt bit for
  /// every token seen, no generated counts (kernels/count_tokens/count_tokens.h).
  static void countsAsPrompt(std::span<uint32_t> counts);

  /// Reads what every backend needs of the plan: the largest prefill program, the vocabulary,
  /// the state pool. `source` names the plan in errors.
  Status initCommon(const plan::Plan &plan, std::string source);
  /// Zeroes a new sequence's per-sequence state slots.
  virtual Status clearSlots(int slot) = 0;
  /// The smallest one-row decode program that takes `sequences` sequences, or null.
  const plan::Program *decodeProgramFor(size_t sequences) const;
  /// The decode program of the fewest rows (B x R) that takes `sequences` windows of up to
  /// `rows` rows, or null.
  const plan::Program *windowProgramFor(size_t sequences, int64_t rows) const;
  /// Checks a decode call's arguments.
  Status checkDecode(std::span<const int> slots, std::span<const int32_t> tokens) const;
  Status checkTokens(std::span<const int32_t> tokens) const;
  /// The sampler's io slots for a run's groups, as the backends write them: [batch] SampleWords,
  /// [batch, 2 · 300] logit_bias words (sorted by id), [batch, ⌈vocab / 32⌉] token_mask words;
  /// the last two empty when no sequence has a bias or a mask (nothing then reads them).
  struct SamplingWords {
    std::vector<kernels::SampleWords> params;
    std::vector<int32_t> bias;
    std::vector<uint32_t> mask;
  };
  /// `following` (one per group, or empty) fills each sequence's `following` word.
  SamplingWords samplingWords(std::span<const RowSampling> rows, size_t batch,
                              std::span<const int32_t> following = {}) const;
  /// The token a run sampled for a row, from its rows of the SampledIds and SampledLogprobs slots
  /// ([1 + 20] each), with the logprobs `sampling` asked for and the MTP head's draft from its row
  /// of the DraftIds slot (null: the plan has none).
  static SampledToken sampledToken(const int32_t *ids, const float *logprobs,
                                   const int32_t *draftIds, const RowSampling *sampling);
  /// The decode step shared by decode() and decodeSample().
  Expected<RunOutput> decodeStep(std::span<const int> slots, std::span<const int32_t> tokens,
                                 LogitsBack back, RunSampling sampling);
  /// The prefill chunks shared by prefill() and prefillSample().
  Expected<RunOutput> prefillChunks(int slot, std::span<const int32_t> tokens, LogitRows rows,
                                    bool logits, std::span<const RowSampling> sampling);

  SequenceTable sequences_;
  const plan::Program *prefill_ = nullptr; // the largest prefill program
  int64_t vocab_ = 0;
  std::string source_; // the plan file, for errors
};

} // namespace glm::runtime

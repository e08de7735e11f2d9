// Byte-level BPE: loading tokenizer.json's model and merging words by rank, as `tokenizers` does.
#include "server/tokenizer/BpeModel.h"

#include "base/Utf8.h"
#include "server/tokenizer/ByteLevel.h"
#include "server/tokenizer/JsonFields.h"

#include <algorithm>
#include <mutex>

namespace glm::server {
namespace {

using json_fields::Json;

/// Ids index flat tables, so a vocab with a stray huge id would cost gigabytes; real
/// vocabularies stay far below this.
constexpr int64_t kMaxTokenId = (int64_t{1} << 23) - 1;

uint64_t pairKey(TokenId left, TokenId right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

uint64_t candidateKey(uint32_t rank, int32_t pos) {
  return (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(pos);
}

/// A 4-ary min-heap of packed merge candidates: a long word (a megabyte of spaces is one word)
/// makes a heap of a million entries, where four children per node halve the levels, and so the
/// cache misses, of a binary heap.
class MinHeap {
public:
  void reserve(size_t n) { items_.reserve(n); }
  bool empty() const { return items_.empty(); }
  void pushUnordered(uint64_t key) { items_.push_back(key); }
  void heapify() {
    if (items_.empty()) {
      return;
    }
    for (size_t i = (items_.size() - 1) / 4 + 1; i-- > 0;) {
      siftDown(i);
    }
  }
  void push(uint64_t key) {
    size_t i = items_.size();
    items_.push_back(key);
    while (i > 0) {
      size_t parent = (i - 1) / 4;
      if (items_[parent] <= key) {
        break;
      }
      items_[i] = items_[parent];
      i = parent;
    }
    items_[i] = key;
  }
  uint64_t pop() {
    uint64_t top = items_.front();
    items_.front() = items_.back();
    items_.pop_back();
    if (!items_.empty()) {
      siftDown(0);
    }
    return top;
  }

private:
  void siftDown(size_t i) {
    const size_t n = items_.size();
    uint64_t key = items_[i];
    while (true) {
      size_t first = 4 * i + 1;
      if (first >= n) {
        break;
      }
      size_t best = first;
      size_t last = std::min(first + 4, n);
      for (size_t c = first + 1; c < last; ++c) {
        if (items_[c] < items_[best]) {
          best = c;
        }
      }
      if (items_[best] >= key) {
        break;
      }
      items_[i] = items_[best];
      i = best;
    }
    items_[i] = key;
  }

  std::vector<uint64_t> items_;
};

} // namespace

/// Encoded words by their bytes. Sharded so threads encoding at once rarely meet on a lock; a
/// full shard is emptied rather than aged, which keeps the hot path to one lookup.
class BpeModel::Cache {
public:
  bool lookup(std::string_view word, std::vector<TokenId> &ids) {
    size_t hash = StringHash{}(word);
    Shard &shard = shards_[hash % kShards];
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto it = shard.words.find(word);
    if (it == shard.words.end()) {
      return false;
    }
    ids.insert(ids.end(), it->second.begin(), it->second.end());
    return true;
  }

  void insert(std::string_view word, const TokenId *ids, size_t count) {
    size_t hash = StringHash{}(word);
    Shard &shard = shards_[hash % kShards];
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (shard.words.size() >= kWordsPerShard) {
      shard.words.clear();
    }
    shard.words.emplace(std::string(word), std::vector<TokenId>(ids, ids + count));
  }

  /// Words at least this long are not cached (as in `tokenizers`): they are rare and would crowd
  /// out the common ones.
  static constexpr size_t kMaxWordBytes = 256;

private:
  static constexpr size_t kShards = 64;
  static constexpr size_t kWordsPerShard = 2048;
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<TokenId>, StringHash, std::equal_to<>> words;
  };
  std::array<Shard, kShards> shards_;
};

BpeModel::BpeModel() : cache_(std::make_unique<Cache>()) { byteIds_.fill(-1); }
BpeModel::BpeModel(BpeModel &&) noexcept = default;
BpeModel &BpeModel::operator=(BpeModel &&) noexcept = default;
BpeModel::~BpeModel() = default;

Expected<BpeModel> BpeModel::fromJson(const Json &config) {
  const std::string path = "model";
  GLM_RETURN_IF_ERROR(json_fields::expectObject(config, path));
  GLM_ASSIGN_OR_RETURN(std::string type, json_fields::getString(config, "type", path));
  if (type != "BPE") {
    return unimplemented("'model.type' is '", type, "'; glmc supports BPE models only");
  }
  if (const Json *dropout = json_fields::find(config, "dropout");
      dropout != nullptr && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return unimplemented("'model.dropout' is ", dropout->dump(),
                         "; glmc encodes deterministically (dropout null or 0)");
  }
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    GLM_ASSIGN_OR_RETURN(std::optional<std::string> affix,
                         json_fields::getOptionalString(config, key, path));
    if (affix && !affix->empty()) {
      return unimplemented("'model.", key, "' is '", *affix,
                           "'; byte-level BPE in glmc takes no word affixes");
    }
  }

  BpeModel model;
  GLM_ASSIGN_OR_RETURN(model.fuseUnk_, json_fields::getBool(config, "fuse_unk", path, false));
  GLM_ASSIGN_OR_RETURN(model.ignoreMerges_,
                       json_fields::getBool(config, "ignore_merges", path, false));
  GLM_ASSIGN_OR_RETURN(bool byteFallback,
                       json_fields::getBool(config, "byte_fallback", path, false));
  if (byteFallback) {
    return unimplemented("'model.byte_fallback' is true; glmc supports byte-level BPE, whose "
                         "alphabet covers every byte without it");
  }

  const Json *vocab = json_fields::find(config, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return formatError("'model.vocab' must be an object mapping tokens to ids");
  }
  model.vocab_.reserve(vocab->size());
  int64_t maxId = -1;
  for (const auto &[token, idJson] : vocab->items()) {
    if (!idJson.is_number_integer() || idJson.get<int64_t>() < 0 ||
        idJson.get<int64_t>() > kMaxTokenId) {
      return formatError("'model.vocab' gives token '", token, "' the id ", idJson.dump(),
                         "; ids are integers from 0 to ", kMaxTokenId);
    }
    auto id = static_cast<TokenId>(idJson.get<int64_t>());
    model.vocab_.emplace(token, id);
    maxId = std::max<int64_t>(maxId, id);
  }
  model.tokens_.assign(static_cast<size_t>(maxId + 1), std::string());
  model.present_.assign(static_cast<size_t>(maxId + 1), false);
  for (const auto &[token, id] : model.vocab_) {
    if (model.present_[id]) {
      return formatError("'model.vocab' gives the id ", id, " to both '", model.tokens_[id],
                         "' and '", token, "'");
    }
    model.present_[id] = true;
    model.tokens_[id] = token;
  }
  for (int b = 0; b < 256; ++b) {
    std::string spelling;
    appendUtf8(spelling, byteLevelCodePoint(static_cast<uint8_t>(b)));
    if (std::optional<TokenId> id = model.tokenToId(spelling)) {
      model.byteIds_[b] = *id;
    }
  }

  GLM_ASSIGN_OR_RETURN(std::optional<std::string> unk,
                       json_fields::getOptionalString(config, "unk_token", path));
  if (unk) {
    model.unkId_ = model.tokenToId(*unk);
    if (!model.unkId_) {
      return formatError("'model.unk_token' '", *unk, "' is not in the vocab");
    }
  }

  const Json *merges = json_fields::find(config, "merges");
  if (merges == nullptr || !merges->is_array()) {
    return formatError("'model.merges' must be an array");
  }
  model.merges_.reserve(merges->size());
  uint32_t rank = 0;
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json &merge = (*merges)[i];
    std::string where = strCat("model.merges[", i, "]");
    std::string left;
    std::string right;
    if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else if (merge.is_string()) {
      // The older "a b" spelling; "#version" lines are comments that take no rank.
      const std::string &line = merge.get_ref<const std::string &>();
      if (line.rfind("#version", 0) == 0) {
        continue;
      }
      size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return formatError("'", where, "' is '", line,
                           "'; a merge string is two tokens separated by one space");
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else {
      return formatError("'", where, "' must be [\"left\", \"right\"] or \"left right\", not ",
                         merge.dump());
    }
    std::string joined = left + right;
    std::optional<TokenId> leftId = model.tokenToId(left);
    std::optional<TokenId> rightId = model.tokenToId(right);
    std::optional<TokenId> resultId = model.tokenToId(joined);
    const std::string *missing = !leftId     ? &left
                                 : !rightId  ? &right
                                 : !resultId ? &joined
                                             : nullptr;
    if (missing != nullptr) {
      return formatError("'", where, "' (", left, " + ", right, ") uses '", *missing,
                         "', which is not in the vocab");
    }
    // A repeated pair keeps its last rank, as tokenizers' map does.
    model.merges_[pairKey(*leftId, *rightId)] = Merge{rank, *resultId};
    model.rankResults_.push_back(*resultId);
    ++rank;
  }
  return model;
}

std::optional<TokenId> BpeModel::tokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) {
    return std::nullopt;
  }
  return it->second;
}

bool BpeModel::hasId(TokenId id) const {
  return id >= 0 && static_cast<size_t>(id) < present_.size() && present_[id];
}

const BpeModel::Merge *BpeModel::findMerge(TokenId left, TokenId right) const {
  auto it = merges_.find(pairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encodeWord(std::string_view word, std::vector<TokenId> &ids) const {
  if (word.empty()) {
    return;
  }
  if (ignoreMerges_) {
    if (std::optional<TokenId> id = tokenToId(byteLevelEncode(word))) {
      ids.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() < Cache::kMaxWordBytes;
  if (cacheable && cache_->lookup(word, ids)) {
    return;
  }
  size_t first = ids.size();
  mergeWord(word, ids);
  if (cacheable) {
    cache_->insert(word, ids.data() + first, ids.size() - first);
  }
}

void BpeModel::mergeWord(std::string_view word, std::vector<TokenId> &ids) const {
  // Symbols form a linked list over the word's bytes; a merged-away symbol is marked dead.
  struct Symbol {
    TokenId id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](TokenId id) {
    auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  };
  bool pendingUnk = false;
  for (char c : word) {
    TokenId id = byteIds_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      if (pendingUnk) {
        add(*unkId_);
        pendingUnk = false;
      }
      add(id);
      continue;
    }
    // A byte the vocab lacks: the unknown token if there is one (consecutive ones fused when
    // fuse_unk), else dropped, as tokenizers does.
    if (unkId_) {
      if (pendingUnk && !fuseUnk_) {
        add(*unkId_);
      }
      pendingUnk = true;
    }
  }
  if (pendingUnk) {
    add(*unkId_);
  }
  if (symbols.empty()) {
    return;
  }
  symbols.back().next = -1;

  // Candidate merges, lowest rank first and leftmost among equals, each packed as rank << 32 |
  // position (a rank names its merge, so the result is rankResults_[rank]). An entry goes stale
  // when a neighbour merges first; it is recognised, as tokenizers does, by the pair at its
  // position no longer merging into the same token.
  MinHeap heap;
  heap.reserve(symbols.size());
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge *m = findMerge(symbols[i].id, symbols[i + 1].id)) {
      heap.pushUnordered(candidateKey(m->rank, static_cast<int32_t>(i)));
    }
  }
  heap.heapify();
  while (!heap.empty()) {
    uint64_t key = heap.pop();
    auto pos = static_cast<int32_t>(key & 0xFFFFFFFFu);
    TokenId result = rankResults_[key >> 32];
    Symbol &left = symbols[pos];
    if (!left.alive || left.next < 0) {
      continue;
    }
    Symbol &right = symbols[left.next];
    const Merge *current = findMerge(left.id, right.id);
    if (current == nullptr || current->result != result) {
      continue;
    }
    left.id = result;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) {
      symbols[left.next].prev = pos;
    }
    if (left.prev >= 0) {
      if (const Merge *m = findMerge(symbols[left.prev].id, left.id)) {
        heap.push(candidateKey(m->rank, left.prev));
      }
    }
    if (left.next >= 0) {
      if (const Merge *m = findMerge(left.id, symbols[left.next].id)) {
        heap.push(candidateKey(m->rank, pos));
      }
    }
  }
  for (const Symbol &s : symbols) {
    if (s.alive) {
      ids.push_back(s.id);
    }
  }
}

} // namespace glm::server

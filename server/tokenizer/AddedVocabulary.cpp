// Added tokens: id assignment as tokenizers does it, and the left-to-right longest-match split.
#include "server/tokenizer/AddedVocabulary.h"

#include "base/Utf8.h"
#include "server/tokenizer/JsonFields.h"
#include "server/tokenizer/Regex.h"

#include <algorithm>

namespace glm::server {
namespace {

using json_fields::Json;

// Word characters that Unicode assigned after PCRE2 10.42's tables (Unicode 14) and that the Rust
// regex crate in tokenizers (Unicode 16) knows. Measured by checking every code point before a
// single_word token with both; no other code point differs.
constexpr std::string_view kNewWordCharacters =
    "\\x{897}\\x{CF3}\\x{ECE}\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}"
    "\\x{105C0}-\\x{105F3}\\x{10D40}-\\x{10D65}\\x{10D69}-\\x{10D6D}\\x{10D6F}-\\x{10D85}"
    "\\x{10EC2}-\\x{10EC4}\\x{10EFC}-\\x{10EFF}\\x{1123F}-\\x{11241}\\x{11380}-\\x{11389}"
    "\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}-\\x{113C0}\\x{113C2}\\x{113C5}"
    "\\x{113C7}-\\x{113CA}\\x{113CC}-\\x{113D3}\\x{113E1}-\\x{113E2}\\x{116D0}-\\x{116E3}"
    "\\x{11BC0}-\\x{11BE0}\\x{11BF0}-\\x{11BF9}\\x{11F00}-\\x{11F10}\\x{11F12}-\\x{11F3A}"
    "\\x{11F3E}-\\x{11F42}\\x{11F50}-\\x{11F5A}\\x{1342F}\\x{13440}-\\x{13455}"
    "\\x{13460}-\\x{143FA}\\x{16100}-\\x{16139}\\x{16D40}-\\x{16D6C}\\x{16D70}-\\x{16D79}"
    "\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1CCF0}-\\x{1CCF9}\\x{1DF25}-\\x{1DF2A}"
    "\\x{1E030}-\\x{1E06D}\\x{1E08F}\\x{1E4D0}-\\x{1E4F9}\\x{1E5D0}-\\x{1E5FA}\\x{2B739}"
    "\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";

/// Rust regex's Unicode \w, which tokenizers uses for single_word tokens.
bool isWordCharacter(uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  }
  static const Expected<Regex> word = Regex::compile(
      strCat(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D})", kNewWordCharacters, "]"));
  if (!word.ok()) {
    return false; // unreachable: the pattern is fixed and PCRE2 10.40+ knows these properties
  }
  std::string text;
  appendUtf8(text, cp);
  std::vector<std::pair<size_t, size_t>> matches;
  return word->findAll(text, matches).ok() && !matches.empty();
}

} // namespace

void AddedVocabulary::Trie::add(std::string_view content, size_t tokenIndex) {
  size_t node = 0;
  for (char c : content) {
    auto byte = static_cast<uint8_t>(c);
    auto &children = nodes_[node].children;
    auto it = std::find_if(children.begin(), children.end(),
                           [&](const auto &child) { return child.first == byte; });
    if (it != children.end()) {
      node = static_cast<size_t>(it->second);
      continue;
    }
    auto next = static_cast<int32_t>(nodes_.size());
    children.emplace_back(byte, next);
    nodes_.emplace_back();
    node = static_cast<size_t>(next);
  }
  nodes_[node].tokenIndex = static_cast<int32_t>(tokenIndex);
  firstByte_[static_cast<uint8_t>(content[0])] = true;
}

bool AddedVocabulary::Trie::longestAt(std::string_view text, size_t pos, size_t &tokenIndex,
                                      size_t &length) const {
  if (!firstByte_[static_cast<uint8_t>(text[pos])]) {
    return false;
  }
  bool found = false;
  size_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto byte = static_cast<uint8_t>(text[i]);
    const auto &children = nodes_[node].children;
    auto it = std::find_if(children.begin(), children.end(),
                           [&](const auto &child) { return child.first == byte; });
    if (it == children.end()) {
      break;
    }
    node = static_cast<size_t>(it->second);
    if (nodes_[node].tokenIndex >= 0) {
      found = true;
      tokenIndex = static_cast<size_t>(nodes_[node].tokenIndex);
      length = i + 1 - pos;
    }
  }
  return found;
}

Expected<AddedVocabulary> AddedVocabulary::fromJson(const Json &list, const BpeModel &model) {
  AddedVocabulary vocab;
  if (list.is_null()) {
    return vocab;
  }
  if (!list.is_array()) {
    return formatError("'added_tokens' must be an array, not ", list.type_name());
  }
  std::unordered_map<std::string, TokenId> idByContent;
  auto nextId = static_cast<TokenId>(model.vocabCount());
  for (size_t i = 0; i < list.size(); ++i) {
    const Json &entry = list[i];
    std::string path = json_fields::join("added_tokens", i);
    GLM_RETURN_IF_ERROR(json_fields::expectObject(entry, path));
    AddedToken token;
    GLM_ASSIGN_OR_RETURN(token.content, json_fields::getString(entry, "content", path));
    GLM_ASSIGN_OR_RETURN(token.singleWord, json_fields::getBool(entry, "single_word", path, false));
    GLM_ASSIGN_OR_RETURN(token.lstrip, json_fields::getBool(entry, "lstrip", path, false));
    GLM_ASSIGN_OR_RETURN(token.rstrip, json_fields::getBool(entry, "rstrip", path, false));
    GLM_ASSIGN_OR_RETURN(token.normalized, json_fields::getBool(entry, "normalized", path, true));
    GLM_ASSIGN_OR_RETURN(token.special, json_fields::getBool(entry, "special", path, false));
    const Json *statedId = json_fields::find(entry, "id");
    if (statedId == nullptr || !statedId->is_number_integer()) {
      return formatError("'", path, ".id' must be an integer");
    }
    if (token.content.empty()) {
      continue; // tokenizers ignores empty added tokens
    }
    TokenId id;
    if (auto it = idByContent.find(token.content); it != idByContent.end()) {
      id = it->second;
    } else if (std::optional<TokenId> vocabId = model.tokenToId(token.content)) {
      id = *vocabId;
    } else {
      id = nextId++;
    }
    if (statedId->get<int64_t>() != id) {
      return formatError("'", path, "' ('", token.content, "') states id ", statedId->dump(),
                         " but Hugging Face tokenizers would give it id ", id,
                         " (added tokens not in the vocab are numbered from the vocab size, ",
                         model.vocabCount(), ", in file order)");
    }
    token.id = id;
    idByContent[token.content] = id;
    if (auto it = vocab.indexById_.find(id); it != vocab.indexById_.end()) {
      // The same content again: the later entry's flags win, as in tokenizers' map.
      vocab.tokens_[it->second] = token;
    } else {
      vocab.indexById_[id] = vocab.tokens_.size();
      vocab.tokens_.push_back(token);
    }
  }
  for (size_t i = 0; i < vocab.tokens_.size(); ++i) {
    const AddedToken &token = vocab.tokens_[i];
    (token.normalized ? vocab.normalizedTrie_ : vocab.rawTrie_).add(token.content, i);
    if (token.special) {
      vocab.specialContents_.push_back(token.content);
    }
  }
  std::sort(vocab.specialContents_.begin(), vocab.specialContents_.end());
  return vocab;
}

const AddedToken *AddedVocabulary::findById(TokenId id) const {
  auto it = indexById_.find(id);
  return it == indexById_.end() ? nullptr : &tokens_[it->second];
}

bool AddedVocabulary::isSpecialContent(std::string_view content) const {
  return std::binary_search(specialContents_.begin(), specialContents_.end(), content);
}

void AddedVocabulary::findMatches(std::string_view text, const Trie &trie,
                                  std::vector<Segment> &segments) const {
  if (text.empty()) {
    return;
  }
  if (trie.empty()) {
    segments.push_back({text, -1});
    return;
  }
  size_t emitted = 0; // end of what segments cover so far
  size_t pos = 0;     // where the next match may start (end of the last raw match)
  while (pos < text.size()) {
    size_t index = 0;
    size_t length = 0;
    if (!trie.longestAt(text, pos, index, length)) {
      ++pos;
      continue;
    }
    const AddedToken &token = tokens_[index];
    size_t start = pos;
    size_t stop = pos + length;
    pos = stop;
    if (token.singleWord) {
      bool wordBefore = start > 0 && isWordCharacter(previousCodePoint(text, start));
      size_t after = stop;
      bool wordAfter = stop < text.size() && isWordCharacter(nextCodePoint(text, after));
      if (wordBefore || wordAfter) {
        continue;
      }
    }
    if (token.lstrip) {
      // Back over the whitespace before the token, but not into what is already emitted.
      size_t newStart = start;
      while (newStart > 0 && isUnicodeWhiteSpace(previousCodePoint(text, newStart))) {
        size_t back = newStart - 1;
        while (back > 0 && (static_cast<uint8_t>(text[back]) & 0xC0) == 0x80) {
          --back;
        }
        newStart = back;
      }
      start = std::max(newStart, emitted);
    }
    if (token.rstrip) {
      size_t next = stop;
      while (next < text.size()) {
        size_t after = next;
        if (!isUnicodeWhiteSpace(nextCodePoint(text, after))) {
          break;
        }
        next = after;
      }
      stop = next;
    }
    if (emitted < start) {
      segments.push_back({text.substr(emitted, start - emitted), -1});
    }
    // As in tokenizers, an rstrip that swallowed the start of a later match does not stop that
    // match: the matcher moves on from the token's own end, so segments may overlap.
    stop = std::max(stop, start);
    segments.push_back({text.substr(start, stop - start), token.id});
    emitted = stop;
  }
  if (emitted < text.size()) {
    segments.push_back({text.substr(emitted), -1});
  }
}

void AddedVocabulary::split(std::string_view text, std::vector<Segment> &segments) const {
  std::vector<Segment> raw;
  findMatches(text, rawTrie_, raw);
  for (const Segment &segment : raw) {
    if (segment.id >= 0) {
      segments.push_back(segment);
    } else {
      findMatches(segment.text, normalizedTrie_, segments);
    }
  }
}

} // namespace glm::server

// The pre-tokenizer pipeline: Split steps by PCRE2 regex, then the ByteLevel step.
#include "server/tokenizer/PreTokenizer.h"

#include "server/tokenizer/JsonFields.h"

#include <algorithm>

namespace glm::server {
namespace {

using json_fields::Json;

// GPT-2's word pattern, which the ByteLevel pre-tokenizer applies when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Expected<SplitBehavior> parseBehavior(const std::string &name, std::string_view path) {
  if (name == "Removed") {
    return SplitBehavior::Removed;
  }
  if (name == "Isolated") {
    return SplitBehavior::Isolated;
  }
  if (name == "MergedWithPrevious") {
    return SplitBehavior::MergedWithPrevious;
  }
  if (name == "MergedWithNext") {
    return SplitBehavior::MergedWithNext;
  }
  if (name == "Contiguous") {
    return SplitBehavior::Contiguous;
  }
  return formatError("'", path, "' is '", name,
                     "'; expected Removed, Isolated, MergedWithPrevious, MergedWithNext or "
                     "Contiguous");
}

/// Flattens nested Sequence pre-tokenizers into their steps, in order; `depth` counts the
/// Sequences around this one.
Status flatten(const Json &config, const std::string &path,
               std::vector<std::pair<const Json *, std::string>> &steps, int depth = 0) {
  GLM_RETURN_IF_ERROR(json_fields::expectObject(config, path));
  GLM_ASSIGN_OR_RETURN(std::string type, json_fields::getString(config, "type", path));
  if (type != "Sequence") {
    steps.emplace_back(&config, path);
    return Status::success();
  }
  if (depth >= json_fields::kMaxSequenceNesting) {
    return formatError("'", path, "': pre_tokenizer Sequence nested deeper than ",
                       json_fields::kMaxSequenceNesting, " levels");
  }
  std::string listPath = json_fields::join(path, "pretokenizers");
  const Json *list = json_fields::find(config, "pretokenizers");
  if (list == nullptr || !list->is_array()) {
    return formatError("'", listPath, "' must be an array");
  }
  for (size_t i = 0; i < list->size(); ++i) {
    GLM_RETURN_IF_ERROR(flatten((*list)[i], json_fields::join(listPath, i), steps, depth + 1));
  }
  return Status::success();
}

/// A piece of text and whether the split pattern matched it.
struct Chunk {
  size_t start;
  size_t end;
  bool isMatch;
};

} // namespace

Expected<PreTokenizer> PreTokenizer::fromJson(const Json &config) {
  if (config.is_null()) {
    return unimplemented("'pre_tokenizer' is null; glmc needs byte-level BPE (a ByteLevel "
                         "pre-tokenizer, after any Split steps)");
  }
  std::vector<std::pair<const Json *, std::string>> steps;
  GLM_RETURN_IF_ERROR(flatten(config, "pre_tokenizer", steps));

  PreTokenizer result;
  bool sawByteLevel = false;
  for (const auto &[step, path] : steps) {
    std::string type = (*step)["type"].get<std::string>();
    if (sawByteLevel) {
      // Steps after ByteLevel would see byte-level characters, not text; no tokenizer of this
      // family does that.
      return unimplemented("'", path, "' (", type,
                           ") follows the ByteLevel step; glmc supports Split steps followed by "
                           "one ByteLevel step");
    }
    if (type == "Split") {
      GLM_ASSIGN_OR_RETURN(std::string behaviorName,
                           json_fields::getString(*step, "behavior", path));
      GLM_ASSIGN_OR_RETURN(SplitBehavior behavior,
                           parseBehavior(behaviorName, json_fields::join(path, "behavior")));
      GLM_ASSIGN_OR_RETURN(bool invert, json_fields::getBool(*step, "invert", path, false));
      std::string patternPath = json_fields::join(path, "pattern");
      const Json *pattern = json_fields::find(*step, "pattern");
      if (pattern == nullptr || !pattern->is_object() || pattern->size() != 1) {
        return formatError("'", patternPath, "' must be an object with one key, Regex or String");
      }
      auto [kind, text] = *pattern->items().begin();
      if (!text.is_string() || (kind != "Regex" && kind != "String")) {
        return formatError("'", patternPath,
                           "' must be {\"Regex\": pattern} or {\"String\": text}");
      }
      Expected<Regex> regex = kind == "Regex" ? Regex::compile(text.get<std::string>())
                                              : Regex::literal(text.get<std::string>());
      if (!regex.ok()) {
        return regex.status().withContext(patternPath);
      }
      result.splits_.push_back({std::move(regex).value(), behavior, invert});
      continue;
    }
    if (type == "ByteLevel") {
      GLM_ASSIGN_OR_RETURN(bool addPrefixSpace,
                           json_fields::getBool(*step, "add_prefix_space", path, std::nullopt));
      // use_regex arrived after the format did; tokenizers defaults it to true when absent.
      GLM_ASSIGN_OR_RETURN(bool useRegex, json_fields::getBool(*step, "use_regex", path, true));
      result.addPrefixSpace_ = addPrefixSpace;
      if (useRegex) {
        Expected<Regex> regex = Regex::compile(kGpt2Pattern);
        if (!regex.ok()) {
          return regex.status().withContext(path);
        }
        result.byteLevelRegex_ = std::move(regex).value();
      }
      sawByteLevel = true;
      continue;
    }
    return unimplemented("'", path, "' has type '", type,
                         "'; glmc supports Split steps followed by one ByteLevel step");
  }
  if (!sawByteLevel) {
    return unimplemented("'pre_tokenizer' has no ByteLevel step; glmc supports byte-level BPE "
                         "only");
  }
  return result;
}

Status PreTokenizer::applySplit(const Regex &regex, SplitBehavior behavior, bool invert,
                                std::vector<std::string_view> &pieces) const {
  std::vector<std::string_view> out;
  out.reserve(pieces.size());
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<Chunk> chunks;
  std::vector<Chunk> merged;
  for (std::string_view piece : pieces) {
    matches.clear();
    GLM_RETURN_IF_ERROR(regex.findAll(piece, matches));
    // The pieces cover the text: matches and the stretches between them.
    chunks.clear();
    size_t previous = 0;
    for (auto [start, end] : matches) {
      if (previous != start) {
        chunks.push_back({previous, start, invert});
      }
      chunks.push_back({start, end, !invert});
      previous = end;
    }
    if (previous != piece.size()) {
      chunks.push_back({previous, piece.size(), invert});
    }

    merged.clear();
    switch (behavior) {
    case SplitBehavior::Isolated:
      merged = chunks;
      break;
    case SplitBehavior::Removed:
      for (const Chunk &c : chunks) {
        if (!c.isMatch) {
          merged.push_back(c);
        }
      }
      break;
    case SplitBehavior::Contiguous: {
      // Runs of matches, and runs of non-matches, become one piece each.
      bool previousMatch = false;
      for (const Chunk &c : chunks) {
        if (c.isMatch == previousMatch && !merged.empty()) {
          merged.back().end = c.end;
        } else {
          merged.push_back(c);
        }
        previousMatch = c.isMatch;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool previousMatch = false;
      for (const Chunk &c : chunks) {
        if (c.isMatch && !previousMatch && !merged.empty()) {
          merged.back().end = c.end;
        } else {
          merged.push_back(c);
        }
        previousMatch = c.isMatch;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      // Walks backwards so a match joins the piece after it.
      bool previousMatch = false;
      for (auto it = chunks.rbegin(); it != chunks.rend(); ++it) {
        if (it->isMatch && !previousMatch && !merged.empty()) {
          merged.back().start = it->start;
        } else {
          merged.push_back(*it);
        }
        previousMatch = it->isMatch;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
    }
    for (const Chunk &c : merged) {
      if (c.end > c.start) {
        out.push_back(piece.substr(c.start, c.end - c.start));
      }
    }
  }
  pieces = std::move(out);
  return Status::success();
}

Status PreTokenizer::split(std::string_view text, std::vector<std::string_view> &words,
                           std::deque<std::string> &storage) const {
  if (text.empty()) {
    return Status::success();
  }
  std::vector<std::string_view> pieces{text};
  for (const SplitStep &step : splits_) {
    GLM_RETURN_IF_ERROR(applySplit(step.regex, step.behavior, step.invert, pieces));
  }
  if (addPrefixSpace_) {
    for (std::string_view &piece : pieces) {
      if (piece.front() != ' ') {
        storage.push_back(" ");
        storage.back().append(piece);
        piece = storage.back();
      }
    }
  }
  if (byteLevelRegex_) {
    GLM_RETURN_IF_ERROR(applySplit(*byteLevelRegex_, SplitBehavior::Isolated, false, pieces));
  }
  words.insert(words.end(), pieces.begin(), pieces.end());
  return Status::success();
}

} // namespace glm::server

// Loading tokenizer.json and running the encode and decode pipelines.
#include "server/tokenizer/Tokenizer.h"

#include "base/InputFile.h"
#include "base/JsonChecker.h"
#include "base/Utf8.h"
#include "server/tokenizer/ByteLevel.h"
#include "server/tokenizer/JsonFields.h"
#include "server/tokenizer/PreTokenizer.h"

#include <algorithm>
#include <cstdint>
#include <deque>

namespace glm::server {
namespace {

using json_fields::Json;

/// The largest tokenizer.json read: GLM's is ~20 MB and the largest on the Hub (250k-token
/// multilingual vocabularies) ~35 MB, so 512 MiB is >10x any real one while its DOM (a few times
/// the text) still fits the host memory of a machine that serves such a model.
constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t(512) << 20;

/// How deep tokenizer.json may nest (checked before a DOM is built: building, copying and freeing
/// nlohmann's DOM recurse). Real files nest 6 levels; a Sequence costs 2 (object and list).
constexpr size_t kMaxTokenizerJsonDepth = 64;

/// The most a few characters of a JSON value an error message quotes.
std::string quoted(const Json &value) {
  std::string text = value.dump();
  constexpr size_t kMax = 200;
  if (text.size() > kMax) {
    text.resize(kMax);
    text += "...";
  }
  return text;
}

/// What one id decodes to, precomputed so decode() is a table walk.
struct IdEntry {
  std::string token; // as spelled in tokenizer.json
  std::string bytes; // after the ByteLevel decoder
  bool present = false;
  bool special = false;
};

/// The ids TemplateProcessing puts around a single sequence.
struct Template {
  std::vector<TokenId> before;
  std::vector<TokenId> after;
};

Status checkNormalizer(const Json &root) {
  const Json *normalizer = json_fields::find(root, "normalizer");
  if (normalizer == nullptr || normalizer->is_null()) {
    return Status::success();
  }
  std::string type =
      normalizer->is_object() && normalizer->contains("type") && (*normalizer)["type"].is_string()
          ? (*normalizer)["type"].get<std::string>()
          : quoted(*normalizer);
  return unimplemented("'normalizer' is ", type,
                       "; glmc supports tokenizers without a normalizer (null), as byte-level "
                       "BPE tokenizers of this family have");
}

Status checkDecoder(const Json &root) {
  const Json *decoder = json_fields::find(root, "decoder");
  if (decoder == nullptr || decoder->is_null()) {
    return unimplemented("'decoder' is null; glmc supports the ByteLevel decoder (tokenizers "
                         "would join token strings with spaces)");
  }
  GLM_RETURN_IF_ERROR(json_fields::expectObject(*decoder, "decoder"));
  GLM_ASSIGN_OR_RETURN(std::string type, json_fields::getString(*decoder, "type", "decoder"));
  if (type != "ByteLevel") {
    return unimplemented("'decoder.type' is '", type, "'; glmc supports the ByteLevel decoder");
  }
  return Status::success();
}

Status checkAbsent(const Json &root, const char *key) {
  const Json *value = json_fields::find(root, key);
  if (value != nullptr && !value->is_null()) {
    return unimplemented("'", key, "' is set (", quoted(*value),
                         "); glmc encodes without truncation or padding, so it must be null");
  }
  return Status::success();
}

/// Reads "post_processor" into the ids added around a sequence by encode(..., true). `depth`
/// counts the Sequences around this one.
Status parsePostProcessor(const Json &config, const std::string &path, Template &result,
                          int depth = 0) {
  if (config.is_null()) {
    return Status::success();
  }
  GLM_RETURN_IF_ERROR(json_fields::expectObject(config, path));
  GLM_ASSIGN_OR_RETURN(std::string type, json_fields::getString(config, "type", path));
  if (type == "ByteLevel") {
    return Status::success(); // only adjusts offsets
  }
  if (type == "Sequence") {
    if (depth >= json_fields::kMaxSequenceNesting) {
      return formatError("'", path, "': post_processor Sequence nested deeper than ",
                         json_fields::kMaxSequenceNesting, " levels");
    }
    const Json *list = json_fields::find(config, "processors");
    if (list == nullptr || !list->is_array()) {
      return formatError("'", json_fields::join(path, "processors"), "' must be an array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      GLM_RETURN_IF_ERROR(parsePostProcessor(
          (*list)[i], json_fields::join(json_fields::join(path, "processors"), i), result,
          depth + 1));
    }
    return Status::success();
  }
  if (type != "TemplateProcessing") {
    return unimplemented("'", path, ".type' is '", type,
                         "'; glmc supports TemplateProcessing and ByteLevel post-processors");
  }
  const Json *single = json_fields::find(config, "single");
  if (single == nullptr || !single->is_array()) {
    return formatError("'", json_fields::join(path, "single"), "' must be an array");
  }
  const Json *specials = json_fields::find(config, "special_tokens");
  bool sawSequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json &piece = (*single)[i];
    std::string where = json_fields::join(json_fields::join(path, "single"), i);
    if (!piece.is_object() || piece.size() != 1) {
      return formatError("'", where, "' must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
    auto [kind, body] = *piece.items().begin();
    if (!body.is_object()) {
      return formatError("'", where, ".", kind, "' must be an object");
    }
    GLM_ASSIGN_OR_RETURN(std::string id, json_fields::getString(body, "id", where + "." + kind));
    if (kind == "Sequence") {
      if (id != "A" || sawSequence) {
        return formatError("'", where, "': a single-sequence template holds sequence A once");
      }
      sawSequence = true;
      continue;
    }
    if (kind != "SpecialToken") {
      return formatError("'", where, "' must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
    const Json *special =
        specials != nullptr && specials->is_object() ? json_fields::find(*specials, id) : nullptr;
    const Json *ids =
        special != nullptr && special->is_object() ? json_fields::find(*special, "ids") : nullptr;
    if (ids == nullptr || !ids->is_array()) {
      return formatError("'", where, "' names special token '", id, "', which '",
                         json_fields::join(path, "special_tokens"), "' does not define with ids");
    }
    for (const Json &value : *ids) {
      if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
          value.get<int64_t>() > INT32_MAX) {
        return formatError("'", json_fields::join(path, "special_tokens"), "' gives '", id,
                           "' the id ", value.dump());
      }
      (sawSequence ? result.after : result.before).push_back(value.get<TokenId>());
    }
  }
  if (!sawSequence) {
    return formatError("'", json_fields::join(path, "single"), "' has no sequence A");
  }
  return Status::success();
}

} // namespace

struct Tokenizer::Impl {
  BpeModel model;
  AddedVocabulary added;
  PreTokenizer preTokenizer;
  Template postTemplate;
  std::vector<IdEntry> ids;

  Impl(BpeModel m, AddedVocabulary a, PreTokenizer p)
      : model(std::move(m)), added(std::move(a)), preTokenizer(std::move(p)) {}
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer &&) noexcept = default;
Tokenizer &Tokenizer::operator=(Tokenizer &&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Expected<Tokenizer> Tokenizer::fromJson(std::string_view text) {
  // The depth-limited SAX pass first (parseUntrustedJson's, with this file's FormatErrors).
  JsonChecker checker(kMaxTokenizerJsonDepth);
  if (!JsonChecker::Json::sax_parse(text.begin(), text.end(), &checker)) {
    if (checker.tooDeep()) {
      return formatError("nests deeper than ", kMaxTokenizerJsonDepth,
                         " levels, the tokenizer.json nesting limit");
    }
    return formatError("not valid JSON");
  }
  Json root = Json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return formatError("not valid JSON");
  }
  if (!root.is_object()) {
    return formatError("the top level must be an object, not ", root.type_name());
  }
  GLM_RETURN_IF_ERROR(checkAbsent(root, "truncation"));
  GLM_RETURN_IF_ERROR(checkAbsent(root, "padding"));
  GLM_RETURN_IF_ERROR(checkNormalizer(root));
  GLM_RETURN_IF_ERROR(checkDecoder(root));

  const Json *modelJson = json_fields::find(root, "model");
  if (modelJson == nullptr) {
    return formatError("'model' is missing");
  }
  GLM_ASSIGN_OR_RETURN(BpeModel model, BpeModel::fromJson(*modelJson));
  const Json *preTokenizerJson = json_fields::find(root, "pre_tokenizer");
  GLM_ASSIGN_OR_RETURN(PreTokenizer preTokenizer,
                       PreTokenizer::fromJson(preTokenizerJson ? *preTokenizerJson : Json()));
  const Json *addedJson = json_fields::find(root, "added_tokens");
  GLM_ASSIGN_OR_RETURN(AddedVocabulary added,
                       AddedVocabulary::fromJson(addedJson ? *addedJson : Json(), model));

  auto impl = std::make_unique<Impl>(std::move(model), std::move(added), std::move(preTokenizer));
  if (const Json *post = json_fields::find(root, "post_processor")) {
    GLM_RETURN_IF_ERROR(parsePostProcessor(*post, "post_processor", impl->postTemplate));
  }

  // The id table: added tokens take precedence over the vocab, as in tokenizers' id_to_token.
  const std::vector<std::string> &vocabTokens = impl->model.tokensById();
  size_t count = vocabTokens.size();
  for (const AddedToken &token : impl->added.tokens()) {
    count = std::max(count, static_cast<size_t>(token.id) + 1);
  }
  impl->ids.resize(count);
  for (size_t id = 0; id < vocabTokens.size(); ++id) {
    if (impl->model.hasId(static_cast<TokenId>(id))) {
      impl->ids[id].token = vocabTokens[id];
      impl->ids[id].present = true;
    }
  }
  for (const AddedToken &token : impl->added.tokens()) {
    impl->ids[token.id].token = token.content;
    impl->ids[token.id].present = true;
  }
  for (IdEntry &entry : impl->ids) {
    if (entry.present) {
      entry.bytes = byteLevelDecodeToken(entry.token);
      entry.special = impl->added.isSpecialContent(entry.token);
    }
  }
  for (const std::vector<TokenId> *list : {&impl->postTemplate.before, &impl->postTemplate.after}) {
    for (TokenId id : *list) {
      if (static_cast<size_t>(id) >= count || !impl->ids[id].present) {
        return formatError("'post_processor' adds the id ", id, ", which no token has");
      }
    }
  }
  return Tokenizer(std::move(impl));
}

Expected<Tokenizer> Tokenizer::fromFile(const std::string &path) {
  GLM_ASSIGN_OR_RETURN(std::string text,
                       readInputFile(path, kMaxTokenizerJsonBytes, "tokenizer.json"));
  Expected<Tokenizer> tokenizer = fromJson(text);
  if (!tokenizer.ok()) {
    return tokenizer.status().withContext(path);
  }
  return tokenizer;
}

Expected<Tokenizer> Tokenizer::fromModelDir(const std::string &modelDir) {
  return fromFile(modelDir + "/tokenizer.json");
}

Expected<std::vector<TokenId>> Tokenizer::encode(std::string_view text,
                                                 bool addSpecialTokens) const {
  if (std::optional<size_t> bad = findInvalidUtf8(text)) {
    return invalidArgument("text to encode is not valid UTF-8 (at byte ", *bad, ")");
  }
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  if (addSpecialTokens) {
    ids = impl_->postTemplate.before;
  }
  std::vector<AddedVocabulary::Segment> segments;
  impl_->added.split(text, segments);
  std::vector<std::string_view> words;
  std::deque<std::string> storage;
  for (const AddedVocabulary::Segment &segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    words.clear();
    storage.clear();
    GLM_RETURN_IF_ERROR(impl_->preTokenizer.split(segment.text, words, storage));
    for (std::string_view word : words) {
      impl_->model.encodeWord(word, ids);
    }
  }
  if (addSpecialTokens) {
    ids.insert(ids.end(), impl_->postTemplate.after.begin(), impl_->postTemplate.after.end());
  }
  return ids;
}

Expected<std::string> Tokenizer::decode(std::span<const TokenId> ids,
                                        bool skipSpecialTokens) const {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (TokenId id : ids) {
    if (!hasId(id)) {
      return invalidArgument("token id ", id, " is not in the vocabulary (ids run from 0 to ",
                             idCount() - 1, ")");
    }
    const IdEntry &entry = impl_->ids[id];
    if (skipSpecialTokens && entry.special) {
      continue;
    }
    bytes += entry.bytes;
  }
  return utf8Lossy(bytes);
}

size_t Tokenizer::idCount() const { return impl_->ids.size(); }

bool Tokenizer::hasId(TokenId id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->ids.size() && impl_->ids[id].present;
}

std::optional<TokenId> Tokenizer::tokenToId(std::string_view token) const {
  for (const AddedToken &added : impl_->added.tokens()) {
    if (added.content == token) {
      return added.id;
    }
  }
  return impl_->model.tokenToId(token);
}

std::optional<std::string_view> Tokenizer::idToToken(TokenId id) const {
  if (!hasId(id)) {
    return std::nullopt;
  }
  return std::string_view(impl_->ids[id].token);
}

std::string_view Tokenizer::tokenBytes(TokenId id) const {
  return hasId(id) ? std::string_view(impl_->ids[id].bytes) : std::string_view();
}

bool Tokenizer::isSpecial(TokenId id) const { return hasId(id) && impl_->ids[id].special; }

const std::vector<AddedToken> &Tokenizer::addedTokens() const { return impl_->added.tokens(); }

} // namespace glm::server

// Spec to grammar (with the GLM tool-call form), the compile cache, and the per-choice constraint.
#include "server/grammar/StructuredOutputs.h"

#include "server/grammar/Gbnf.h"
#include "server/grammar/JsonSchema.h"
#include "server/grammar/Regex.h"

#include <algorithm>

namespace glm::grammar {
namespace {

using Json = nlohmann::ordered_json;
using Seq = GrammarBuilder::Seq;

/// Up to two newlines or spaces, where GLM may break a line around tool-call tags.
Element lineBreak(GrammarBuilder &b) {
  ByteSet space = ByteSet::of('\n');
  space.set(' ');
  return b.repeat({b.bytes(space)}, 0, 2, "nl", "");
}

/// The tool-call grammar: `<tool_call>NAME(<arg_key>K</arg_key><arg_value>V</arg_value>)*
/// </tool_call>`, one call or several, each tool's arguments in its schema's order (required
/// ones always present), values as ToolCallParser reads them.
uint32_t toolCalls(GrammarBuilder &b, const ConstraintSpec &spec, const ToolCallTokens &t) {
  if (t.callOpen < 0 || t.callClose < 0 || t.keyOpen < 0 || t.keyClose < 0 || t.valueOpen < 0 ||
      t.valueClose < 0) {
    b.fail(spec.path, "this model's tokenizer has no GLM tool-call tokens, so a tool call cannot "
                      "be forced");
    return 0;
  }
  if (!spec.tools.is_array() || spec.tools.empty()) {
    b.fail(spec.path, "forcing a tool call needs a non-empty tools array");
    return 0;
  }
  std::vector<Seq> calls;
  for (size_t i = 0; i < spec.tools.size() && !b.failed(); ++i) {
    const Json &tool = spec.tools[i];
    const Json &function = tool.contains("function") ? tool["function"] : tool;
    if (!function.is_object() || !function.contains("name") || !function["name"].is_string()) {
      continue;
    }
    const std::string name = function["name"].get<std::string>();
    if (!spec.toolName.empty() && name != spec.toolName) {
      continue;
    }
    const std::string base = strCat("tools[", i, "].function.parameters");
    const Json parameters =
        function.contains("parameters") ? function["parameters"] : Json::object();
    JsonSchemaCompiler schema(b, parameters, base);
    Json properties = Json::object();
    std::vector<std::string> required;
    if (parameters.is_object() && parameters.contains("properties") &&
        parameters["properties"].is_object()) {
      properties = parameters["properties"];
    }
    if (parameters.is_object() && parameters.contains("required") &&
        parameters["required"].is_array()) {
      for (const Json &r : parameters["required"]) {
        if (r.is_string()) {
          required.push_back(r.get<std::string>());
        }
      }
    }
    std::vector<std::pair<Seq, bool>> args;
    for (auto it = properties.begin(); it != properties.end(); ++it) {
      Seq arg = {lineBreak(b), Element::token(t.keyOpen)};
      Seq key = b.literal(it.key());
      arg.insert(arg.end(), key.begin(), key.end());
      arg.push_back(Element::token(t.keyClose));
      arg.push_back(lineBreak(b));
      arg.push_back(Element::token(t.valueOpen));
      arg.push_back(schema.argument(it.value(), "properties." + it.key()));
      arg.push_back(Element::token(t.valueClose));
      const bool isRequired =
          std::find(required.begin(), required.end(), it.key()) != required.end();
      args.emplace_back(std::move(arg), isRequired);
    }
    // rest[j]: the arguments from j on.
    std::vector<uint32_t> rest(args.size() + 1);
    for (size_t j = 0; j <= args.size(); ++j) {
      rest[j] = b.newRule("args");
    }
    b.addAlternative(rest[args.size()], {});
    for (size_t j = args.size(); j-- > 0;) {
      Seq take = args[j].first;
      take.push_back(Element::rule(rest[j + 1]));
      b.addAlternative(rest[j], std::move(take));
      if (!args[j].second) {
        b.addAlternative(rest[j], {Element::rule(rest[j + 1])});
      }
    }
    Seq call = b.literal(name);
    call.push_back(Element::rule(rest[0]));
    call.push_back(lineBreak(b));
    call.push_back(Element::token(t.callClose));
    calls.push_back(std::move(call));
  }
  if (b.failed()) {
    return 0;
  }
  if (calls.empty()) {
    b.fail(spec.path, spec.toolName.empty()
                          ? std::string("no tool has a name to call")
                          : strCat("no tool named '", spec.toolName, "' is in tools"));
    return 0;
  }
  Seq one = {lineBreak(b), Element::token(t.callOpen),
             Element::rule(b.ruleOf("tool", std::move(calls)))};
  const uint32_t call = b.ruleOf("call", {std::move(one)});
  if (!spec.parallelToolCalls) {
    return b.ruleOf("root", {{Element::rule(call)}});
  }
  return b.ruleOf("root", {{Element::rule(call), b.star({Element::rule(call)}, "calls")}});
}

std::string cacheKey(const ConstraintSpec &spec) {
  std::string key = strCat(static_cast<int>(spec.kind), '\0', spec.text, '\0');
  for (const std::string &c : spec.choices) {
    key += strCat(c.size(), ':', c);
  }
  if (spec.kind == ConstraintSpec::Kind::ToolCall) {
    key += strCat('\0', spec.tools.dump(), '\0', spec.toolName, '\0', spec.parallelToolCalls);
  }
  return key;
}

} // namespace

std::variant<Grammar, GrammarError> StructuredOutputs::build(const ConstraintSpec &spec,
                                                             const ToolCallTokens &toolTokens,
                                                             const GrammarBounds &bounds) {
  GrammarBuilder b(bounds);
  uint32_t root = 0;
  Json document;
  switch (spec.kind) {
  case ConstraintSpec::Kind::JsonObject: {
    JsonSchemaCompiler json(b, document, spec.path);
    root = b.ruleOf("root", {{json.ws(), json.anyObject()}});
    break;
  }
  case ConstraintSpec::Kind::JsonSchema: {
    document = Json::parse(spec.text, nullptr, false);
    if (document.is_discarded()) {
      return GrammarError{spec.path, "the schema is not valid JSON"};
    }
    JsonSchemaCompiler json(b, document, spec.path);
    Element value = json.value(document, "");
    root = b.ruleOf("root", {{json.ws(), value}});
    break;
  }
  case ConstraintSpec::Kind::Regex:
    root = b.ruleOf("root", {{compileRegex(b, spec.text, Spelling::Raw, spec.path)}});
    break;
  case ConstraintSpec::Kind::Choice: {
    if (spec.choices.empty()) {
      return GrammarError{spec.path, "the choices must not be empty"};
    }
    if (static_cast<int64_t>(spec.choices.size()) > bounds.maxAlternatives) {
      return GrammarError{spec.path,
                          strCat(spec.choices.size(), " choices; at most ", bounds.maxAlternatives,
                                 " are allowed (bound grammar.maxAlternatives)")};
    }
    std::vector<Seq> alts;
    for (size_t i = 0; i < spec.choices.size(); ++i) {
      if (spec.choices[i].empty()) {
        return GrammarError{strCat(spec.path, "[", i, "]"), "a choice must not be empty"};
      }
      alts.push_back(b.literal(spec.choices[i]));
    }
    root = b.ruleOf("root", std::move(alts));
    break;
  }
  case ConstraintSpec::Kind::Gbnf:
    root = compileGbnf(b, spec.text, spec.path);
    break;
  case ConstraintSpec::Kind::ToolCall:
    root = toolCalls(b, spec, toolTokens);
    break;
  }
  Grammar g;
  GrammarError error;
  if (!b.finish(root, g, error, spec.path)) {
    if (error.path.empty()) {
      error.path = spec.path;
    }
    return error;
  }
  return g;
}

StructuredOutputs::StructuredOutputs(std::shared_ptr<const TokenVocabulary> vocabulary,
                                     ToolCallTokens toolTokens, GrammarBounds bounds,
                                     size_t cacheBytes)
    : vocabulary_(std::move(vocabulary)), toolTokens_(toolTokens), bounds_(bounds),
      cacheBytes_(cacheBytes) {}

std::variant<std::shared_ptr<const CompiledGrammar>, GrammarError>
StructuredOutputs::compile(const ConstraintSpec &spec) {
  const std::string key = cacheKey(spec);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  std::variant<Grammar, GrammarError> built = build(spec, toolTokens_, bounds_);
  if (GrammarError *error = std::get_if<GrammarError>(&built)) {
    return std::move(*error);
  }
  auto compiled =
      std::make_shared<const CompiledGrammar>(std::move(std::get<Grammar>(built)), vocabulary_);
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = index_.find(key); it != index_.end()) {
    return it->second->second; // compiled meanwhile by another request
  }
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  // Tables fill as requests use a grammar, so the bytes are counted again at each new schema:
  // the least recently used go until the rest fit; the new one always stays.
  size_t bytes = 0;
  for (const auto &entry : lru_) {
    bytes += entry.second->tableBytes();
  }
  while (lru_.size() > 1 && (lru_.size() > kCacheSize || bytes > cacheBytes_)) {
    bytes -= std::min(bytes, lru_.back().second->tableBytes());
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const CompiledGrammar> grammar,
                                     std::vector<int32_t> eosIds,
                                     std::optional<int32_t> reasoningEnd)
    : matcher_(std::move(grammar)), eosIds_(std::move(eosIds)), reasoningEnd_(reasoningEnd),
      reasoning_(reasoningEnd.has_value()) {}

bool GrammarConstraint::fillAllowed(std::span<uint32_t> mask) {
  if (reasoning_) {
    return false;
  }
  std::fill(mask.begin(), mask.end(), 0u);
  matcher_.fillMask(mask, eosIds_);
  return true;
}

bool GrammarConstraint::advance(int32_t token) {
  if (reasoning_) {
    if (reasoningEnd_ && token == *reasoningEnd_) {
      reasoning_ = false;
    }
    return true;
  }
  return matcher_.advance(token);
}

std::unique_ptr<runtime::TokenConstraint> GrammarConstraint::clone() const {
  return std::make_unique<GrammarConstraint>(*this);
}

} // namespace glm::grammar

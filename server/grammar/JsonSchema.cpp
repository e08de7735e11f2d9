// The JSON Schema compiler: one rule per schema node, shared rules for the JSON lexicon, $ref
// targets compiled once each (so recursive schemas become recursive rules).
#include "server/grammar/JsonSchema.h"

#include "server/grammar/Regex.h"

namespace glm::grammar {
namespace {

using Json = nlohmann::ordered_json;

std::string join(const std::string &path, const std::string &key) {
  return path.empty() ? key : path + "." + key;
}

std::string index(const std::string &path, const std::string &key, size_t i) {
  return strCat(join(path, key), "[", i, "]");
}

/// Formats with a regular form, as regexes over the string's value.
const char *formatRegex(const std::string &format) {
  if (format == "date") {
    return "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
  }
  if (format == "time") {
    return "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?"
           "(Z|z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  }
  if (format == "date-time") {
    return "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]"
           "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?"
           "(Z|z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  }
  if (format == "uuid") {
    return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  }
  if (format == "email") {
    return "[A-Za-z0-9._%+-]+@([A-Za-z0-9-]+\\.)+[A-Za-z]{2,24}";
  }
  if (format == "ipv4") {
    return "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}"
           "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  }
  return nullptr;
}

/// Keywords that constrain values but are not enforced here: refused, so that a reply is never
/// presented as satisfying a schema it was not held to.
constexpr const char *kUnsupported[] = {"not",
                                        "if",
                                        "then",
                                        "else",
                                        "patternProperties",
                                        "propertyNames",
                                        "dependentRequired",
                                        "dependentSchemas",
                                        "unevaluatedProperties",
                                        "unevaluatedItems",
                                        "contains",
                                        "minContains",
                                        "maxContains",
                                        "minProperties",
                                        "maxProperties",
                                        "multipleOf",
                                        "minimum",
                                        "maximum",
                                        "exclusiveMinimum",
                                        "exclusiveMaximum"};

/// Reads an optional non-negative integer keyword; false (and fail()) when malformed.
bool readCount(GrammarBuilder &b, const Json &schema, const char *key, const std::string &path,
               int64_t &out) {
  auto it = schema.find(key);
  if (it == schema.end()) {
    return true;
  }
  if (!it->is_number_integer() && !it->is_number_unsigned() &&
      !(it->is_number_float() &&
        it->get<double>() == static_cast<double>(static_cast<int64_t>(it->get<double>())))) {
    b.fail(join(path, key), strCat("'", key, "' must be a non-negative integer"));
    return false;
  }
  const double v = it->get<double>();
  if (v < 0) {
    b.fail(join(path, key), strCat("'", key, "' must be a non-negative integer"));
    return false;
  }
  out = v > 1e15 ? int64_t(1e15) : static_cast<int64_t>(v);
  return true;
}

} // namespace

JsonSchemaCompiler::JsonSchemaCompiler(GrammarBuilder &builder, const Json &root,
                                       std::string basePath)
    : b_(builder), root_(root), base_(std::move(basePath)) {}

std::string JsonSchemaCompiler::at(const std::string &path) const {
  if (path.empty()) {
    return base_;
  }
  return base_.empty() ? path : base_ + "." + path;
}

Element JsonSchemaCompiler::ws() {
  if (wsRule_ < 0) {
    ByteSet space;
    for (char c : {' ', '\t', '\n', '\r'}) {
      space.set(static_cast<uint8_t>(c));
    }
    Element e = b_.repeat({b_.bytes(space)}, 0, kMaxJsonWhitespace, "ws", base_);
    wsRule_ = e.value;
  }
  return Element::rule(static_cast<uint32_t>(wsRule_));
}

Element JsonSchemaCompiler::jsonString() {
  if (stringRule_ < 0) {
    if (charRule_ < 0) {
      ByteSet excluded = ByteSet::range(0x00, 0x1F);
      excluded.set('"');
      excluded.set('\\');
      ByteSet hex = ByteSet::range('0', '9');
      hex.setRange('a', 'f');
      hex.setRange('A', 'F');
      ByteSet simple;
      for (char c : std::string_view("\"\\/bfnrt")) {
        simple.set(static_cast<uint8_t>(c));
      }
      Element h = b_.bytes(hex);
      charRule_ = b_.ruleOf(
          "char", {{b_.utf8Char(excluded)},
                   {b_.bytes(ByteSet::of('\\')), b_.bytes(simple)},
                   {b_.bytes(ByteSet::of('\\')), b_.bytes(ByteSet::of('u')), h, h, h, h}});
    }
    Seq body = b_.literal("\"");
    body.push_back(b_.star({Element::rule(static_cast<uint32_t>(charRule_))}, "chars"));
    body.push_back(b_.bytes(ByteSet::of('"')));
    stringRule_ = b_.ruleOf("string", {std::move(body)});
  }
  return Element::rule(static_cast<uint32_t>(stringRule_));
}

Element JsonSchemaCompiler::number(bool integer) {
  int64_t &cached = integer ? intRule_ : numberRule_;
  if (cached >= 0) {
    return Element::rule(static_cast<uint32_t>(cached));
  }
  const Element digit = b_.bytes(ByteSet::range('0', '9'));
  Seq intPart = {Element::rule(b_.ruleOf("sign", {b_.literal("-"), {}}))};
  intPart.push_back(Element::rule(
      b_.ruleOf("digits", {b_.literal("0"),
                           {b_.bytes(ByteSet::range('1', '9')),
                            b_.repeat({digit}, 0, kMaxIntegerDigits - 1, "digit", base_)}})));
  if (!integer) {
    Seq fraction = b_.literal(".");
    fraction.push_back(b_.repeat({digit}, 1, kMaxFractionDigits, "digit", base_));
    intPart.push_back(Element::rule(b_.ruleOf("fraction", {std::move(fraction), {}})));
    ByteSet e = ByteSet::of('e');
    e.set('E');
    ByteSet sign = ByteSet::of('+');
    sign.set('-');
    Seq exponent = {b_.bytes(e), Element::rule(b_.ruleOf("esign", {{b_.bytes(sign)}, {}})),
                    b_.repeat({digit}, 1, kMaxExponentDigits, "digit", base_)};
    intPart.push_back(Element::rule(b_.ruleOf("exponent", {std::move(exponent), {}})));
  }
  cached = b_.ruleOf(integer ? "integer" : "number", {std::move(intPart)});
  return Element::rule(static_cast<uint32_t>(cached));
}

Element JsonSchemaCompiler::literalRule(const std::string &text, const std::string &name) {
  return Element::rule(b_.ruleOf(name, {b_.literal(text)}));
}

Element JsonSchemaCompiler::anyValue() {
  if (anyRule_ >= 0) {
    return Element::rule(static_cast<uint32_t>(anyRule_));
  }
  anyRule_ = b_.newRule("value");
  const uint32_t any = static_cast<uint32_t>(anyRule_);
  // Arrays of any values.
  Seq more = b_.literal(",");
  more.push_back(ws());
  more.push_back(Element::rule(any));
  more.push_back(ws());
  Seq items = {Element::rule(any), ws(), b_.star(more, "items")};
  Seq array = b_.literal("[");
  array.push_back(ws());
  array.push_back(Element::rule(b_.ruleOf("elements", {std::move(items), {}})));
  array.push_back(b_.bytes(ByteSet::of(']')));
  b_.addAlternative(any, {anyObject()});
  b_.addAlternative(any, {Element::rule(b_.ruleOf("array", {std::move(array)}))});
  b_.addAlternative(any, {jsonString()});
  b_.addAlternative(any, {number(false)});
  b_.addAlternative(any, b_.literal("true"));
  b_.addAlternative(any, b_.literal("false"));
  b_.addAlternative(any, b_.literal("null"));
  return Element::rule(any);
}

Element JsonSchemaCompiler::anyObject() {
  if (anyObjectRule_ >= 0) {
    return Element::rule(static_cast<uint32_t>(anyObjectRule_));
  }
  anyObjectRule_ = b_.newRule("object");
  const Element value = anyValue();
  Seq member = {jsonString(), ws(), b_.bytes(ByteSet::of(':')), ws(), value, ws()};
  Seq more = b_.literal(",");
  more.push_back(ws());
  more.insert(more.end(), member.begin(), member.end());
  Seq members = member;
  members.push_back(b_.star(more, "members"));
  Seq object = b_.literal("{");
  object.push_back(ws());
  object.push_back(Element::rule(b_.ruleOf("members", {std::move(members), {}})));
  object.push_back(b_.bytes(ByteSet::of('}')));
  b_.addAlternative(static_cast<uint32_t>(anyObjectRule_), std::move(object));
  return Element::rule(static_cast<uint32_t>(anyObjectRule_));
}

Element JsonSchemaCompiler::ref(const std::string &pointer, const std::string &path, int depth) {
  if (auto it = refs_.find(pointer); it != refs_.end()) {
    return Element::rule(it->second);
  }
  if (pointer.empty() || pointer[0] != '#') {
    b_.fail(at(path),
            strCat("only local references (\"#...\") are supported, not '", pointer, "'"));
    return Element::rule(b_.newRule("ref"));
  }
  const Json *target = nullptr;
  std::string targetPath;
  if (pointer == "#") {
    target = &root_;
  } else if (pointer.size() > 1 && pointer[1] == '/') {
    try {
      target = &root_.at(Json::json_pointer(pointer.substr(1)));
    } catch (const std::exception &) {
      target = nullptr;
    }
    for (size_t i = 2; i < pointer.size(); ++i) {
      targetPath += pointer[i] == '/' ? '.' : pointer[i];
    }
  }
  if (!target) {
    b_.fail(at(path), strCat("the reference '", pointer, "' resolves to nothing"));
    return Element::rule(b_.newRule("ref"));
  }
  const uint32_t rule = b_.newRule("ref " + pointer);
  refs_[pointer] = rule;
  b_.addAlternative(rule, {value(*target, targetPath, depth + 1)});
  return Element::rule(rule);
}

Element JsonSchemaCompiler::value(const Json &schema, const std::string &path, int depth) {
  if (b_.failed()) {
    return Element::rule(0);
  }
  if (depth > b_.bounds().maxNesting) {
    b_.fail(at(path), strCat("the schema nests deeper than ", b_.bounds().maxNesting,
                             " (bound grammar.maxNesting)"));
    return Element::rule(0);
  }
  if (schema.is_boolean()) {
    if (schema.get<bool>()) {
      return anyValue();
    }
    b_.fail(at(path), "the schema false admits no value");
    return Element::rule(0);
  }
  if (!schema.is_object()) {
    b_.fail(at(path), "a schema must be an object or a boolean");
    return Element::rule(0);
  }
  for (const char *key : kUnsupported) {
    if (schema.contains(key)) {
      b_.fail(at(join(path, key)),
              strCat("the keyword '", key, "' is not supported in structured outputs"));
      return Element::rule(0);
    }
  }
  if (auto it = schema.find("uniqueItems");
      it != schema.end() && it->is_boolean() && it->get<bool>()) {
    b_.fail(at(join(path, "uniqueItems")), "uniqueItems is not supported in structured outputs");
    return Element::rule(0);
  }
  if (auto it = schema.find("$ref"); it != schema.end()) {
    if (!it->is_string()) {
      b_.fail(at(join(path, "$ref")), "$ref must be a string");
      return Element::rule(0);
    }
    return ref(it->get<std::string>(), join(path, "$ref"), depth);
  }
  if (auto it = schema.find("const"); it != schema.end()) {
    return literalRule(it->dump(), "const");
  }
  if (auto it = schema.find("enum"); it != schema.end()) {
    if (!it->is_array() || it->empty()) {
      b_.fail(at(join(path, "enum")), "enum must be a non-empty array");
      return Element::rule(0);
    }
    if (static_cast<int64_t>(it->size()) > b_.bounds().maxAlternatives) {
      b_.fail(at(join(path, "enum")),
              strCat("enum has ", it->size(), " values; at most ", b_.bounds().maxAlternatives,
                     " are allowed (bound grammar.maxAlternatives)"));
      return Element::rule(0);
    }
    std::vector<Seq> alts;
    for (const Json &v : *it) {
      alts.push_back(b_.literal(v.dump()));
    }
    return Element::rule(b_.ruleOf("enum", std::move(alts)));
  }
  for (const char *key : {"anyOf", "oneOf"}) {
    auto it = schema.find(key);
    if (it == schema.end()) {
      continue;
    }
    if (!it->is_array() || it->empty()) {
      b_.fail(at(join(path, key)), strCat(key, " must be a non-empty array of schemas"));
      return Element::rule(0);
    }
    if (static_cast<int64_t>(it->size()) > b_.bounds().maxAlternatives) {
      b_.fail(at(join(path, key)), strCat(key, " has more than ", b_.bounds().maxAlternatives,
                                          " schemas (bound grammar.maxAlternatives)"));
      return Element::rule(0);
    }
    std::vector<Seq> alts;
    for (size_t i = 0; i < it->size(); ++i) {
      alts.push_back({value((*it)[i], index(path, key, i), depth + 1)});
    }
    return Element::rule(b_.ruleOf(key, std::move(alts)));
  }
  if (auto it = schema.find("allOf"); it != schema.end()) {
    if (!it->is_array() || it->size() != 1) {
      b_.fail(at(join(path, "allOf")), "allOf is supported with exactly one schema");
      return Element::rule(0);
    }
    return value((*it)[0], index(path, "allOf", 0), depth + 1);
  }
  auto type = schema.find("type");
  if (type == schema.end()) {
    // No type: what the other keywords imply, else any value.
    for (const char *key : {"properties", "required", "additionalProperties"}) {
      if (schema.contains(key)) {
        return object(schema, path, depth);
      }
    }
    for (const char *key : {"items", "prefixItems", "minItems", "maxItems"}) {
      if (schema.contains(key)) {
        return array(schema, path, depth);
      }
    }
    for (const char *key : {"minLength", "maxLength", "pattern", "format"}) {
      if (schema.contains(key)) {
        return string(schema, path, false);
      }
    }
    return anyValue();
  }
  if (type->is_string()) {
    return typed(type->get<std::string>(), schema, path, join(path, "type"), depth);
  }
  if (type->is_array() && !type->empty()) {
    std::vector<Seq> alts;
    for (size_t i = 0; i < type->size(); ++i) {
      if (!(*type)[i].is_string()) {
        b_.fail(at(index(path, "type", i)), "a type name must be a string");
        return Element::rule(0);
      }
      alts.push_back(
          {typed((*type)[i].get<std::string>(), schema, path, index(path, "type", i), depth)});
    }
    return Element::rule(b_.ruleOf("types", std::move(alts)));
  }
  b_.fail(at(join(path, "type")), "type must be a type name or a non-empty array of them");
  return Element::rule(0);
}

Element JsonSchemaCompiler::typed(const std::string &type, const Json &schema,
                                  const std::string &path, const std::string &typePath, int depth) {
  if (type == "string") {
    return string(schema, path, false);
  }
  if (type == "integer") {
    return number(true);
  }
  if (type == "number") {
    return number(false);
  }
  if (type == "boolean") {
    return Element::rule(b_.ruleOf("boolean", {b_.literal("true"), b_.literal("false")}));
  }
  if (type == "null") {
    return literalRule("null", "null");
  }
  if (type == "object") {
    return object(schema, path, depth);
  }
  if (type == "array") {
    return array(schema, path, depth);
  }
  b_.fail(at(typePath), strCat("unknown type '", type,
                               "' (string, integer, number, boolean, null, object, array)"));
  return Element::rule(0);
}

Element JsonSchemaCompiler::string(const Json &schema, const std::string &path, bool raw) {
  int64_t minLength = 0, maxLength = -1;
  if (!readCount(b_, schema, "minLength", at(path), minLength) ||
      !readCount(b_, schema, "maxLength", at(path), maxLength)) {
    return Element::rule(0);
  }
  if (schema.contains("maxLength") && maxLength < minLength) {
    b_.fail(at(join(path, "maxLength")), "maxLength is below minLength");
    return Element::rule(0);
  }
  const Spelling spelling = raw ? Spelling::Raw : Spelling::JsonString;
  auto quoted = [&](Element body) {
    if (raw) {
      return body;
    }
    return Element::rule(
        b_.ruleOf("string", {{b_.bytes(ByteSet::of('"')), body, b_.bytes(ByteSet::of('"'))}}));
  };
  const char *pattern = nullptr;
  std::string patternPath;
  std::string patternText;
  if (auto it = schema.find("pattern"); it != schema.end()) {
    if (!it->is_string()) {
      b_.fail(at(join(path, "pattern")), "pattern must be a string");
      return Element::rule(0);
    }
    patternText = it->get<std::string>();
    pattern = patternText.c_str();
    patternPath = join(path, "pattern");
  } else if (auto f = schema.find("format"); f != schema.end() && f->is_string()) {
    pattern = formatRegex(f->get<std::string>());
    patternPath = join(path, "format");
  }
  if (pattern) {
    if (schema.contains("minLength") || schema.contains("maxLength")) {
      b_.fail(at(patternPath), "a pattern or format together with minLength/maxLength is not "
                               "supported");
      return Element::rule(0);
    }
    return quoted(compileRegex(b_, pattern, spelling, at(patternPath)));
  }
  if (!raw && minLength == 0 && maxLength < 0) {
    return jsonString();
  }
  Element ch = raw ? b_.utf8Char(ByteSet{}) : Element{};
  if (!raw) {
    jsonString(); // makes the char rule
    ch = Element::rule(static_cast<uint32_t>(charRule_));
  }
  return quoted(b_.repeat({ch}, minLength, maxLength, "char", at(path)));
}

Element JsonSchemaCompiler::object(const Json &schema, const std::string &path, int depth) {
  const Json empty = Json::object();
  const Json *properties = &empty;
  if (auto it = schema.find("properties"); it != schema.end()) {
    if (!it->is_object()) {
      b_.fail(at(join(path, "properties")), "properties must be an object");
      return Element::rule(0);
    }
    properties = &*it;
  }
  std::vector<std::string> required;
  if (auto it = schema.find("required"); it != schema.end()) {
    if (!it->is_array()) {
      b_.fail(at(join(path, "required")), "required must be an array of property names");
      return Element::rule(0);
    }
    for (size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string()) {
        b_.fail(at(index(path, "required", i)), "a required name must be a string");
        return Element::rule(0);
      }
      required.push_back((*it)[i].get<std::string>());
    }
  }
  // Absent additionalProperties: none beside listed properties (OpenAI's strict reading), any
  // when the schema lists none.
  const Json *additional = nullptr;
  bool additionalAllowed = properties->empty();
  if (auto it = schema.find("additionalProperties"); it != schema.end()) {
    if (it->is_boolean()) {
      additionalAllowed = it->get<bool>();
    } else if (it->is_object()) {
      additionalAllowed = true;
      additional = &*it;
    } else {
      b_.fail(at(join(path, "additionalProperties")),
              "additionalProperties must be a boolean or a schema");
      return Element::rule(0);
    }
  }
  struct Member {
    Seq seq;
    bool required;
  };
  std::vector<Member> members;
  auto isRequired = [&](const std::string &key) {
    return std::find(required.begin(), required.end(), key) != required.end();
  };
  const Json anything = true;
  std::vector<std::string> keys;
  for (auto it = properties->begin(); it != properties->end(); ++it) {
    keys.push_back(it.key());
  }
  for (const std::string &key : required) {
    if (!properties->contains(key)) {
      keys.push_back(key);
    }
  }
  if (static_cast<int64_t>(keys.size()) > b_.bounds().maxAlternatives) {
    b_.fail(at(join(path, "properties")), strCat("more than ", b_.bounds().maxAlternatives,
                                                 " properties (bound grammar.maxAlternatives)"));
    return Element::rule(0);
  }
  for (const std::string &key : keys) {
    const Json &sub = properties->contains(key) ? (*properties)[key] : anything;
    Seq seq = b_.literal(Json(key).dump());
    seq.push_back(ws());
    seq.push_back(b_.bytes(ByteSet::of(':')));
    seq.push_back(ws());
    seq.push_back(value(sub, join(join(path, "properties"), key), depth + 1));
    seq.push_back(ws());
    members.push_back({std::move(seq), isRequired(key)});
    if (b_.failed()) {
      return Element::rule(0);
    }
  }
  const size_t n = members.size();
  // first[i]: members i.. with none written yet; after[i]: members i.. after one was written.
  std::vector<uint32_t> first(n + 1), after(n + 1);
  for (size_t i = 0; i <= n; ++i) {
    first[i] = b_.newRule("members");
    after[i] = b_.newRule("more");
  }
  Seq comma = b_.literal(",");
  comma.push_back(ws());
  if (additionalAllowed) {
    Seq extra = {jsonString(),
                 ws(),
                 b_.bytes(ByteSet::of(':')),
                 ws(),
                 additional ? value(*additional, join(path, "additionalProperties"), depth + 1)
                            : anyValue(),
                 ws()};
    Seq more = comma;
    more.insert(more.end(), extra.begin(), extra.end());
    more.push_back(Element::rule(after[n]));
    b_.addAlternative(after[n], std::move(more));
    extra.push_back(Element::rule(after[n]));
    b_.addAlternative(first[n], std::move(extra));
  }
  b_.addAlternative(after[n], {});
  b_.addAlternative(first[n], {});
  for (size_t i = n; i-- > 0;) {
    Seq take = members[i].seq;
    take.push_back(Element::rule(after[i + 1]));
    Seq more = comma;
    more.insert(more.end(), take.begin(), take.end());
    b_.addAlternative(first[i], take);
    b_.addAlternative(after[i], std::move(more));
    if (!members[i].required) {
      b_.addAlternative(first[i], {Element::rule(first[i + 1])});
      b_.addAlternative(after[i], {Element::rule(after[i + 1])});
    }
  }
  Seq object = b_.literal("{");
  object.push_back(ws());
  object.push_back(Element::rule(first[0]));
  object.push_back(b_.bytes(ByteSet::of('}')));
  return Element::rule(b_.ruleOf("object", {std::move(object)}));
}

Element JsonSchemaCompiler::array(const Json &schema, const std::string &path, int depth) {
  std::vector<const Json *> prefix;
  std::vector<std::string> prefixPaths;
  const Json anything = true;
  const Json *items = &anything;
  std::string itemsPath = join(path, "items");
  bool rest = true;
  if (auto it = schema.find("prefixItems"); it != schema.end()) {
    if (!it->is_array()) {
      b_.fail(at(join(path, "prefixItems")), "prefixItems must be an array of schemas");
      return Element::rule(0);
    }
    for (size_t i = 0; i < it->size(); ++i) {
      prefix.push_back(&(*it)[i]);
      prefixPaths.push_back(index(path, "prefixItems", i));
    }
  }
  if (auto it = schema.find("items"); it != schema.end()) {
    if (it->is_array()) { // the older tuple form
      for (size_t i = 0; i < it->size(); ++i) {
        prefix.push_back(&(*it)[i]);
        prefixPaths.push_back(index(path, "items", i));
      }
      rest = false;
    } else if (it->is_boolean() && !it->get<bool>()) {
      rest = false;
    } else {
      items = &*it;
    }
  }
  int64_t minItems = 0, maxItems = -1;
  if (!readCount(b_, schema, "minItems", at(path), minItems) ||
      !readCount(b_, schema, "maxItems", at(path), maxItems)) {
    return Element::rule(0);
  }
  const int64_t k = static_cast<int64_t>(prefix.size());
  if (!rest) {
    maxItems = maxItems < 0 ? k : std::min(maxItems, k);
  }
  if (maxItems >= 0 && minItems > maxItems) {
    b_.fail(at(join(path, "minItems")), "minItems is above the most items the array can hold");
    return Element::rule(0);
  }
  for (auto [key, count] : {std::pair<const char *, int64_t>{"minItems", minItems},
                            std::pair<const char *, int64_t>{"maxItems", maxItems}}) {
    if (count > b_.bounds().maxRepeat) {
      b_.fail(at(join(path, key)), strCat(key, " ", count, " exceeds ", b_.bounds().maxRepeat,
                                          " (bound grammar.maxRepeat)"));
      return Element::rule(0);
    }
  }
  std::vector<Element> prefixRules;
  for (size_t i = 0; i < prefix.size(); ++i) {
    prefixRules.push_back(value(*prefix[i], prefixPaths[i], depth + 1));
  }
  Element item = rest ? value(*items, itemsPath, depth + 1) : Element::rule(0);
  if (b_.failed()) {
    return Element::rule(0);
  }
  auto element = [&](int64_t j) { return j < k ? prefixRules[static_cast<size_t>(j)] : item; };
  Seq comma = b_.literal(",");
  comma.push_back(ws());
  // tail[j]: the items after the j-th, once j are written.
  const int64_t fixed = std::max(k, minItems);
  const int64_t last = maxItems >= 0 ? maxItems : std::max<int64_t>(fixed, 1);
  std::vector<uint32_t> tail(static_cast<size_t>(last + 1));
  for (int64_t j = 0; j <= last; ++j) {
    tail[static_cast<size_t>(j)] = b_.newRule("items");
  }
  for (int64_t j = last; j >= 1; --j) {
    const uint32_t t = tail[static_cast<size_t>(j)];
    if (maxItems >= 0 && j == maxItems) {
      b_.addAlternative(t, {});
      continue;
    }
    Seq more = comma;
    more.push_back(element(j));
    more.push_back(ws());
    // Past the prefix and the minimum with no maximum: the same tail forever.
    more.push_back(Element::rule(j == last && maxItems < 0 ? t : tail[static_cast<size_t>(j + 1)]));
    b_.addAlternative(t, std::move(more));
    if (j >= minItems) {
      b_.addAlternative(t, {});
    }
  }
  Seq array = b_.literal("[");
  array.push_back(ws());
  if (maxItems != 0) {
    Seq items0 = {element(0), ws(), Element::rule(tail[1])};
    std::vector<Seq> alts = {std::move(items0)};
    if (minItems == 0) {
      alts.push_back({});
    }
    array.push_back(Element::rule(b_.ruleOf("elements", std::move(alts))));
  }
  array.push_back(b_.bytes(ByteSet::of(']')));
  return Element::rule(b_.ruleOf("array", {std::move(array)}));
}

Element JsonSchemaCompiler::argument(const Json &schema, const std::string &path) {
  // GLM writes a string argument raw; the parser (ToolCallParser) keeps it as text when the
  // schema's only type is string.
  if (schema.is_object() && !schema.contains("$ref") && !schema.contains("anyOf") &&
      !schema.contains("oneOf")) {
    auto type = schema.find("type");
    const bool stringOnly = type != schema.end() && type->is_string() && *type == "string";
    if (stringOnly) {
      if (auto it = schema.find("enum"); it != schema.end() && it->is_array() && !it->empty()) {
        std::vector<Seq> alts;
        for (const Json &v : *it) {
          alts.push_back(b_.literal(v.is_string() ? v.get<std::string>() : v.dump()));
        }
        return Element::rule(b_.ruleOf("enum", std::move(alts)));
      }
      if (auto it = schema.find("const"); it != schema.end() && it->is_string()) {
        return literalRule(it->get<std::string>(), "const");
      }
      return string(schema, path, true);
    }
  }
  return value(schema, path, 1);
}

} // namespace glm::grammar

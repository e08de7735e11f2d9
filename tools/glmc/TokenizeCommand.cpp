// `glmc tokenize`: a line-oriented front end to the server's tokenizer, for tests and scripts.
#include "server/tokenizer/Tokenizer.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace glm::tools {
namespace {

using nlohmann::json;
using server::TokenId;
using server::Tokenizer;

Expected<json> parseLine(const std::string &line, std::string_view expected) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) {
    return invalidArgument("empty line; expected ", expected);
  }
  json value = json::parse(line, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    return invalidArgument("not valid JSON (expected ", expected, ")");
  }
  return value;
}

/// One JSON string in, its ids as a compact JSON array out.
Status encodeLine(const Tokenizer &tokenizer, const std::string &line, std::string &out) {
  GLM_ASSIGN_OR_RETURN(json value, parseLine(line, "a JSON string"));
  if (!value.is_string()) {
    return invalidArgument("expected a JSON string, got ", value.type_name());
  }
  GLM_ASSIGN_OR_RETURN(std::vector<TokenId> ids,
                       tokenizer.encode(value.get_ref<const std::string &>()));
  out += json(ids).dump();
  out += '\n';
  return Status::success();
}

/// One JSON array of ids in, the decoded text as a JSON string out (UTF-8, not \u-escaped).
Status decodeLine(const Tokenizer &tokenizer, const std::string &line, std::string &out) {
  GLM_ASSIGN_OR_RETURN(json value, parseLine(line, "a JSON array of token ids"));
  if (!value.is_array()) {
    return invalidArgument("expected a JSON array of token ids, got ", value.type_name());
  }
  std::vector<TokenId> ids;
  ids.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    const json &element = value[i];
    if (!element.is_number_integer()) {
      return invalidArgument("element ", i, " is ", element.dump(), ", not a token id");
    }
    // Unsigned values above INT64_MAX read back negative, so one range check covers both.
    int64_t id = element.is_number_unsigned() && element.get<uint64_t>() > INT32_MAX
                     ? -1
                     : element.get<int64_t>();
    if (id < 0 || !tokenizer.hasId(static_cast<TokenId>(id))) {
      return invalidArgument("element ", i, ": token id ", element.dump(),
                             " is out of range (the tokenizer has ids 0 to ",
                             tokenizer.idCount() - 1, ")");
    }
    ids.push_back(static_cast<TokenId>(id));
  }
  // Ids that end inside a character decode with U+FFFD in its place, as Hugging Face does.
  GLM_ASSIGN_OR_RETURN(std::string text, tokenizer.decode(ids));
  out += json(text).dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
  out += '\n';
  return Status::success();
}

} // namespace

int runTokenize(const std::vector<std::string> &args) {
  CommandLine cl("glmc tokenize", "--model DIR [--decode]",
                 "Reads JSON strings, one per line, and writes their token id arrays (--decode: "
                 "id arrays in, strings\nout).");
  cl.option("model", "DIR", "the checkpoint whose tokenizer.json to use")
      .flag("decode", "decode id arrays instead")
      .positional(0, 0);
  if (std::optional<int> exit = cl.parseOrExit(args)) {
    return *exit;
  }
  std::optional<std::string> modelDir = cl.get("model");
  if (!modelDir) {
    std::fprintf(stderr, "glmc tokenize: --model DIR is required\n");
    return 2;
  }
  Expected<Tokenizer> tokenizer = Tokenizer::fromModelDir(*modelDir);
  if (!tokenizer.ok()) {
    return cl.fail(tokenizer.status());
  }
  const bool decode = cl.has("decode");

  // Output is held until every line has succeeded, so a bad line leaves no partial result for a
  // script to mistake for a complete one.
  std::ios::sync_with_stdio(false);
  std::string output;
  std::string line;
  size_t lineNumber = 0;
  while (std::getline(std::cin, line)) {
    ++lineNumber;
    Status s = decode ? decodeLine(*tokenizer, line, output) : encodeLine(*tokenizer, line, output);
    if (!s.ok()) {
      std::fprintf(stderr, "glmc tokenize: line %zu: %s\n", lineNumber, s.message().c_str());
      return 1;
    }
  }
  if (std::cin.bad()) {
    std::fprintf(stderr, "glmc tokenize: reading standard input failed\n");
    return 1;
  }
  if (std::fwrite(output.data(), 1, output.size(), stdout) != output.size() ||
      std::fflush(stdout) != 0) {
    std::fprintf(stderr, "glmc tokenize: writing standard output failed\n");
    return 1;
  }
  return 0;
}

} // namespace glm::tools

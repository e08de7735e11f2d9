// PCRE2-backed patterns for the pre-tokenizer, with the Oniguruma differences translated away.
#include "server/tokenizer/Regex.h"

#include "base/Utf8.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace glm::server {
namespace {

// Class items usable inside both [...] and [^...]. Oniguruma's Unicode \s is White_Space; PCRE2
// adds U+180E, which Unicode stopped calling a space in 6.3, so both sides are spelled out.
constexpr std::string_view kSpaceItems = "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}"
                                         "\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
                                         "\\x{205F}\\x{3000}";
constexpr std::string_view kNonSpaceItems =
    "\\x{0}-\\x{8}\\x{E}-\\x{1F}\\x{21}-\\x{84}\\x{86}-\\x{9F}\\x{A1}-\\x{167F}"
    "\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}"
    "\\x{2060}-\\x{2FFF}\\x{3001}-\\x{10FFFF}";
// Oniguruma's \h is a hex digit (PCRE2's is horizontal space).
constexpr std::string_view kHexItems = "0-9A-Fa-f";
constexpr std::string_view kNonHexItems =
    "\\x{0}-\\x{2F}\\x{3A}-\\x{40}\\x{47}-\\x{60}\\x{67}-\\x{10FFFF}";
// Letters and numbers that Unicode assigned after PCRE2 10.42's tables (Unicode 14) and that
// tokenizers' Oniguruma (Unicode 16) knows: CJK extensions H and I, Garay, Kirat Rai, Kawi, Ol
// Onal, Sunuwar, Tulu-Tigalari and more. Measured by tokenizing every code point with both; no
// other code point's \p{L} or \p{N} membership differs.
constexpr std::string_view kNewLetters =
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}"
    "\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}"
    "\\x{1123F}-\\x{11240}\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}"
    "\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}\\x{113D3}\\x{11BC0}-\\x{11BE0}"
    "\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}\\x{1342F}"
    "\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}"
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}"
    "\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}"
    "\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";
constexpr std::string_view kNewNumbers =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}"
    "\\x{11F50}-\\x{11F59}\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}"
    "\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}"
    "\\x{1E5F1}-\\x{1E5FA}";

/// Class items for general category L or N, with the newer code points; empty for others.
std::string categoryItems(std::string_view name) {
  if (name == "L" || name == "Letter") {
    return strCat("\\p{L}", kNewLetters);
  }
  if (name == "N" || name == "Number") {
    return strCat("\\p{N}", kNewNumbers);
  }
  return std::string();
}

// Oniguruma's Unicode \w; PCRE2 10.42's UCP \w leaves out marks and connector punctuation.
const std::string &wordItems() {
  static const std::string items =
      strCat(categoryItems("L"), "\\p{M}", categoryItems("N"), "\\p{Pc}");
  return items;
}

std::string pcre2ErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  int n = pcre2_get_error_message(code, buffer, sizeof buffer);
  if (n < 0) {
    return strCat("PCRE2 error ", code);
  }
  return std::string(reinterpret_cast<const char *>(buffer), static_cast<size_t>(n));
}

/// Per-thread match resources: PCRE2 match data and contexts are not shareable between threads
/// that match at the same time, and allocating them per call would cost more than a short match.
struct ThreadMatchState {
  pcre2_match_data *matchData = nullptr;
  pcre2_match_context *context = nullptr;
  pcre2_jit_stack *jitStack = nullptr;

  ThreadMatchState() {
    // One pair is all we read; PCRE2 returns 0 (still a match) when captures do not fit.
    matchData = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    // The default 32 KiB JIT stack is on the machine stack; a private one grows to 4 MiB so
    // long runs of backtracking-heavy input do not fail.
    jitStack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    if (context != nullptr && jitStack != nullptr) {
      pcre2_jit_stack_assign(context, nullptr, jitStack);
    }
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(jitStack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(matchData);
  }
  ThreadMatchState(const ThreadMatchState &) = delete;
  ThreadMatchState &operator=(const ThreadMatchState &) = delete;
};

ThreadMatchState &threadMatchState() {
  thread_local ThreadMatchState state;
  return state;
}

} // namespace

struct Regex::Impl {
  std::string pattern; // as written in tokenizer.json
  pcre2_code *code = nullptr;
  bool jit = false;

  ~Impl() { pcre2_code_free(code); }
};

Regex::Regex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Regex::Regex(Regex &&) noexcept = default;
Regex &Regex::operator=(Regex &&) noexcept = default;
Regex::~Regex() = default;

bool Regex::usesJit() const { return impl_->jit; }
const std::string &Regex::pattern() const { return impl_->pattern; }

Expected<std::string> Regex::translateOnigurumaPattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() * 2);
  bool inClass = false;
  size_t i = 0;
  auto unsupported = [&](std::string_view what) {
    return unimplemented("regex '", p, "': ", what, " (at offset ", i,
                         ") is Oniguruma syntax that PCRE2 lacks");
  };
  while (i < p.size()) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char d = p[i + 1];
      auto classOf = [&](std::string_view items, bool negate) {
        if (inClass) {
          out += items;
        } else {
          out += negate ? "[^" : "[";
          out += items;
          out += ']';
        }
      };
      switch (d) {
      case 's':
        classOf(kSpaceItems, false);
        break;
      case 'S':
        if (inClass) {
          out += kNonSpaceItems;
        } else {
          classOf(kSpaceItems, true);
        }
        break;
      case 'h':
        classOf(kHexItems, false);
        break;
      case 'H':
        if (inClass) {
          out += kNonHexItems;
        } else {
          classOf(kHexItems, true);
        }
        break;
      case 'w':
        classOf(wordItems(), false);
        break;
      case 'W':
        if (inClass) {
          return unsupported("\\W inside a character class");
        }
        classOf(wordItems(), true);
        break;
      case 'Q': {
        // \Q...\E quotes verbatim.
        size_t end = p.find("\\E", i + 2);
        end = end == std::string_view::npos ? p.size() : end + 2;
        out.append(p.substr(i, end - i));
        i = end;
        continue;
      }
      case 'p':
      case 'P': {
        // \p{L}, \pL, \P{L}, \p{^L}: L and N gain the code points PCRE2's tables lack.
        std::string_view name;
        size_t end = i + 3;
        if (i + 2 < p.size() && p[i + 2] == '{') {
          size_t close = p.find('}', i + 2);
          if (close != std::string_view::npos) {
            name = p.substr(i + 3, close - i - 3);
            end = close + 1;
          }
        } else if (i + 2 < p.size()) {
          name = p.substr(i + 2, 1);
        }
        bool negated = d == 'P';
        if (!name.empty() && name[0] == '^') {
          negated = !negated;
          name.remove_prefix(1);
        }
        std::string items = categoryItems(name);
        if (!items.empty() && !(negated && inClass)) {
          classOf(items, negated);
          i = end;
          continue;
        }
        // Other properties, and a negated L or N inside a class (which a union cannot express),
        // keep PCRE2's Unicode 14 meaning.
        out.append(p.substr(i, end - i));
        i = end;
        continue;
      }
      case 'x':
      case 'o':
        if (i + 2 < p.size() && p[i + 2] == '{') {
          size_t close = p.find('}', i + 2);
          close = close == std::string_view::npos ? p.size() : close + 1;
          out.append(p.substr(i, close - i));
          i = close;
          continue;
        }
        out.append(p.substr(i, 2));
        break;
      default:
        out.append(p.substr(i, 2));
        break;
      }
      i += 2;
      continue;
    }
    if (inClass) {
      if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {
          size_t close = p.find(":]", i + 2);
          if (close != std::string_view::npos) {
            out.append(p.substr(i, close + 2 - i));
            i = close + 2;
            continue;
          }
        }
        return unsupported("a nested character class");
      }
      if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') {
        return unsupported("character class intersection '&&'");
      }
      if (c == ']') {
        inClass = false;
      }
      out += c;
      ++i;
      continue;
    }
    if (c == '[') {
      out += c;
      ++i;
      if (i < p.size() && p[i] == '^') {
        out += p[i++];
      }
      // A ']' right after the opening bracket is a literal in both dialects.
      if (i < p.size() && p[i] == ']') {
        out += p[i++];
      }
      inClass = true;
      continue;
    }
    if (c == '(' && i + 1 < p.size() && p[i + 1] == '?') {
      // (?imx-imx) and (?imx-imx:...): Oniguruma's m is PCRE2's s (dot matches newline).
      size_t j = i + 2;
      while (j < p.size() && (p[j] == 'i' || p[j] == 'm' || p[j] == 'x' || p[j] == '-')) {
        ++j;
      }
      if (j > i + 2 && j < p.size() && (p[j] == ')' || p[j] == ':')) {
        out += "(?";
        for (size_t k = i + 2; k < j; ++k) {
          out += p[k] == 'm' ? 's' : p[k];
        }
        i = j;
        continue;
      }
    }
    out += c;
    ++i;
  }
  return out;
}

namespace {

Expected<pcre2_code *> compileRaw(std::string_view original, std::string_view pcrePattern,
                                  uint32_t options) {
  pcre2_compile_context *context = pcre2_compile_context_create(nullptr);
  if (context == nullptr) {
    return internalError("regex: out of memory creating a PCRE2 compile context");
  }
  // Oniguruma's lines end at LF only.
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);
  int errorCode = 0;
  PCRE2_SIZE errorOffset = 0;
  pcre2_code *code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcrePattern.data()), pcrePattern.size(),
                    PCRE2_UTF | options, &errorCode, &errorOffset, context);
  pcre2_compile_context_free(context);
  if (code == nullptr) {
    return invalidArgument(
        "regex '", original, "' does not compile: ", pcre2ErrorMessage(errorCode), " (at offset ",
        errorOffset, pcrePattern == original ? "" : " of its PCRE2 translation", ")");
  }
  return code;
}

} // namespace

Expected<Regex> Regex::compile(std::string_view pattern) {
  GLM_ASSIGN_OR_RETURN(std::string translated, translateOnigurumaPattern(pattern));
  GLM_ASSIGN_OR_RETURN(pcre2_code * code,
                       compileRaw(pattern, translated, PCRE2_UCP | PCRE2_MULTILINE));
  auto impl = std::make_unique<Impl>();
  impl->pattern = std::string(pattern);
  impl->code = code;
  // JIT is an optimisation: where this PCRE2 build or machine lacks it, the interpreter runs.
  impl->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return Regex(std::move(impl));
}

Expected<Regex> Regex::literal(std::string_view text) {
  // UCP is meaningless for a literal, and PCRE2 refuses it with PCRE2_LITERAL.
  GLM_ASSIGN_OR_RETURN(pcre2_code * code, compileRaw(text, text, PCRE2_LITERAL));
  auto impl = std::make_unique<Impl>();
  impl->pattern = std::string(text);
  impl->code = code;
  impl->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return Regex(std::move(impl));
}

Status Regex::findAll(std::string_view subject,
                      std::vector<std::pair<size_t, size_t>> &matches) const {
  ThreadMatchState &state = threadMatchState();
  if (state.matchData == nullptr || state.context == nullptr) {
    return internalError("regex: out of memory creating PCRE2 match data");
  }
  const auto *data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const size_t size = subject.size();
  size_t searchFrom = 0;
  bool matchedBefore = false;
  size_t lastMatchEnd = 0;
  while (searchFrom <= size) {
    int rc = pcre2_match(impl_->code, data, size, searchFrom, PCRE2_NO_UTF_CHECK, state.matchData,
                         state.context);
    if (rc == PCRE2_ERROR_NOMATCH) {
      break;
    }
    if (rc < 0) {
      return invalidArgument("regex '", impl_->pattern, "' gave up on a ", size,
                             "-byte piece of text: ", pcre2ErrorMessage(rc));
    }
    const PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(state.matchData);
    size_t start = ovector[0];
    size_t end = ovector[1];
    if (start == end && matchedBefore && lastMatchEnd == end) {
      // An empty match right where the last one ended: step one character, as onig does.
      searchFrom +=
          searchFrom < size ? utf8SequenceLength(static_cast<uint8_t>(data[searchFrom])) : 1;
      continue;
    }
    searchFrom = end;
    lastMatchEnd = end;
    matchedBefore = true;
    matches.emplace_back(start, end);
  }
  return Status::success();
}

} // namespace glm::server

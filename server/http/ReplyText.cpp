// One choice's tokens to reasoning, content and tool calls, with stop strings applied.
#include "server/http/ReplyText.h"

#include <algorithm>
#include <utility>

namespace glm::server {

ReplyText::ReplyText(const Tokenizer &tokenizer, const ReplyTextOptions &options, uint64_t idSeed)
    // Special tokens stay in the text: <think>, </think> and the tool-call markers are special
    // tokens the splitter and parser need; end-of-sequence tokens never reach here.
    : detokenizer_(tokenizer, /*skipSpecialTokens=*/false), chat_(options.chat),
      splitter_(options.startsInReasoning), tools_(options.tools, idSeed),
      // Without tools (or with tool_choice "none"), tool-call markup is plain content.
      parseTools_(!options.tools.is_null() && !options.tools.empty()), stop_(options.stop) {
  for (const std::string &s : stop_) {
    holdBack_ = std::max(holdBack_, s.size() - 1);
  }
}

Expected<ReplyText::Delta> ReplyText::feed(int32_t token) {
  reasoningToken_ = chat_ && splitter_.inReasoning();
  GLM_ASSIGN_OR_RETURN(std::string text, detokenizer_.feed(token));
  return route(text, false);
}

Expected<ReplyText::Delta> ReplyText::finish() { return route(detokenizer_.finish(), true); }

void ReplyText::release(std::string &pending, bool final, std::string &out, Delta &delta) {
  size_t cut = std::string::npos;
  for (const std::string &s : stop_) {
    const size_t at = pending.find(s);
    if (at < cut) {
      cut = at;
      delta.stopString = s;
    }
  }
  if (cut != std::string::npos) {
    out += pending.substr(0, cut);
    pending.clear();
    stopped_ = delta.stopped = true;
    return;
  }
  if (final) {
    out += pending;
    pending.clear();
    return;
  }
  if (pending.size() > holdBack_) {
    size_t keep = pending.size() - holdBack_;
    while (keep > 0 && (static_cast<uint8_t>(pending[keep]) & 0xC0) == 0x80) {
      --keep; // never split a UTF-8 sequence
    }
    out += pending.substr(0, keep);
    pending.erase(0, keep);
  }
}

ReplyText::Delta ReplyText::route(const std::string &text, bool final) {
  Delta out;
  if (stopped_) {
    return out;
  }
  std::string content = text;
  if (chat_) {
    ReasoningSplitter::Delta d = splitter_.feed(text);
    if (final) {
      ReasoningSplitter::Delta rest = splitter_.finish();
      d.reasoning += rest.reasoning;
      d.content += rest.content;
    }
    pendingReasoning_ += d.reasoning;
    // Reasoning held back is released whole once the think block has closed: no stop string
    // can span the marker.
    release(pendingReasoning_, final || !splitter_.inReasoning() || !d.content.empty(),
            out.reasoning, out);
    if (out.stopped) {
      return out;
    }
    content = std::move(d.content);
  }
  pendingContent_ += content;
  std::string visible;
  release(pendingContent_, final, visible, out);
  if (chat_ && parseTools_) {
    ToolCallParser::Delta t = tools_.feed(visible);
    if (final || out.stopped) {
      ToolCallParser::Delta rest = tools_.finish();
      t.content += rest.content;
      t.calls.insert(t.calls.end(), rest.calls.begin(), rest.calls.end());
    }
    out.content = std::move(t.content);
    out.calls = std::move(t.calls);
  } else {
    out.content = std::move(visible);
  }
  return out;
}

} // namespace glm::server

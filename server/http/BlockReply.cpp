// A one-choice reply as blocks: tokens through ReplyText, then opened / extended / closed.
#include "server/http/BlockReply.h"

#include <random>

namespace glm::server {

BlockReply::BlockReply(const Tokenizer &tokenizer, const ReplyTextOptions &text,
                       int64_t promptTokens)
    // Tool-call ids must differ between replies: clients match results to calls by id.
    : promptTokens_(promptTokens), text_(tokenizer, text, std::random_device{}()) {}

bool BlockReply::token(int choice, const runtime::SampledToken &token, const Write &write) {
  if (choice != 0 || ended_ || error_) {
    return true;
  }
  ++tokens_;
  Expected<ReplyText::Delta> d = text_.feed(token.id);
  if (text_.reasoningToken()) {
    ++reasoningTokens_;
  }
  if (!d.ok()) {
    return true;
  }
  if (!deliver(*d, write)) {
    return false;
  }
  if (d->stopped) {
    // The engine may generate more; it is neither shown nor counted.
    end_ = End::StopString;
    stopString_ = d->stopString;
    return close(runtime::FinishReason::Stop, write);
  }
  return true;
}

bool BlockReply::finish(int choice, runtime::FinishReason reason, const Status &error,
                        const Write &write) {
  if (reason == runtime::FinishReason::Error && !error_) {
    error_ = error;
  }
  if (choice != 0 || ended_ || error_) {
    return true;
  }
  if (Expected<ReplyText::Delta> rest = text_.finish(); rest.ok()) {
    if (!deliver(*rest, write)) {
      return false;
    }
  }
  return close(reason, write);
}

ReplyStream::Summary BlockReply::summary() const {
  const char *reason = error_                   ? "error"
                       : !ended_                ? "cancelled"
                       : end_ == End::ToolCalls ? "tool_calls"
                       : end_ == End::Length    ? "length"
                                                : "stop";
  return Summary{tokens_, {reason}};
}

bool BlockReply::closeOpen(const Write &write) {
  if (blocks_.empty() || !blocks_.back().open) {
    return true;
  }
  blocks_.back().open = false;
  return closed(blocks_.size() - 1, write);
}

bool BlockReply::deliver(const ReplyText::Delta &d, const Write &write) {
  auto extend = [&](Kind kind, const std::string &text) {
    if (blocks_.empty() || !blocks_.back().open || blocks_.back().kind != kind) {
      if (!closeOpen(write)) {
        return false;
      }
      blocks_.push_back(Block{kind});
      if (!opened(blocks_.size() - 1, write)) {
        return false;
      }
    }
    blocks_.back().text += text;
    return extended(blocks_.size() - 1, text, write);
  };
  if (!d.reasoning.empty() && !extend(Kind::Reasoning, d.reasoning)) {
    return false;
  }
  if (!d.content.empty()) {
    const bool blank = d.content.find_first_not_of(" \t\r\n") == std::string::npos;
    const bool textOpen =
        !blocks_.empty() && blocks_.back().open && blocks_.back().kind == Kind::Text;
    if (blank && !textOpen) {
      pendingSpace_ += d.content;
    } else {
      const std::string text = std::move(pendingSpace_) + d.content;
      pendingSpace_.clear();
      if (!extend(Kind::Text, text)) {
        return false;
      }
    }
  }
  for (const ToolCall &call : d.calls) {
    pendingSpace_.clear();
    if (!closeOpen(write)) {
      return false;
    }
    blocks_.push_back(Block{Kind::ToolCall, {}, call, true});
    calls_ = true;
    if (!opened(blocks_.size() - 1, write)) {
      return false;
    }
    blocks_.back().open = false;
    if (!closed(blocks_.size() - 1, write)) {
      return false;
    }
  }
  return true;
}

bool BlockReply::close(runtime::FinishReason reason, const Write &write) {
  ended_ = true;
  if (calls_) {
    end_ = End::ToolCalls;
  } else if (end_ != End::StopString && reason == runtime::FinishReason::Length) {
    end_ = End::Length;
  }
  return closeOpen(write);
}

} // namespace glm::server

// Argument sources by name, and argument structs assembled from their constants.
#include "kernels/common/GpuLaunch.h"

namespace glm::kernels {
namespace {

constexpr std::pair<ArgSource, const char *> kSources[] = {
    {ArgSource::Operand, "operand"},     {ArgSource::Result, "result"},
    {ArgSource::Weight, "weight"},       {ArgSource::State, "state"},
    {ArgSource::Workspace, "workspace"}, {ArgSource::RankTimes, "rank_times"},
};

} // namespace

const char *argSourceName(ArgSource source) {
  for (const auto &[s, name] : kSources) {
    if (s == source) {
      return name;
    }
  }
  return "?";
}

bool parseArgSource(std::string_view name, ArgSource &source) {
  for (const auto &[s, n] : kSources) {
    if (name == n) {
      source = s;
      return true;
    }
  }
  return false;
}

std::vector<uint8_t> assembleArgs(uint32_t size, const std::vector<ArgConstant> &constants) {
  std::vector<uint8_t> bytes(size, 0);
  for (const ArgConstant &c : constants) {
    if (c.offset > size || c.width > size - c.offset) {
      return {};
    }
    uint8_t *at = bytes.data() + c.offset;
    if (c.isFloat && c.width == 4) {
      const float f = static_cast<float>(c.floatValue);
      std::memcpy(at, &f, 4);
    } else if (c.isFloat && c.width == 8) {
      std::memcpy(at, &c.floatValue, 8);
    } else if (!c.isFloat && (c.width == 1 || c.width == 2 || c.width == 4 || c.width == 8)) {
      // Little-endian, as every target glmc runs on.
      const uint64_t v = static_cast<uint64_t>(c.intValue);
      std::memcpy(at, &v, c.width);
    } else {
      return {};
    }
  }
  return bytes;
}

} // namespace glm::kernels

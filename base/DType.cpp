// Sizes and safetensors names of the checkpoint element types.
#include "base/DType.h"

#include <array>

namespace glm {

namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
  bool floatingPoint;
};

// One row per enumerator, in enum order, so dtypeInfo() can index it directly.
constexpr std::array<DTypeInfo, 10> kDTypes = {{
    {DType::BF16, "BF16", 2, true},
    {DType::F16, "F16", 2, true},
    {DType::F32, "F32", 4, true},
    {DType::F8_E4M3, "F8_E4M3", 1, true},
    {DType::I8, "I8", 1, false},
    {DType::I16, "I16", 2, false},
    {DType::I32, "I32", 4, false},
    {DType::I64, "I64", 8, false},
    {DType::U8, "U8", 1, false},
    {DType::BOOL, "BOOL", 1, false},
}};

constexpr bool tableMatchesEnum() {
  for (size_t i = 0; i < kDTypes.size(); ++i) {
    if (static_cast<size_t>(kDTypes[i].dtype) != i) {
      return false;
    }
  }
  return true;
}
static_assert(tableMatchesEnum(), "kDTypes must list every DType in enum order");

const DTypeInfo &dtypeInfo(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }

} // namespace

size_t dtypeSize(DType dtype) { return dtypeInfo(dtype).size; }

std::string_view dtypeName(DType dtype) { return dtypeInfo(dtype).name; }

std::optional<DType> parseDType(std::string_view name) {
  for (const DTypeInfo &info : kDTypes) {
    if (info.name == name) {
      return info.dtype;
    }
  }
  return std::nullopt;
}

bool isFloatingPoint(DType dtype) { return dtypeInfo(dtype).floatingPoint; }

} // namespace glm

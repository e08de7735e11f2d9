// Element types of checkpoint tensors, named as safetensors names them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace glm {

enum class DType : uint8_t { BF16, F16, F32, F8_E4M3, I8, I16, I32, I64, U8, BOOL };

/// Bytes per element.
size_t dtypeSize(DType dtype);
/// The safetensors spelling: "BF16", "F8_E4M3", ...
std::string_view dtypeName(DType dtype);
/// Inverse of dtypeName; nullopt for a name this build does not know.
std::optional<DType> parseDType(std::string_view name);
bool isFloatingPoint(DType dtype);

} // namespace glm

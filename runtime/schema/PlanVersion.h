// The plan format's version: the compiler writes it, the runtime refuses any other. Bump it with
// every change to plan.fbs or to what its fields mean.
#pragma once

#include <cstdint>

namespace glm::plan {

inline constexpr uint32_t kPlanFormatVersion = 3;

} // namespace glm::plan

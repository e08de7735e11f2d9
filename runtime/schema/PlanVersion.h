// The plan format's version and the limits its fields are held to: the compiler writes plans
// within them, the runtime refuses any other. Bump the version with every change to plan.fbs or
// to what its fields mean.
#pragma once

#include <cstdint>

namespace glm::plan {

inline constexpr uint32_t kPlanFormatVersion = 8;

/// The largest argument struct of a KernelLaunch: the 4 KB every CUDA version takes by value
/// (newer drivers allow more, which no kernel here needs).
inline constexpr uint32_t kMaxLaunchArgsBytes = 4096;

} // namespace glm::plan

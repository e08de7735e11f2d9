// What an op's adapter decides for a step on a GPU target: the kernel instances it launches, their
// grids, and their argument structs, with every field either a constant or an address the engine
// fills in at load. The compiler writes this into the plan (plan-select-kernels), so the engine
// launches by number and decides nothing: it adds arena base addresses to the bindings.
//
// An argument struct is the op's <op>_gpu.h struct, filled through ArgPack, which records each
// field's name and offset as it is written; the plan carries the fields, the IR shows them.
#pragma once

#include "kernels/common/Launch.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace glm::kernels {

/// What an address field points at. The engine writes the device address of the step's operand,
/// result, weight or state `index` (a state's slice: its slots, or the whole page pool), or of the
/// plan's workspace arena, plus `add` bytes. RankTimes is not an address: the int32 field is set to
/// the rank times `add` (the first global expert a rank holds).
enum class ArgSource : uint8_t { Operand, Result, Weight, State, Workspace, RankTimes };

/// "operand", "result", "weight", "state", "workspace", "rank_times": the plan dialect's spelling.
const char *argSourceName(ArgSource source);
bool parseArgSource(std::string_view name, ArgSource &source);

struct ArgConstant {
  std::string name;
  uint32_t offset = 0;
  uint8_t width = 0; // bytes: 1, 4 or 8
  bool isFloat = false;
  int64_t intValue = 0;
  double floatValue = 0;
};

struct ArgBinding {
  std::string name;
  uint32_t offset = 0;
  ArgSource source = ArgSource::Operand;
  uint32_t index = 0;
  uint64_t add = 0;
};

/// One kernel launch of a step.
struct GpuLaunch {
  std::string header;   // the source defining the kernel: "kernels/rms_norm/rms_norm.cuh"
  std::string instance; // its NVRTC name expression: "glm::kernels::rmsNormKernel<float, float>"
  LaunchDims dims;
  uint32_t argsSize = 0;
  std::vector<ArgConstant> constants;
  std::vector<ArgBinding> bindings;
  /// The argument struct as the adapter left it (bindings zero): what the constants must
  /// reassemble to, checked when the compiler records them.
  std::vector<uint8_t> bytes;
};

/// All the launches of a step, in order, and the workspace they need (bytes of the plan's
/// workspace arena, which every step shares: steps run one after another on one stream).
struct GpuStep {
  std::vector<GpuLaunch> launches;
  uint64_t workspaceBytes = 0;
};

/// Fills an argument struct field by field, recording each: constants through set(), addresses
/// through bind(). Fields never written stay zero (a null pointer, a zero count).
template <typename Args> class ArgPack {
  static_assert(std::is_trivially_copyable_v<Args>, "argument structs are passed by value");

public:
  Args args{};

  template <typename T, typename V> void set(T &field, V value, const char *name) {
    static_assert(std::is_arithmetic_v<T> && !std::is_pointer_v<T>, "set() takes numbers");
    field = static_cast<T>(value);
    ArgConstant c;
    c.name = name;
    c.offset = offsetOf(&field);
    c.width = static_cast<uint8_t>(sizeof(T));
    c.isFloat = std::is_floating_point_v<T>;
    if (c.isFloat) {
      c.floatValue = static_cast<double>(field);
    } else {
      c.intValue = static_cast<int64_t>(field);
    }
    constants_.push_back(std::move(c));
  }

  template <typename P>
  void bind(P &field, ArgSource source, size_t index, const char *name, uint64_t add = 0) {
    static_assert(std::is_pointer_v<P>, "bind() takes address fields");
    field = nullptr;
    bindings_.push_back({name, offsetOf(&field), source, static_cast<uint32_t>(index), add});
  }

  /// An int32 field that holds the rank times `perRank`.
  void rankTimes(int32_t &field, int64_t perRank, const char *name) {
    field = 0;
    bindings_.push_back(
        {name, offsetOf(&field), ArgSource::RankTimes, 0, static_cast<uint64_t>(perRank)});
  }

  /// The launch of `instance` from `header` with these arguments.
  GpuLaunch launch(std::string header, std::string instance, LaunchDims dims) const {
    GpuLaunch l;
    l.header = std::move(header);
    l.instance = std::move(instance);
    l.dims = dims;
    l.argsSize = sizeof(Args);
    l.constants = constants_;
    l.bindings = bindings_;
    l.bytes.resize(sizeof(Args));
    std::memcpy(l.bytes.data(), &args, sizeof(Args));
    return l;
  }

private:
  uint32_t offsetOf(const void *field) const {
    return static_cast<uint32_t>(static_cast<const char *>(field) -
                                 reinterpret_cast<const char *>(&args));
  }

  std::vector<ArgConstant> constants_;
  std::vector<ArgBinding> bindings_;
};

/// The bytes a launch's constants and bindings describe (bindings zero): what the engine starts
/// from before it writes the addresses. Empty when a field overruns the struct.
std::vector<uint8_t> assembleArgs(uint32_t size, const std::vector<ArgConstant> &constants);

} // namespace glm::kernels

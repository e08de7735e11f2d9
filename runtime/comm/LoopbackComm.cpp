// Loopback collectives: each rank publishes a pointer, waits for the others, reads theirs.
#include "runtime/comm/LoopbackComm.h"

#include <cstring>

namespace glm::runtime {

class LoopbackComm : public Comm {
public:
  LoopbackComm(LoopbackGroup &group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return group_.world_; }

  Status allReduce(float *buffer, size_t count) override {
    publish(buffer);
    // Rank 0 sums in rank order into the shared scratch; everyone copies it out.
    if (rank_ == 0) {
      const float *first = input(0);
      group_.scratch_.assign(first, first + count);
      for (int r = 1; r < group_.world_; ++r) {
        const float *in = input(static_cast<size_t>(r));
        for (size_t i = 0; i < count; ++i) {
          group_.scratch_[i] += in[i];
        }
      }
    }
    group_.barrier_.arrive_and_wait();
    std::memcpy(buffer, group_.scratch_.data(), count * sizeof(float));
    group_.barrier_.arrive_and_wait(); // nobody reuses the scratch before all have read it
    return Status::success();
  }

  Status allGather(const float *piece, float *out, size_t rows, size_t width, int axis) override {
    if (axis != 0 && axis != 1) {
      return invalidArgument("loopback all-gather along axis ", axis, " of a 2-D tensor");
    }
    publish(piece);
    const size_t world = static_cast<size_t>(group_.world_);
    for (size_t r = 0; r < world; ++r) {
      const float *in = input(r);
      if (axis == 0) {
        std::memcpy(out + r * rows * width, in, rows * width * sizeof(float));
        continue;
      }
      for (size_t row = 0; row < rows; ++row) {
        std::memcpy(out + row * world * width + r * width, in + row * width, width * sizeof(float));
      }
    }
    group_.barrier_.arrive_and_wait(); // inputs stay valid until everyone has copied them
    return Status::success();
  }

  Status broadcast(void *buffer, size_t bytes) override {
    publish(buffer);
    if (rank_ != 0) {
      std::memcpy(buffer, group_.inputs_[0], bytes);
    }
    group_.barrier_.arrive_and_wait(); // rank 0's buffer stays valid until everyone has copied it
    return Status::success();
  }

private:
  const float *input(size_t r) const { return static_cast<const float *>(group_.inputs_[r]); }
  void publish(const void *data) {
    group_.inputs_[static_cast<size_t>(rank_)] = data;
    group_.barrier_.arrive_and_wait();
  }

  LoopbackGroup &group_;
  int rank_;
};

LoopbackGroup::LoopbackGroup(int world)
    : world_(world), barrier_(world), inputs_(static_cast<size_t>(world), nullptr) {}

std::unique_ptr<Comm> LoopbackGroup::comm(int rank) {
  return std::make_unique<LoopbackComm>(*this, rank);
}

} // namespace glm::runtime

// Internal side of the forward profiler (latentllm/model.hpp ForwardProfile): a scoped timer that
// adds its wall-clock seconds to one field when profiling is on, and costs one branch when off.
#pragma once

#include <chrono>

#include "latentllm/model.hpp"

namespace latentllm::model::detail {

// The accumulating profile; only touched from outside the thread pool's parallel regions.
ForwardProfile& profile_sink();
// True when profiling is on and the caller is not inside a parallel region of the thread pool.
bool profile_active();

// Adds the seconds of its lifetime to `seconds` and `flops` to `flop_counter` (when not null).
class ProfileScope {
 public:
  ProfileScope(double ForwardProfile::*seconds, double ForwardProfile::*flop_counter = nullptr, double flops = 0)
      : active_(profile_active()), seconds_(seconds), flop_counter_(flop_counter), flops_(flops) {
    if (active_) t0_ = std::chrono::steady_clock::now();
  }
  ~ProfileScope() {
    if (!active_) return;
    auto& p = profile_sink();
    p.*seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    if (flop_counter_ != nullptr) p.*flop_counter_ += flops_;
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  bool active_;
  double ForwardProfile::*seconds_;
  double ForwardProfile::*flop_counter_;
  double flops_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace latentllm::model::detail

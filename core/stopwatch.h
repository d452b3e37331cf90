// Stopwatch: the wall-clock seconds since it was made, on the steady clock (step times, ETAs).
#pragma once

#include <chrono>

namespace kelvin {

class Stopwatch {
 public:
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace kelvin

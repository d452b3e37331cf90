// Benchmark main with ratios: alongside Google Benchmark's console output, pairs of benchmarks
// named "<group>/kelvin/<case>" and "<group>/<baseline>/<case>" are matched and one line per case
// prints both rates (the "rate" user counter when set, else bytes/s, else items/s) and
// kelvin / baseline. Use KELVIN_BENCHMARK_MAIN() instead of BENCHMARK_MAIN().
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace kelvin::bench {

class RatioReporter : public ::benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      const std::string name = run.benchmark_name();
      const size_t first = name.find('/');
      const size_t second = first == std::string::npos ? first : name.find('/', first + 1);
      if (second == std::string::npos) continue;
      const std::string group = name.substr(0, first);
      const std::string impl = name.substr(first + 1, second - first - 1);
      const std::string key = group + "/" + name.substr(second + 1);
      rates_[key][impl] = RateOf(run, &units_[key]);
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nRatios (kelvin / baseline, same run):\n");
    for (const auto& [key, impls] : rates_) {
      const auto ours = impls.find("kelvin");
      if (ours == impls.end()) continue;
      for (const auto& [impl, rate] : impls) {
        if (impl == "kelvin") continue;
        std::printf("  %-48s kelvin %10.2f %s  %-10s %10.2f %s  ratio %.3f\n", key.c_str(),
                    ours->second, units_[key].c_str(), impl.c_str(), rate, units_[key].c_str(),
                    rate > 0 ? ours->second / rate : 0.0);
      }
    }
    std::fflush(stdout);
  }

 private:
  static double RateOf(const Run& run, std::string* unit) {
    if (auto it = run.counters.find("GFLOP/s"); it != run.counters.end()) {
      *unit = "GFLOP/s";
      return it->second.value;
    }
    if (auto it = run.counters.find("bytes_per_second"); it != run.counters.end()) {
      *unit = "GB/s";
      return it->second.value / 1e9;
    }
    if (auto it = run.counters.find("items_per_second"); it != run.counters.end()) {
      *unit = "items/s";
      return it->second.value;
    }
    *unit = "1/s";
    return run.iterations / run.real_accumulated_time;
  }

  std::map<std::string, std::map<std::string, double>> rates_;
  std::map<std::string, std::string> units_;
};

}  // namespace kelvin::bench

#define KELVIN_BENCHMARK_MAIN()                     \
  int main(int argc, char** argv) {                 \
    ::benchmark::Initialize(&argc, argv);           \
    ::kelvin::bench::RatioReporter reporter;        \
    ::benchmark::RunSpecifiedBenchmarks(&reporter); \
    ::benchmark::Shutdown();                        \
    return 0;                                       \
  }

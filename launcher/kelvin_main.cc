// The `kelvin` command: `kelvin train JOB.textproto [--set field.path=value ...]`.
// Every user error ends here as one message on stderr and exit code 1 (2 for usage errors).
#include <cstdio>
#include <string>
#include <vector>

#include "core/logging.h"
#include "launcher/job_config.h"
#include "launcher/trainer.h"

namespace {

constexpr const char* kUsage =
    "usage: kelvin train JOB.textproto [--set field.path=value ...]\n"
    "  e.g. kelvin train configs/passkey_tiny_cpu.textproto --set optimizer.lr=1e-3\n";

int Train(const std::string& path, const std::vector<std::string>& overrides) {
  absl::StatusOr<kelvin::config::JobConfig> job = kelvin::launcher::LoadJobConfig(path, overrides);
  if (!job.ok()) {
    std::fprintf(stderr, "kelvin: %s\n", std::string(job.status().message()).c_str());
    return 1;
  }
  KLOG_RANK0(INFO) << "resolved job config:\n" << kelvin::launcher::FormatResolvedConfig(*job);
  absl::StatusOr<std::unique_ptr<kelvin::launcher::Trainer>> trainer =
      kelvin::launcher::Trainer::Create(*job);
  absl::Status status = trainer.ok() ? (*trainer)->Run() : trainer.status();
  if (!status.ok()) {
    std::fprintf(stderr, "kelvin: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() >= 2 && args[0] == "train") {
    std::vector<std::string> overrides;
    for (size_t i = 2; i < args.size(); ++i) {
      if (args[i] == "--set" && i + 1 < args.size()) {
        overrides.push_back(args[++i]);
      } else if (args[i].rfind("--set=", 0) == 0) {
        overrides.push_back(args[i].substr(6));
      } else {
        std::fprintf(stderr, "kelvin: unexpected argument \"%s\"\n%s", args[i].c_str(), kUsage);
        return 2;
      }
    }
    return Train(args[1], overrides);
  }
  std::fprintf(stderr, "%s", kUsage);
  return 2;
}

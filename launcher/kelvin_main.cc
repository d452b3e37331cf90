// The `kelvin` command: `kelvin train JOB.textproto [--set field.path=value ...]`, one process or
// under mpirun/srun (MPI is initialised when the launcher's environment names more than one
// process). Every user error ends here as one message on stderr and exit code 1 (2 for usage
// errors); with several processes a rank that fails aborts the whole job, so none waits forever.
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/logging.h"
#include "launcher/job_config.h"
#include "launcher/trainer.h"
#include "parallel/rank_discovery.h"

namespace {

constexpr const char* kUsage =
    "usage: kelvin train JOB.textproto [--set field.path=value ...]\n"
    "  e.g. kelvin train configs/passkey_tiny_cpu.textproto --set optimizer.lr=1e-3\n";

// 1 after printing `status` (every rank prints its own failure: ranks can fail differently).
int Fail(const absl::Status& status) {
  std::fprintf(stderr, "kelvin: %s\n", std::string(status.message()).c_str());
  return 1;
}

int Train(const std::string& path, const std::vector<std::string>& overrides) {
  absl::StatusOr<kelvin::config::JobConfig> job = kelvin::launcher::LoadJobConfig(path, overrides);
  if (!job.ok()) return Fail(job.status());
  KLOG_RANK0(INFO) << "resolved job config:\n" << kelvin::launcher::FormatResolvedConfig(*job);
  absl::StatusOr<std::unique_ptr<kelvin::launcher::Trainer>> trainer =
      kelvin::launcher::Trainer::Create(*job);
  absl::Status status = trainer.ok() ? (*trainer)->Run() : trainer.status();
  return status.ok() ? 0 : Fail(status);
}

// Runs `train` with MPI around it when the launcher started several processes.
int TrainUnderLauncher(const std::string& path, const std::vector<std::string>& overrides) {
  const absl::StatusOr<kelvin::parallel::RankInfo> launched =
      kelvin::parallel::RankInfoFromEnvironment(kelvin::parallel::ProcessEnvironment());
  if (!launched.ok()) return Fail(launched.status());
  if (launched->world_size == 1) return Train(path, overrides);
  kelvin::SetLogRank(launched->rank);  // the progress lines come from rank 0 only
  MPI_Init(nullptr, nullptr);
  const int result = Train(path, overrides);
  if (result != 0) MPI_Abort(MPI_COMM_WORLD, result);
  MPI_Finalize();
  return result;
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
    return TrainUnderLauncher(args[1], overrides);
  }
  std::fprintf(stderr, "%s", kUsage);
  return 2;
}

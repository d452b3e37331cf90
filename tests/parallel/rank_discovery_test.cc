// Rank discovery from a fake launch environment: which launcher's variables win, and a clear error
// for every inconsistent set. (MPI's own numbers are checked under mpirun in mpi/.)
#include "parallel/rank_discovery.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/device.h"

namespace kelvin::parallel {
namespace {

using ::testing::HasSubstr;

EnvLookup FakeEnvironment(std::map<std::string, std::string> variables) {
  return [variables = std::move(variables)](std::string_view name) -> std::optional<std::string> {
    const auto it = variables.find(std::string(name));
    if (it == variables.end()) return std::nullopt;
    return it->second;
  };
}

RankInfo Parse(std::map<std::string, std::string> variables) {
  absl::StatusOr<RankInfo> info = RankInfoFromEnvironment(FakeEnvironment(std::move(variables)));
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? *info : RankInfo{-1, -1, -1, "error"};
}

std::string ErrorOf(std::map<std::string, std::string> variables) {
  absl::StatusOr<RankInfo> info = RankInfoFromEnvironment(FakeEnvironment(std::move(variables)));
  EXPECT_FALSE(info.ok()) << "parsed as rank " << info->rank << " of " << info->world_size;
  return info.ok() ? "" : std::string(info.status().message());
}

TEST(RankDiscoveryTest, NoLauncherVariablesIsOneProcess) {
  const RankInfo info = Parse({});
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_THAT(info.source, HasSubstr("single process"));
}

TEST(RankDiscoveryTest, ReadsMpirunVariables) {
  const RankInfo info = Parse({{"OMPI_COMM_WORLD_RANK", "5"},
                               {"OMPI_COMM_WORLD_SIZE", "8"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                               {"PMIX_RANK", "5"}});
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_THAT(info.source, HasSubstr("OMPI_COMM_WORLD"));
}

TEST(RankDiscoveryTest, MpirunInsideSlurmIgnoresSlurmProcid) {
  // Under mpirun in an allocation every rank sees SLURM_PROCID=0 and SLURM_LOCALID=0.
  const RankInfo info = Parse({{"OMPI_COMM_WORLD_RANK", "3"},
                               {"OMPI_COMM_WORLD_SIZE", "4"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                               {"PMIX_RANK", "3"},
                               {"SLURM_PROCID", "0"},
                               {"SLURM_NTASKS", "1"},
                               {"SLURM_LOCALID", "0"}});
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.local_rank, 3);
}

TEST(RankDiscoveryTest, ReadsSrunVariables) {
  const RankInfo info = Parse(
      {{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "2"}, {"PMIX_RANK", "6"}});
  EXPECT_EQ(info.rank, 6);
  EXPECT_EQ(info.world_size, 16);
  EXPECT_EQ(info.local_rank, 2);
  EXPECT_THAT(info.source, HasSubstr("SLURM"));
}

TEST(RankDiscoveryTest, ReadsTorchrunStyleVariables) {
  const RankInfo info = Parse({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}});
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(info.local_rank, 1);
}

TEST(RankDiscoveryTest, SlurmWinsOverTorchrunStyle) {
  const RankInfo info = Parse({{"SLURM_PROCID", "2"},
                               {"SLURM_NTASKS", "4"},
                               {"SLURM_LOCALID", "0"},
                               {"RANK", "0"},
                               {"WORLD_SIZE", "1"},
                               {"LOCAL_RANK", "0"}});
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 4);
}

TEST(RankDiscoveryTest, RejectsValuesThatAreNotCounts) {
  EXPECT_THAT(ErrorOf({{"OMPI_COMM_WORLD_RANK", "two"},
                       {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}),
              HasSubstr("OMPI_COMM_WORLD_RANK=\"two\" is not a non-negative integer"));
  EXPECT_THAT(ErrorOf({{"SLURM_PROCID", "-1"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}}),
              HasSubstr("SLURM_PROCID=\"-1\" is not a non-negative integer"));
  EXPECT_THAT(ErrorOf({{"RANK", "0"}, {"WORLD_SIZE", "4x"}, {"LOCAL_RANK", "0"}}),
              HasSubstr("WORLD_SIZE=\"4x\""));
  EXPECT_THAT(ErrorOf({{"PMIX_RANK", ""}}), HasSubstr("PMIX_RANK=\"\""));
}

TEST(RankDiscoveryTest, RejectsARankWithoutItsSizeOrLocalRank) {
  EXPECT_THAT(ErrorOf({{"SLURM_PROCID", "1"}, {"SLURM_LOCALID", "1"}}),
              HasSubstr("SLURM_PROCID=1 is set but SLURM_NTASKS is not"));
  EXPECT_THAT(ErrorOf({{"RANK", "1"}, {"WORLD_SIZE", "2"}}),
              HasSubstr("RANK=1 is set but LOCAL_RANK is not"));
}

TEST(RankDiscoveryTest, RejectsRanksOutsideTheWorld) {
  EXPECT_THAT(ErrorOf({{"OMPI_COMM_WORLD_RANK", "4"},
                       {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}),
              HasSubstr("inconsistent OMPI_COMM_WORLD_RANK=4, OMPI_COMM_WORLD_SIZE=4"));
  EXPECT_THAT(ErrorOf({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}}),
              HasSubstr("LOCAL_RANK=2"));
  EXPECT_THAT(ErrorOf({{"RANK", "0"}, {"WORLD_SIZE", "0"}, {"LOCAL_RANK", "0"}}),
              HasSubstr("need size >= 1"));
}

TEST(RankDiscoveryTest, RejectsPmixRankDisagreeingWithTheLauncher) {
  EXPECT_THAT(ErrorOf({{"SLURM_PROCID", "1"},
                       {"SLURM_NTASKS", "2"},
                       {"SLURM_LOCALID", "1"},
                       {"PMIX_RANK", "0"}}),
              HasSubstr("PMIX_RANK=0 disagrees with rank 1 from SLURM_*"));
}

TEST(RankDiscoveryTest, RejectsPmixRankWithoutAWorldSize) {
  EXPECT_THAT(ErrorOf({{"PMIX_RANK", "2"}}), HasSubstr("PMIX_RANK=2 is set but no world size is"));
}

TEST(RankDiscoveryTest, LaterFamiliesAreNotReadOnceOneApplies) {
  // mpirun inside `sbatch -N 1` without --ntasks: SLURM_PROCID=0, no SLURM_NTASKS.
  const RankInfo info = Parse({{"OMPI_COMM_WORLD_RANK", "1"},
                               {"OMPI_COMM_WORLD_SIZE", "2"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                               {"SLURM_PROCID", "0"},
                               {"SLURM_LOCALID", "0"},
                               {"RANK", "x"}});
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.world_size, 2);
}

TEST(RankDiscoveryTest, ABatchScriptWithoutNtasksIsOneProcess) {
  const RankInfo info = Parse({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}});
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_THAT(info.source, HasSubstr("single process"));
}

TEST(RankDiscoveryTest, WithoutMpiReadsTheProcessEnvironment) {
  // This program runs without mpirun, so MPI is not initialised.
  const absl::StatusOr<RankInfo> discovered = DiscoverRank();
  const absl::StatusOr<RankInfo> from_environment = RankInfoFromEnvironment(ProcessEnvironment());
  ASSERT_EQ(discovered.ok(), from_environment.ok());
  if (discovered.ok()) {
    EXPECT_EQ(discovered->rank, from_environment->rank);
    EXPECT_EQ(discovered->world_size, from_environment->world_size);
    EXPECT_EQ(discovered->source, from_environment->source);
  }
}

TEST(RankDiscoveryTest, DeviceForLocalRankNeedsThatManyDevices) {
  const int devices = CudaDeviceCount();
  const absl::StatusOr<int> beyond = CudaDeviceForLocalRank(devices);
  ASSERT_FALSE(beyond.ok());
  EXPECT_THAT(beyond.status().message(),
              HasSubstr(absl::StrCat("local rank ", devices, " needs CUDA device ", devices,
                                     ", but this node has ", devices)));
  if (devices > 0) {
    EXPECT_EQ(CudaDeviceForLocalRank(devices - 1).value(), devices - 1);
  }
}

}  // namespace
}  // namespace kelvin::parallel

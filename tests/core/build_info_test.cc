// Kelvin's version names the release and the source commit (or "unknown" outside git), and the
// library versions name OpenBLAS and the CUDA libraries (or say there are none).
#include "core/build_info.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kelvin {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(BuildInfo, VersionNamesTheReleaseAndTheCommit) {
  EXPECT_THAT(KelvinVersion(),
              MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+ \\(git ([0-9a-f]+(-dirty)?|unknown)\\)"));
}

// (No "cuda" in the name: the CPU test entries filter such names out.)
TEST(BuildInfo, LibraryVersionsNameOpenBlasAndTheGpuLibraries) {
  const std::string versions = LibraryVersions();
  EXPECT_THAT(versions, HasSubstr("OpenBLAS "));
  EXPECT_THAT(versions, AnyOf(HasSubstr("built without CUDA"),
                              MatchesRegex(".*CUDA runtime [0-9]+\\.[0-9]+, driver [^,]+, cuBLASLt "
                                           "[0-9]+, NCCL [0-9]+\\.[0-9]+\\.[0-9]+")));
}

}  // namespace
}  // namespace kelvin

// Kelvin's version and commit (generated/kelvin_git_commit.h, written at build time) and the
// versions of the libraries it runs on.
#include "core/build_info.h"

#include <cblas.h>

#include "absl/strings/str_cat.h"
#include "kelvin_git_commit.h"

namespace kelvin {

std::string KelvinVersion() {
  return absl::StrCat(KELVIN_VERSION, " (git ", KELVIN_GIT_COMMIT, ")");
}

std::string LibraryVersions() {
  return absl::StrCat(openblas_get_config(), "; ", CudaLibraryVersions());
}

}  // namespace kelvin

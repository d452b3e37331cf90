// Files the tests read: the demo job's config (configs/passkey_tiny_cpu.textproto, located from
// the fixtures directory every test program is compiled with) and whole files as bytes.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace kelvin::testing {

inline std::string DemoJobPath() {
  return (std::filesystem::path(KELVIN_FIXTURES_DIR).parent_path().parent_path() / "configs" /
          "passkey_tiny_cpu.textproto")
      .string();
}

// The bytes of `path` ("" when it cannot be read).
inline std::string FileBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace kelvin::testing

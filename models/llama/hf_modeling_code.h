// The SSA modeling code for Hugging Face transformers (models/llama/hf/*.py), embedded in the
// binary at build time (models/CMakeLists.txt): the files an SSA export ships beside its weights.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kelvin::models {

// (file name, contents): configuration_ssa_llama.py and modeling_ssa_llama.py.
std::vector<std::pair<std::string, std::string>> SsaHfModelingFiles();

}  // namespace kelvin::models

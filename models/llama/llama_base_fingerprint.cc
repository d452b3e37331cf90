// The frozen base's fingerprint over a Hugging Face checkpoint's stored bytes or a random draw's
// streams.
#include "models/llama/llama_base_fingerprint.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "core/io/crc32c.h"
#include "models/llama/llama_peft.h"
#include "models/llama/llama_pipeline_stage.h"

namespace kelvin::models {
namespace {

// FNV-1a of a parameter name: a seed that does not depend on the standard library.
uint32_t NameHash(const std::string& name) {
  uint32_t hash = 2166136261u;
  for (const char c : name) hash = (hash ^ static_cast<uint8_t>(c)) * 16777619u;
  return hash;
}

// The CRC so far followed by a tensor's name, dtype and shape ("name\0F32\0[4,8]\0").
uint32_t ChainHeader(uint32_t crc, const std::string& name, std::string_view dtype,
                     const Shape& shape) {
  std::string header = name;
  header += '\0';
  header += dtype;
  header += '\0';
  header += '[';
  header += absl::StrJoin(shape, ",");
  header += ']';
  header += '\0';
  return io::Crc32c(header, crc);
}

// The whole model's parameters (every stage's, in declaration order) other than LoRA's.
std::vector<LlamaParameterSpec> BaseParameters(const LlamaConfig& config) {
  std::vector<LlamaParameterSpec> specs =
      StageParameterSpecs(config, StageLayoutOf(config, 0, 1, 1));
  std::erase_if(specs, [](const LlamaParameterSpec& s) { return IsLoraParameter(s.name); });
  return specs;
}

}  // namespace

std::mt19937_64 ParameterStream(const std::string& name, uint64_t seed) {
  std::seed_seq seeds{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                      NameHash(name)};
  return std::mt19937_64(seeds);
}

LlamaBase HfBaseOf(const io::HfCheckpoint& checkpoint, const LlamaConfig& config) {
  uint32_t crc = 0;
  for (const LlamaParameterSpec& spec : BaseParameters(config)) {
    const io::SafetensorsEntry* entry = checkpoint.Find(spec.name);
    if (entry == nullptr) continue;  // SSA tensors a pretrained Llama lacks (initialised alike)
    const absl::StatusOr<std::string_view> bytes = checkpoint.Bytes(spec.name);
    KELVIN_CHECK(bytes.ok()) << bytes.status();  // Find found it
    crc = io::Crc32c(*bytes, ChainHeader(crc, spec.name, entry->dtype_name, entry->shape));
  }
  return {checkpoint.path(), crc};
}

LlamaBase RandomBaseOf(const LlamaConfig& config, uint64_t seed) {
  constexpr int64_t kHead = 64;  // values of each stream
  uint32_t crc = 0;
  for (const LlamaParameterSpec& spec : BaseParameters(config)) {
    if (spec.group == ParamGroup::kNoDecay) continue;  // ones, whatever the seed
    std::mt19937_64 rng = ParameterStream(spec.name, seed);
    std::normal_distribution<double> normal(0.0, kInitStddev);
    std::vector<double> head(
        static_cast<size_t>(std::min(kHead, NumElements(spec.full_shape))));  // [<= kHead]
    for (double& value : head) value = normal(rng);
    crc = io::Crc32c(
        std::string_view(reinterpret_cast<const char*>(head.data()), head.size() * sizeof(double)),
        ChainHeader(crc, spec.name, "F64", spec.full_shape));
  }
  return {absl::StrCat("random weights from seed ", seed), crc};
}

}  // namespace kelvin::models

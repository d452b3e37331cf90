// The job's rope_scaling message made into ops::RopeConfig, with the problems of its shape.
#include "training/job/rope_scaling_job.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kelvin::training {
namespace {

constexpr char kPath[] = "model.architecture.rope_scaling";

// The type named by rope_type, or nullopt (with the problem added).
std::optional<ops::RopeType> TypeOf(const std::string& name, std::vector<std::string>& problems) {
  for (const ops::RopeType type :
       {ops::RopeType::kDefault, ops::RopeType::kLinear, ops::RopeType::kYarn,
        ops::RopeType::kLongrope, ops::RopeType::kLlama3, ops::RopeType::kDynamic}) {
    if (name == ops::RopeTypeName(type)) return type;
  }
  problems.push_back(absl::StrCat(
      kPath, ".rope_type=\"", name,
      "\": must be one of \"default\", \"linear\", \"yarn\", \"longrope\", \"llama3\", "
      "\"dynamic\""));
  return std::nullopt;
}

}  // namespace

ops::RopeConfig RopeConfigFromJob(const config::RopeScaling& s, double theta,
                                  std::vector<std::string>& problems) {
  ops::RopeConfig rope;
  rope.theta = theta;
  const std::optional<ops::RopeType> type = TypeOf(s.rope_type(), problems);
  if (!type.has_value()) return rope;
  rope.type = *type;
  const bool yarn = rope.type == ops::RopeType::kYarn,
             longrope = rope.type == ops::RopeType::kLongrope,
             llama3 = rope.type == ops::RopeType::kLlama3,
             default_rope = rope.type == ops::RopeType::kDefault;
  // Each field: set in the job, used by this type, required by it.
  struct Field {
    const char* name;
    bool set, used, required;
  };
  const Field fields[] = {
      {"factor", s.has_factor(), !default_rope, !default_rope},
      {"low_freq_factor", s.has_low_freq_factor(), llama3, llama3},
      {"high_freq_factor", s.has_high_freq_factor(), llama3, llama3},
      {"original_max_position_embeddings", s.has_original_max_position_embeddings(),
       yarn || longrope || llama3, yarn || longrope || llama3},
      {"attention_factor", s.has_attention_factor(), yarn || longrope, false},
      {"beta_fast", s.has_beta_fast(), yarn, false},
      {"beta_slow", s.has_beta_slow(), yarn, false},
      {"mscale", s.has_mscale(), yarn, false},
      {"mscale_all_dim", s.has_mscale_all_dim(), yarn, false},
      {"truncate", s.has_truncate(), yarn, false},
      {"short_factor", s.short_factor_size() > 0, longrope, longrope},
      {"long_factor", s.long_factor_size() > 0, longrope, longrope},
  };
  std::vector<std::string> unused, missing;
  for (const Field& f : fields) {
    if (f.set && !f.used) unused.push_back(f.name);
    if (f.required && !f.set) missing.push_back(f.name);
  }
  const std::string type_name = ops::RopeTypeName(rope.type);
  if (!unused.empty()) {
    problems.push_back(absl::StrCat(kPath, ": ", absl::StrJoin(unused, ", "),
                                    " not used by rope_type \"", type_name, "\": remove ",
                                    unused.size() == 1 ? "it" : "them"));
  }
  if (!missing.empty()) {
    problems.push_back(absl::StrCat(kPath, ": rope_type \"", type_name, "\" needs ",
                                    absl::StrJoin(missing, ", "),
                                    llama3 ? " (Llama-3.1: factor 8, low_freq_factor 1, "
                                             "high_freq_factor 4, original 8192)"
                                           : ""));
  }
  if (s.has_factor()) rope.factor = s.factor();
  if (s.has_low_freq_factor()) rope.low_freq_factor = s.low_freq_factor();
  if (s.has_high_freq_factor()) rope.high_freq_factor = s.high_freq_factor();
  if (s.has_original_max_position_embeddings()) {
    rope.original_max_position = s.original_max_position_embeddings();
  }
  if (s.has_attention_factor()) rope.attention_factor = s.attention_factor();
  if (s.has_beta_fast()) rope.beta_fast = s.beta_fast();
  if (s.has_beta_slow()) rope.beta_slow = s.beta_slow();
  if (s.has_mscale()) rope.mscale = s.mscale();
  if (s.has_mscale_all_dim()) rope.mscale_all_dim = s.mscale_all_dim();
  if (s.has_truncate()) rope.truncate = s.truncate();
  rope.short_factor.assign(s.short_factor().begin(), s.short_factor().end());
  rope.long_factor.assign(s.long_factor().begin(), s.long_factor().end());
  return rope;
}

}  // namespace kelvin::training

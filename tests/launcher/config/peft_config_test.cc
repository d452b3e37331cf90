// model.peft and model.lora in a job: valid sets resolve into the architecture (trainable sets,
// LoRA rank, scale and targets), and each mistake is one message naming the field and the remedy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "launcher/config/job_config.h"
#include "training/job/job_setup.h"

namespace kelvin::launcher {
namespace {

using ::testing::HasSubstr;

// The tiny preset's job with `model_fields` inside its model section.
absl::StatusOr<config::JobConfig> JobWith(const std::string& model_fields,
                                          const std::string& training_fields = "") {
  return ParseJobConfig(absl::StrCat(R"pb(
                                       name: "peft"
                                       model { preset: "tiny")pb",
                                     model_fields, R"pb(}
                                                        data { passkey {} }
    optimizer { lr: 1e-3 }
    training { steps: 10 global_batch_size: 4 seq_length: 128 )pb",
                                     training_fields, " }"),
                        "peft.textproto");
}

std::string ErrorOf(const std::string& model_fields, const std::string& training_fields = "") {
  const absl::StatusOr<config::JobConfig> job = JobWith(model_fields, training_fields);
  return job.ok() ? "" : std::string(job.status().message());
}

TEST(PeftConfig, LoraWithSsaResolvesIntoTheArchitecture) {
  const absl::StatusOr<config::JobConfig> job = JobWith(
      R"pb(ssa { enabled: true }
           peft { adapters: true ssa: true }
           lora {
             rank: 4
             alpha: 8
             dropout: 0.05
             targets: [ "v_proj", "q" ]
           })pb");
  ASSERT_TRUE(job.ok()) << job.status();
  const absl::StatusOr<models::LlamaConfig> arch = training::ResolveModelArchitecture(job->model());
  ASSERT_TRUE(arch.ok()) << arch.status();
  ASSERT_TRUE(arch->lora.has_value());
  EXPECT_EQ(arch->lora->rank, 4);
  EXPECT_DOUBLE_EQ(arch->lora->Scale(), 2.0);
  EXPECT_EQ(arch->lora->dropout, 0.05);
  EXPECT_EQ(arch->lora->targets,
            (std::vector<models::LoraTarget>{models::LoraTarget::kQ, models::LoraTarget::kV}));
  ASSERT_TRUE(arch->trainable.has_value());
  EXPECT_TRUE(arch->trainable->adapters && arch->trainable->ssa);
  EXPECT_FALSE(arch->trainable->norms || arch->trainable->embeddings);
  // Without model.peft nothing is frozen; rsLoRA scales by alpha / sqrt(rank); alpha defaults to
  // the rank.
  const absl::StatusOr<config::JobConfig> plain = JobWith("");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(training::ResolveModelArchitecture(plain->model())->trainable.has_value());
  const absl::StatusOr<config::JobConfig> rs =
      JobWith(R"pb(peft { adapters: true }
                   lora { rank: 16 alpha: 8 rslora: true targets: "o_proj" })pb");
  ASSERT_TRUE(rs.ok()) << rs.status();
  EXPECT_DOUBLE_EQ(training::ResolveModelArchitecture(rs->model())->lora->Scale(), 2.0);
  const absl::StatusOr<config::JobConfig> default_alpha =
      JobWith(R"pb(peft { adapters: true }
                   lora { rank: 16 targets: "o_proj" })pb");
  ASSERT_TRUE(default_alpha.ok()) << default_alpha.status();
  EXPECT_DOUBLE_EQ(training::ResolveModelArchitecture(default_alpha->model())->lora->Scale(), 1.0);
}

TEST(PeftConfig, EachMistakeNamesItsFieldAndRemedy) {
  EXPECT_THAT(ErrorOf("peft {}"), HasSubstr("model.peft trains nothing: set at least one of"));
  EXPECT_THAT(ErrorOf("peft { ssa: true }"),
              HasSubstr("model.peft.ssa=true but SSA is off: set model.ssa.enabled=true"));
  EXPECT_THAT(ErrorOf("peft { adapters: true }"),
              HasSubstr("model.peft.adapters=true but the model has no adapters"));
  EXPECT_THAT(ErrorOf(R"pb(lora { rank: 4 targets: "q_proj" })pb"),
              HasSubstr("model.lora without model.peft { adapters: true }"));
  const std::string peft = "peft { adapters: true } ";
  EXPECT_THAT(ErrorOf(peft + R"pb(lora { rank: 0 targets: "q_proj" })pb"),
              HasSubstr("model.lora.rank=0: give a rank in [1, 4096]"));
  for (const char* dropout : {"1", "-0.1", "nan"}) {
    EXPECT_THAT(
        ErrorOf(peft + R"pb(lora { rank: 4 targets: "q_proj" dropout:)pb" + dropout + "}"),
        HasSubstr(absl::StrCat("model.lora.dropout=", dropout, ": give a probability in [0, 1)")));
  }
  EXPECT_THAT(ErrorOf(peft + R"pb(lora { rank: 4 alpha: -1 targets: "q_proj" })pb"),
              HasSubstr("model.lora.alpha=-1: must be > 0"));
  EXPECT_THAT(ErrorOf(peft + "lora { rank: 4 }"), HasSubstr("model.lora.targets is empty"));
  EXPECT_THAT(ErrorOf(peft + R"pb(lora {
                                    rank: 4
                                    targets: [ "qkv" ]
                                  })pb"),
              HasSubstr("model.lora.targets: unknown projection \"qkv\""));
  EXPECT_THAT(ErrorOf(peft + R"pb(lora {
                                    rank: 4
                                    targets: [ "q_prj" ]
                                  })pb"),
              HasSubstr("unknown projection \"q_prj\" (did you mean \"q_proj\"?); known: q_proj, "
                        "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"));
  EXPECT_THAT(ErrorOf(peft + R"pb(lora {
                                    rank: 4
                                    targets: [ "q", "q_proj" ]
                                  })pb"),
              HasSubstr("model.lora.targets names q_proj twice"));
  // A peft adapter needs adapters; SSA-only tuning exports the merged model.
  EXPECT_THAT(ErrorOf("ssa { enabled: true } peft { ssa: true }",
                      "export_format: PEFT_ADAPTER export_hf_dir: \"out\""),
              HasSubstr("training.export_format=PEFT_ADAPTER needs LoRA adapters (model.lora): "
                        "peft refuses an adapter that adapts no projection"));
  EXPECT_THAT(ErrorOf("", "export_format: PEFT_ADAPTER"),
              HasSubstr("use MERGED (or AUTO), or add model.lora"));
  EXPECT_THAT(ErrorOf("", "export_format: ADAPTER"),
              HasSubstr("Unknown enumeration value of \"ADAPTER\" for field \"export_format\""));
  // A LoRA job exports, a peft adapter by default and merged when asked.
  const std::string lora = peft + R"pb(lora { rank: 4 targets: "q_proj" })pb";
  EXPECT_EQ(ErrorOf(lora, R"pb(export_hf_dir: "out")pb"), "");
  const absl::StatusOr<config::JobConfig> lora_job = JobWith(lora);
  ASSERT_TRUE(lora_job.ok()) << lora_job.status();
  EXPECT_EQ(*training::ResolveExportFormat(*lora_job, config::ExportFormat::AUTO, "f"),
            models::ExportFormat::kPeftAdapter);
  EXPECT_EQ(*training::ResolveExportFormat(*lora_job, config::ExportFormat::MERGED, "f"),
            models::ExportFormat::kMerged);
  const absl::StatusOr<config::JobConfig> full = JobWith("");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(*training::ResolveExportFormat(*full, config::ExportFormat::AUTO, "f"),
            models::ExportFormat::kMerged);
  // A rank beyond a projection's side needs the architecture (tiny: hidden size 128).
  const absl::StatusOr<config::JobConfig> wide =
      JobWith(peft + R"pb(lora { rank: 4000 targets: "q_proj" })pb");
  ASSERT_TRUE(wide.ok()) << wide.status();
  const absl::StatusOr<models::LlamaConfig> arch =
      training::ResolveModelArchitecture(wide->model());
  ASSERT_FALSE(arch.ok());
  EXPECT_THAT(std::string(arch.status().message()), HasSubstr("model.lora.rank=4000 exceeds the "));
}

}  // namespace
}  // namespace kelvin::launcher

// The model section from a checkpoint (framework/checkpoint/model_source.h): fields the config does not set are taken,
// an explicit field (file or --set) that disagrees is an error naming it with both values, overridable fields keep
// an explicit config value and report it, and every model field of the schema is covered (the metadata round-trips).
#include <gtest/gtest.h>

#include "framework/checkpoint/checkpoint.h"
#include "framework/config/config.h"
#include "framework/config/config_schema.h"
#include "framework/checkpoint/model_source.h"
#include "kernels/tensor.h"

namespace rt {
namespace {

std::map<std::string, std::string> checkpoint_model() {
  Config c = parse_config_text("model:\n  n_layer: 3\n  d_model: 48\n  n_head: 2\n  n_kv_head: 1\n  mlp: swiglu\n"
                               "  rope_base: 12345\n  tied_embeddings: true\n",
                               {}, 0, "ckpt");
  return model_metadata(c.model);
}

TEST(ModelSource, UnsetFieldsComeFromTheCheckpoint) {
  Config c = parse_config_text("data:\n  seq_len: 64\n", {}, 0, "cfg");
  const ModelSourceReport r = apply_model_from_source(c, checkpoint_model(), "checkpoint", "ckpt/step_1");
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model.d_model, 48);
  EXPECT_EQ(c.model.n_kv_head, 1);
  EXPECT_EQ(c.model.mlp, "swiglu");
  EXPECT_EQ(c.model.rope_base, 12345.f);
  EXPECT_TRUE(c.model.tied_embeddings);
  EXPECT_NE(std::find(r.taken.begin(), r.taken.end(), "model.rope_base = 12345"), r.taken.end());
  EXPECT_TRUE(r.missing.empty());
}

TEST(ModelSource, ExplicitDisagreementNamesEveryFieldWithBothValues) {
  Config c = parse_config_text("model:\n  n_layer: 1\n  d_model: 48\n", {"model.rope_base=100"}, 0, "cfg");
  try {
    apply_model_from_source(c, checkpoint_model(), "checkpoint", "ckpt/step_1");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model.n_layer: the config sets 1, the checkpoint has 3"), std::string::npos) << m;
    EXPECT_NE(m.find("model.rope_base: the config sets 100, the checkpoint has 12345"), std::string::npos) << m;
    EXPECT_EQ(m.find("model.d_model"), std::string::npos) << "an explicit field that agrees is fine\n" << m;
  }
}

TEST(ModelSource, OverridableFieldsKeepAnExplicitConfigValueAndSaySo) {
  Config c = parse_config_text("model:\n  rope_base: 100\n", {}, 0, "cfg");
  const ModelSourceReport r =
      apply_model_from_source(c, checkpoint_model(), "checkpoint", "ckpt", {"model.rope_base"});
  EXPECT_EQ(c.model.rope_base, 100.f);
  EXPECT_EQ(c.model.n_layer, 3);
  ASSERT_EQ(r.overridden.size(), 1u);
  EXPECT_EQ(r.overridden[0], "model.rope_base: 100 (config) overrides 12345 (checkpoint ckpt)");
  // Not explicit: the source's value is taken even for an overridable field.
  Config d = parse_config_text("data:\n  seq_len: 64\n", {}, 0, "cfg");
  EXPECT_TRUE(apply_model_from_source(d, checkpoint_model(), "checkpoint", "ckpt", {"model.rope_base"}).overridden.empty());
  EXPECT_EQ(d.model.rope_base, 12345.f);
  // A prefix must end in '.' to match more than one field.
  Config e = parse_config_text("model:\n  rope_base: 100\n", {}, 0, "cfg");
  EXPECT_THROW(apply_model_from_source(e, checkpoint_model(), "checkpoint", "ckpt", {"model.rope"}), Error);
}

TEST(ModelSource, MetadataCoversEverySchemaModelField) {
  const auto meta = model_metadata(ModelConfig{});
  for (const FieldSpec& f : config_fields()) {
    if (std::string(f.section) == "model") {
      EXPECT_TRUE(meta.count(f.name)) << f.path();
    }
  }
  // A float written and read back compares equal (canonical text), and a bad value is named.
  Config c = parse_config_text("model:\n  norm_eps: 1e-6\n", {}, 0, "cfg");
  auto m = model_metadata(c.model);
  Config d = parse_config_text("model:\n  norm_eps: 0.000001\n", {}, 0, "cfg");
  EXPECT_NO_THROW(apply_model_from_source(d, m, "checkpoint", "ckpt"));
  m["n_layer"] = "two";
  EXPECT_THROW(apply_model_from_source(d, m, "checkpoint", "ckpt"), Error);
}

}  // namespace
}  // namespace rt

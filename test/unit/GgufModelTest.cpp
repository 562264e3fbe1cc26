// GgufModel (runtime/weights/gguf_model.cpp) on tiny llama files written here: what open()
// refuses, each with an error naming the key or tensor at fault, the config a gemma3 file's
// metadata becomes (what llama.cpp computes beyond transformers' loader), olmo2's and smollm3's
// as llama.cpp reads them (which that loader does not know), and what read() and
// readBlocks() return: the converter's RoPE row permutation undone (the file made with the
// converter's permutation, written out here independently of the reader's inverse), and a
// rank's slice of a Q8_0 matrix as the file's very blocks; a qwen3moe file's 3D experts, gate
// and up read as one gate_up_proj, whole and by a rank's intermediate rows; a gpt-oss file's
// experts transposed and interleaved back, its biases too, and its YaRN keys; a deepseek2
// file's config from llama.cpp's MQA form and kv_b_proj rebuilt from attn_k_b and attn_v_b,
// and what it refuses. That tpc and transformers compute
// the same model from such files is test/conformance/gguf-architectures.test.
#include "tpcrt/gguf_model.h"

#include "GgufWriter.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace tpcrt;

using tpc::test::putFloat;
using ModelFile = tpc::test::GgufWriter;

namespace {

std::string writeTemp(const std::string &bytes, const std::string &name) {
  return tpc::test::writeTemp(bytes, "gguf-model-test-" + name + ".gguf");
}

/// An F32 tensor of HF shape [rows, cols] holding `values` (row-major).
void f32(ModelFile &f, const std::string &name, int64_t rows, int64_t cols,
         const std::vector<float> &values) {
  std::string bytes;
  for (float v : values)
    putFloat(bytes, v);
  f.tensor(name, {uint64_t(cols), uint64_t(rows)}, GgmlType::F32, bytes);
}

// The tiny llama: hidden 8, 2 heads of 4, 1 KV head, one layer.
constexpr int64_t kHidden = 8, kHeads = 2, kKvHeads = 1, kHeadDim = 4;

/// The metadata of the tiny llama, less the keys named in `skip`.
ModelFile llamaMetadata(const std::string &architecture = "llama",
                        const std::string &skip = "") {
  ModelFile f;
  f.str("general.architecture", architecture);
  auto key = [&](const std::string &k, uint32_t v) {
    if (skip != k)
      f.u32(architecture + "." + k, v);
  };
  key("block_count", 1);
  key("embedding_length", kHidden);
  key("attention.head_count", kHeads);
  key("attention.head_count_kv", kKvHeads);
  key("vocab_size", 4);
  return f;
}

/// HF element (r, c) of a matrix, distinct across rows, columns and tensors.
float hfValue(int64_t r, int64_t c, float tag) { return tag + float(r) * 16.0f + float(c); }

/// The converter's LlamaModel.permute, written as it is there: the HF rows of each head,
/// viewed as [2, D/2], transposed to [D/2, 2]: file row h*D + 2j + i holds HF row
/// h*D + i*D/2 + j. Returns the file's rows of the HF matrix hfValue(., ., tag).
std::vector<float> permutedRows(int64_t heads, int64_t cols, float tag) {
  std::vector<float> file(size_t(heads * kHeadDim * cols));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < kHeadDim / 2; ++j)
        for (int64_t c = 0; c < cols; ++c)
          file[size_t((h * kHeadDim + 2 * j + i) * cols + c)] =
              hfValue(h * kHeadDim + i * kHeadDim / 2 + j, c, tag);
  return file;
}

std::vector<float> hfMatrix(int64_t rows, int64_t cols, float tag) {
  std::vector<float> m;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      m.push_back(hfValue(r, c, tag));
  return m;
}

// ffn_down as Q8_0: HF shape [kHidden, 64], two blocks of 32 per row, each block an f16 scale
// and 32 int8 values, distinct bytes everywhere.
constexpr int64_t kDownCols = 64, kQ8Block = 34;
std::string q8Blocks() {
  std::string bytes;
  for (int64_t r = 0; r < kHidden; ++r)
    for (int64_t b = 0; b < kDownCols / 32; ++b) {
      bytes += char(0x00), bytes += char(0x3c); // f16 1.0
      for (int i = 0; i < 32; ++i)
        bytes += char((r * 64 + b * 32 + i) % 251 - 125);
    }
  return bytes;
}

/// The tiny llama: q and k permuted as the converter does, a Q8_0 ffn_down.
ModelFile llamaFile() {
  ModelFile f = llamaMetadata();
  f32(f, "token_embd.weight", 4, kHidden, hfMatrix(4, kHidden, 0.5f));
  f32(f, "blk.0.attn_q.weight", kHeads * kHeadDim, kHidden, permutedRows(kHeads, kHidden, 1000));
  f32(f, "blk.0.attn_k.weight", kKvHeads * kHeadDim, kHidden,
        permutedRows(kKvHeads, kHidden, 2000));
  f32(f, "blk.0.attn_v.weight", kKvHeads * kHeadDim, kHidden,
        hfMatrix(kKvHeads * kHeadDim, kHidden, 3000));
  f.tensor("blk.0.ffn_down.weight", {uint64_t(kDownCols), uint64_t(kHidden)},
           GgmlType::Q8_0, q8Blocks());
  return f;
}

std::string openError(const ModelFile &f, const std::string &name) {
  std::string path = writeTemp(f.bytes(), name), error;
  auto model = GgufModel::open(path, error);
  EXPECT_EQ(model, nullptr) << name << " opened";
  EXPECT_NE(error.find(path), std::string::npos) << "error does not name the file: " << error;
  return error;
}

std::unique_ptr<GgufModel> openLlama() {
  std::string path = writeTemp(llamaFile().bytes(), "llama"), error;
  auto model = GgufModel::open(path, error);
  EXPECT_NE(model, nullptr) << error;
  return model;
}

SliceSpec rows(int64_t chunks, int64_t piece, int64_t dim = 0) {
  SliceSpec spec;
  spec.dim = dim;
  spec.offsets = {0};
  spec.sizes = {dim == 0 ? kHidden : kDownCols};
  spec.chunks = chunks;
  spec.piece = piece;
  return spec;
}

} // namespace

TEST(GgufModel, OpensTheTinyLlama) {
  auto model = openLlama();
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->modelType(), "llama");
  EXPECT_NE(model->find("model.layers.0.self_attn.q_proj.weight"), nullptr);
  EXPECT_NE(model->find("model.layers.0.mlp.down_proj.weight"), nullptr);
  EXPECT_NE(model->configJson().find("\"num_hidden_layers\": 1"), std::string::npos)
      << model->configJson();
}

TEST(GgufModel, RefusesAnUnknownArchitecture) {
  ModelFile f = llamaMetadata("falcon");
  std::string error = openError(f, "falcon");
  EXPECT_NE(error.find("'falcon'"), std::string::npos) << error;
  for (const char *arch : {"llama", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3",
                           "olmo2", "smollm3", "gpt-oss", "deepseek2", "llama4"})
    EXPECT_NE(error.find(arch), std::string::npos) << arch << " not listed: " << error;
  // llama once, though it reads as llama or (with experts) mixtral.
  EXPECT_EQ(error.find("llama, "), error.rfind("llama, ")) << error;
}

TEST(GgufModel, ALlamaFileWithExpertsIsMixtral) {
  ModelFile f = llamaMetadata("llama");
  f.u32("llama.expert_count", 4);
  f.u32("llama.expert_used_count", 2);
  f.u32("llama.feed_forward_length", 8);
  std::string path = writeTemp(f.bytes(), "llama-experts"), error;
  std::unique_ptr<GgufModel> model = GgufModel::open(path, error);
  ASSERT_NE(model, nullptr) << error;
  EXPECT_EQ(model->modelType(), "mixtral");
  nlohmann::json config = nlohmann::json::parse(model->configJson());
  EXPECT_EQ(config["num_local_experts"], 4);
  EXPECT_EQ(config["num_experts_per_tok"], 2);
  EXPECT_FALSE(config.contains("moe_intermediate_size"));
  EXPECT_EQ(config["rope_theta"], 10000.0); // llama.cpp's, where the file says none
  // Without expert_count, or with none, it is the dense llama.
  model = GgufModel::open(writeTemp(llamaMetadata("llama").bytes(), "llama-dense"), error);
  ASSERT_NE(model, nullptr) << error;
  EXPECT_EQ(model->modelType(), "llama");
  ModelFile none = llamaMetadata("llama");
  none.u32("llama.expert_count", 0);
  model = GgufModel::open(writeTemp(none.bytes(), "llama-no-experts"), error);
  ASSERT_NE(model, nullptr) << error;
  EXPECT_EQ(model->modelType(), "llama");
}

TEST(GgufModel, RefusesAMissingBlockCount) {
  ModelFile f = llamaMetadata("llama", "block_count");
  std::string error = openError(f, "no-block-count");
  EXPECT_NE(error.find("llama.block_count"), std::string::npos) << error;
}

namespace {

/// A gemma3 file's metadata as the converter writes it (and no tensors): `layers` layers of
/// the tiny shape with head_dim 4, a window of 4 unless `window` is 0 (none), rope.scaling.type
/// `scaling` unless empty, with a factor of 8 unless `factor` is false; less the key named in
/// `skip`.
ModelFile gemma3Metadata(uint32_t layers, uint32_t window, const std::string &scaling,
                         bool factor = true, const std::string &skip = "") {
  ModelFile f;
  f.str("general.architecture", "gemma3");
  auto u32 = [&](const std::string &k, uint32_t v) {
    if (skip != k)
      f.u32("gemma3." + k, v);
  };
  auto f32 = [&](const std::string &k, float v) {
    if (skip != k)
      putFloat(f.key("gemma3." + k, GgufValueType::F32), v);
  };
  u32("block_count", layers);
  u32("embedding_length", kHidden);
  u32("attention.head_count", kHeads);
  u32("attention.head_count_kv", kKvHeads);
  u32("attention.key_length", kHeadDim);
  u32("vocab_size", 4);
  f32("rope.freq_base", 1e6f);
  f32("rope.freq_base_swa", 20000.0f);
  if (window)
    u32("attention.sliding_window", window);
  if (!scaling.empty())
    f.str("gemma3.rope.scaling.type", scaling);
  if (factor)
    f32("rope.scaling.factor", 8.0f);
  return f;
}

nlohmann::json gemma3Config(const ModelFile &f, const std::string &name) {
  std::string path = writeTemp(f.bytes(), name), error;
  std::unique_ptr<GgufModel> model = GgufModel::open(path, error);
  EXPECT_NE(model, nullptr) << error;
  return model ? nlohmann::json::parse(model->configJson()) : nlohmann::json();
}

} // namespace

TEST(GgufModel, RefusesATensorWithNoHuggingFaceCounterpart) {
  ModelFile f = llamaFile();
  f32(f, "blk.0.weird.weight", 1, kHidden, hfMatrix(1, kHidden, 0));
  std::string error = openError(f, "weird");
  EXPECT_NE(error.find("blk.0.weird.weight"), std::string::npos) << error;
}

TEST(GgufModel, RefusesExpertsInAnArchitectureReadAsDense) {
  // A llama file with a router (Mixtral's kind): tpc reads llama as dense, so the router has
  // no counterpart, refused at open rather than as missing MLP weights at load.
  ModelFile f = llamaFile();
  f32(f, "blk.0.ffn_gate_inp.weight", 4, kHidden, hfMatrix(4, kHidden, 0));
  std::string error = openError(f, "llama-experts");
  EXPECT_NE(error.find("blk.0.ffn_gate_inp.weight has no counterpart"), std::string::npos)
      << error;
}

// What llama.cpp computes from a gemma3 file that transformers' loader leaves out: the
// global layers' linear RoPE scaling, the local theta, the query's scale (head_dim's; the
// 27B's, 62 layers, hidden / heads), no sliding layer without a window.
TEST(GgufModel, Gemma3ConfigIsWhatLlamaCppComputes) {
  nlohmann::json config = gemma3Config(gemma3Metadata(6, 4, "linear"), "gemma3");
  EXPECT_EQ(config["model_type"], "gemma3_text");
  EXPECT_EQ(config["head_dim"], kHeadDim);
  EXPECT_EQ(config["rope_theta"], 1e6);
  EXPECT_EQ(config["rope_local_base_freq"], 20000.0);
  EXPECT_EQ(config["rope_scaling"],
            nlohmann::json::parse(R"({"rope_type": "linear", "factor": 8.0})"));
  EXPECT_EQ(config["sliding_window"], 4);
  EXPECT_FALSE(config.contains("sliding_window_pattern")) << config.dump();
  EXPECT_EQ(config["query_pre_attn_scalar"], kHeadDim);
  EXPECT_EQ(gemma3Config(gemma3Metadata(62, 4, "linear"), "gemma3-27b")["query_pre_attn_scalar"],
            kHidden / kHeads);
  nlohmann::json plain = gemma3Config(gemma3Metadata(6, 0, "", false), "gemma3-no-swa");
  EXPECT_FALSE(plain.contains("rope_scaling")) << plain.dump();
  EXPECT_FALSE(plain.contains("sliding_window")) << plain.dump();
  EXPECT_EQ(plain["sliding_window_pattern"], 1);
  EXPECT_FALSE(gemma3Config(gemma3Metadata(6, 4, "none", false), "gemma3-none")
                   .contains("rope_scaling"));
}

TEST(GgufModel, Gemma3RefusesWhatItCannotRead) {
  std::string error = openError(gemma3Metadata(6, 4, "linear", true, "attention.head_count"),
                                "gemma3-no-heads");
  EXPECT_NE(error.find("no metadata 'gemma3.attention.head_count', which a gemma3 model needs"),
            std::string::npos)
      << error;
  error = openError(gemma3Metadata(6, 4, "linear", false), "gemma3-no-factor");
  EXPECT_NE(error.find("gemma3.rope.scaling.type is linear, but there is no "
                       "gemma3.rope.scaling.factor"),
            std::string::npos)
      << error;
  error = openError(gemma3Metadata(6, 4, "yarn"), "gemma3-yarn");
  EXPECT_NE(error.find("gemma3.rope.scaling.type is 'yarn'"), std::string::npos) << error;
  // A query scale of 0 (a head of 0 dimensions) would scale the queries by infinity.
  ModelFile zero = gemma3Metadata(6, 4, "linear", true, "attention.key_length");
  zero.u32("gemma3.attention.key_length", 0);
  error = openError(zero, "gemma3-zero-scale");
  EXPECT_NE(error.find("the query scale (head_dim, or for 62 layers hidden / heads) is 0; it "
                       "must be positive"),
            std::string::npos)
      << error;
}

namespace {

/// An F32 vector of `n` elements, each `value`.
void f32Vector(ModelFile &f, const std::string &name, int64_t n, float value) {
  std::string bytes;
  for (int64_t i = 0; i < n; ++i)
    putFloat(bytes, value);
  f.tensor(name, {uint64_t(n)}, GgmlType::F32, bytes);
}

/// The tiny shape as an olmo2 file (q unpermuted, q_norm over the whole projection, the norms
/// after attention and the MLP) or a smollm3 one (q permuted: its converter is LlamaModel's,
/// which writes rope.dimension_count), less the key named in `skip`.
ModelFile olmo2OrSmolLM3(const std::string &architecture, const std::string &skip = "") {
  ModelFile f = llamaMetadata(architecture, skip);
  bool smol = architecture == "smollm3";
  if (smol)
    f.u32("smollm3.rope.dimension_count", kHeadDim);
  f32(f, "blk.0.attn_q.weight", kHeads * kHeadDim, kHidden,
      smol ? permutedRows(kHeads, kHidden, 1000) : hfMatrix(kHeads * kHeadDim, kHidden, 1000));
  if (smol) {
    f32Vector(f, "blk.0.attn_norm.weight", kHidden, 1.0f);
    f32Vector(f, "blk.0.ffn_norm.weight", kHidden, 1.0f);
  } else {
    f32Vector(f, "blk.0.attn_q_norm.weight", kHeads * kHeadDim, 1.0f);
    f32Vector(f, "blk.0.post_attention_norm.weight", kHidden, 1.0f);
    f32Vector(f, "blk.0.post_ffw_norm.weight", kHidden, 1.0f);
  }
  return f;
}

} // namespace

// transformers' loader knows neither: llama.cpp's reading, where SmolLM3's layers without
// RoPE (every fourth) and its theta without a key are what llama.cpp takes.
TEST(GgufModel, Olmo2AndSmolLM3AreReadAsLlamaCppReadsThem) {
  std::string error, path = writeTemp(olmo2OrSmolLM3("olmo2").bytes(), "olmo2");
  std::unique_ptr<GgufModel> olmo = GgufModel::open(path, error);
  ASSERT_NE(olmo, nullptr) << error;
  EXPECT_EQ(olmo->modelType(), "olmo2");
  for (const char *name : {"model.layers.0.self_attn.q_norm.weight",
                           "model.layers.0.post_attention_layernorm.weight",
                           "model.layers.0.post_feedforward_layernorm.weight"})
    EXPECT_NE(olmo->find(name), nullptr) << name;
  const GgufModelTensor *q = olmo->find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->permutedHeads, 0);

  path = writeTemp(olmo2OrSmolLM3("smollm3").bytes(), "smollm3");
  std::unique_ptr<GgufModel> smol = GgufModel::open(path, error);
  ASSERT_NE(smol, nullptr) << error;
  nlohmann::json config = nlohmann::json::parse(smol->configJson());
  EXPECT_EQ(config["model_type"], "smollm3");
  EXPECT_EQ(config["head_dim"], kHeadDim);
  EXPECT_EQ(config["no_rope_layer_interval"], 4);
  EXPECT_EQ(config["rope_theta"], 10000.0);
  EXPECT_NE(smol->find("model.layers.0.post_attention_layernorm.weight"), nullptr);
  std::vector<float> out(size_t(kHeads * kHeadDim * kHidden), -1.0f);
  uint64_t bytesRead = 0;
  ASSERT_TRUE(smol->read("model.layers.0.self_attn.q_proj.weight", {kHeads * kHeadDim, kHidden},
                         SliceSpec(), out.data(), bytesRead, error))
      << error;
  EXPECT_EQ(out, hfMatrix(kHeads * kHeadDim, kHidden, 1000));
}

TEST(GgufModel, FilesTheLoaderDoesNotKnowRefuseWhatTpcDoesNotRead) {
  std::string error = openError(olmo2OrSmolLM3("olmo2", "attention.head_count"), "olmo2-no-heads");
  EXPECT_NE(error.find("no metadata 'olmo2.attention.head_count'"), std::string::npos) << error;
  error = openError(olmo2OrSmolLM3("smollm3", "embedding_length"), "smollm3-no-hidden");
  EXPECT_NE(error.find("no metadata 'smollm3.embedding_length'"), std::string::npos) << error;
  // OLMo 3, which the converter writes as olmo2 with its sliding layers.
  ModelFile olmo3 = olmo2OrSmolLM3("olmo2");
  olmo3.u32("olmo2.attention.sliding_window", 4096);
  error = openError(olmo3, "olmo3");
  EXPECT_NE(error.find("olmo2.attention.sliding_window says OLMo 3"), std::string::npos) << error;
  ModelFile yarn = olmo2OrSmolLM3("smollm3");
  yarn.str("smollm3.rope.scaling.type", "yarn");
  error = openError(yarn, "smollm3-yarn");
  EXPECT_NE(error.find("smollm3.rope.scaling.type is 'yarn'"), std::string::npos) << error;
  // A gemma (1) file too: transformers' loader does not know it, llama.cpp would scale.
  ModelFile gemma = llamaMetadata("gemma");
  gemma.str("gemma.rope.scaling.type", "linear");
  error = openError(gemma, "gemma-linear");
  EXPECT_NE(error.find("gemma.rope.scaling.type is 'linear'; tpc does not read RoPE scaling "
                       "from a gemma file yet"),
            std::string::npos)
      << error;
}

TEST(GgufModel, RopeFrequencyFactorsBecomeTheConfigsRopeAndNoParameter) {
  // One factor a pair of the head's 4 dimensions: 1 and 8 (llama3's high and low bands).
  auto factors = [](std::vector<float> values) {
    return std::string(reinterpret_cast<const char *>(values.data()), values.size() * 4);
  };
  ModelFile f = llamaFile();
  f.tensor("rope_freqs.weight", {kHeadDim / 2}, GgmlType::F32, factors({1.0f, 8.0f}));
  std::string path = writeTemp(f.bytes(), "rope-freqs"), error;
  std::unique_ptr<GgufModel> model = GgufModel::open(path, error);
  ASSERT_NE(model, nullptr) << error;
  nlohmann::json config = nlohmann::json::parse(model->configJson());
  EXPECT_EQ(config["rope_parameters"]["rope_type"], "freq_factors");
  EXPECT_EQ(config["rope_parameters"]["freq_factors"], nlohmann::json::parse("[1.0, 8.0]"));
  EXPECT_EQ(model->find("rope_freqs.weight"), nullptr);
  // A factor that is not positive, a count that is not one a pair, LongRoPE's tables.
  ModelFile zero = llamaFile();
  zero.tensor("rope_freqs.weight", {kHeadDim / 2}, GgmlType::F32, factors({1.0f, 0.0f}));
  error = openError(zero, "rope-freqs-zero");
  EXPECT_NE(error.find("rope_freqs.weight holds 0.000000 at 1: a RoPE scaling factor must be "
                       "positive"),
            std::string::npos)
      << error;
  ModelFile three = llamaFile();
  three.tensor("rope_freqs.weight", {3}, GgmlType::F32, factors({1.0f, 2.0f, 3.0f}));
  error = openError(three, "rope-freqs-three");
  EXPECT_NE(error.find("one for each pair of a head's 4 dimensions"), std::string::npos) << error;
  ModelFile longrope = llamaFile();
  longrope.tensor("rope_factors_long.weight", {kHeadDim / 2}, GgmlType::F32,
                  factors({1.0f, 2.0f}));
  error = openError(longrope, "longrope");
  EXPECT_NE(error.find("rope_factors_long.weight holds LongRoPE scaling factors"),
            std::string::npos)
      << error;
}

TEST(GgufModel, RefusesATypeItDoesNotRead) {
  ModelFile f = llamaMetadata();
  // IQ2_XXS (16): 256 elements in 66 bytes.
  f.tensor("blk.0.ffn_down.weight", {256, uint64_t(kHidden)}, GgmlType::IQ2_XXS,
           std::string(size_t(66 * kHidden), '\0'));
  std::string error = openError(f, "iq2-xxs");
  EXPECT_NE(error.find("blk.0.ffn_down.weight"), std::string::npos) << error;
  EXPECT_NE(error.find("IQ2_XXS"), std::string::npos) << error;
}

TEST(GgufModel, RefusesHeadsThatDoNotDivideAttnQ) {
  ModelFile f;
  f.str("general.architecture", "llama");
  f.u32("llama.block_count", 1);
  f.u32("llama.embedding_length", kHidden);
  f.u32("llama.attention.head_count", 3); // 8 rows are not 3 heads of pairs
  f.u32("llama.attention.head_count_kv", 1);
  f.u32("llama.vocab_size", 4);
  f32(f, "blk.0.attn_q.weight", kHidden, kHidden, hfMatrix(kHidden, kHidden, 0));
  std::string error = openError(f, "three-heads");
  EXPECT_NE(error.find("blk.0.attn_q.weight"), std::string::npos) << error;
  EXPECT_NE(error.find("3 heads"), std::string::npos) << error;
}

TEST(GgufModel, ReadUndoesTheRopePermutation) {
  auto model = openLlama();
  ASSERT_NE(model, nullptr);
  struct Case {
    const char *name;
    int64_t rows;
    float tag;
  };
  for (Case c : {Case{"model.layers.0.self_attn.q_proj.weight", kHeads * kHeadDim, 1000},
                 Case{"model.layers.0.self_attn.k_proj.weight", kKvHeads * kHeadDim, 2000},
                 Case{"model.layers.0.self_attn.v_proj.weight", kKvHeads * kHeadDim, 3000}}) {
    std::vector<float> out(size_t(c.rows * kHidden), -1.0f);
    uint64_t bytesRead = 0;
    std::string error;
    ASSERT_TRUE(model->read(c.name, {c.rows, kHidden}, SliceSpec(), out.data(), bytesRead,
                            error))
        << error;
    EXPECT_EQ(out, hfMatrix(c.rows, kHidden, c.tag)) << c.name;
    EXPECT_EQ(bytesRead, uint64_t(c.rows * kHidden * 4)) << c.name;
  }
  // The second rank's half of q's rows (tp 2 by heads): the second head, un-permuted.
  std::vector<float> half(size_t(kHeadDim * kHidden), -1.0f), want;
  uint64_t bytesRead = 0;
  std::string error;
  ASSERT_TRUE(model->read("model.layers.0.self_attn.q_proj.weight", {kHidden, kHidden},
                          rows(2, 1), half.data(), bytesRead, error))
      << error;
  for (int64_t r = kHeadDim; r < 2 * kHeadDim; ++r)
    for (int64_t col = 0; col < kHidden; ++col)
      want.push_back(hfValue(r, col, 1000));
  EXPECT_EQ(half, want);
}

TEST(GgufModel, ReadBlocksReturnsTheRanksRawBlocks) {
  auto model = openLlama();
  ASSERT_NE(model, nullptr);
  const std::string name = "model.layers.0.mlp.down_proj.weight", blocks = q8Blocks();
  const size_t rowBytes = size_t(kDownCols / 32 * kQ8Block);
  // By rows: rank 1 of 2 holds rows 4..7, whole.
  {
    std::string out(size_t(kHidden / 2) * rowBytes, '\x7f');
    uint64_t bytesRead = 0;
    std::string error;
    ASSERT_TRUE(model->readBlocks(name, {kHidden, kDownCols}, rows(2, 1), DType::Q8_0,
                                  out.data(), bytesRead, error))
        << error;
    EXPECT_EQ(out, blocks.substr(size_t(kHidden / 2) * rowBytes));
  }
  // Along the rows: rank 1 of 2 holds columns 32..63, each row's second block.
  {
    std::string out(size_t(kHidden * kQ8Block), '\x7f'), want;
    for (int64_t r = 0; r < kHidden; ++r)
      want += blocks.substr(size_t(r) * rowBytes + kQ8Block, kQ8Block);
    uint64_t bytesRead = 0;
    std::string error;
    ASSERT_TRUE(model->readBlocks(name, {kHidden, kDownCols}, rows(2, 1, 1), DType::Q8_0,
                                  out.data(), bytesRead, error))
        << error;
    EXPECT_EQ(out, want);
  }
}

TEST(GgufModel, ReadBlocksRefusesASliceThatCutsBlocks) {
  auto model = openLlama();
  ASSERT_NE(model, nullptr);
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  // 4 pieces of 16 columns: every piece is half a Q8_0 block.
  std::string out(size_t(kHidden * kQ8Block), '\0');
  uint64_t bytesRead = 0;
  std::string error;
  EXPECT_FALSE(model->readBlocks(name, {kHidden, kDownCols}, rows(4, 1, 1), DType::Q8_0,
                                 out.data(), bytesRead, error));
  EXPECT_NE(error.find(name), std::string::npos) << error;
  EXPECT_NE(error.find("blocks"), std::string::npos) << error;
}

TEST(GgufModel, Qwen3MoeExpertsAreTransformersStackedTensors) {
  // Two experts of width 4 on a hidden of 8; file values hfValue(row, col, tag) of each 3D
  // tensor's rows ([E, rows, row] flattened to E * rows rows).
  constexpr int64_t experts = 2, width = 4;
  ModelFile f = llamaMetadata("qwen3moe");
  f.u32("qwen3moe.expert_count", experts);
  f.u32("qwen3moe.expert_used_count", 1);
  f.u32("qwen3moe.expert_feed_forward_length", width);
  f32(f, "blk.0.ffn_gate_inp.weight", experts, kHidden, hfMatrix(experts, kHidden, 100));
  auto experts3d = [&](const std::string &name, int64_t rows, int64_t cols, float tag) {
    std::string bytes;
    for (float v : hfMatrix(experts * rows, cols, tag))
      putFloat(bytes, v);
    f.tensor(name, {uint64_t(cols), uint64_t(rows), uint64_t(experts)}, GgmlType::F32, bytes);
  };
  // up before gate: mapping pairs them in either order.
  experts3d("blk.0.ffn_up_exps.weight", width, kHidden, 2000);
  experts3d("blk.0.ffn_gate_exps.weight", width, kHidden, 1000);
  experts3d("blk.0.ffn_down_exps.weight", kHidden, width, 3000);
  std::string path = writeTemp(f.bytes(), "qwen3moe"), error;
  auto model = GgufModel::open(path, error);
  ASSERT_NE(model, nullptr) << error;
  auto config = nlohmann::json::parse(model->configJson());
  EXPECT_EQ(config["model_type"], "qwen3_moe");
  EXPECT_EQ(config["num_experts"], experts);
  EXPECT_EQ(config["num_experts_per_tok"], 1);
  EXPECT_EQ(config["moe_intermediate_size"], width);
  EXPECT_EQ(config["norm_topk_prob"], true); // the loader's GGUF default, llama.cpp's
  EXPECT_NE(model->find("model.layers.0.mlp.gate.weight"), nullptr);
  EXPECT_NE(model->find("model.layers.0.mlp.experts.down_proj"), nullptr);

  // gate_up_proj [E, 2I, H]: each expert's gate rows, then its up rows.
  const std::string gateUp = "model.layers.0.mlp.experts.gate_up_proj";
  auto fused = [&](int64_t e, int64_t r) { // HF row r of expert e
    return r < width ? hfMatrix(experts * width, kHidden, 1000)
                           .at(size_t((e * width + r) * kHidden))
                     : hfMatrix(experts * width, kHidden, 2000)
                           .at(size_t((e * width + r - width) * kHidden));
  };
  std::vector<float> all(size_t(experts * 2 * width * kHidden), -1.0f);
  uint64_t bytesRead = 0;
  ASSERT_TRUE(model->read(gateUp, {experts, 2 * width, kHidden}, SliceSpec(), all.data(),
                          bytesRead, error))
      << error;
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < 2 * width; ++r)
      EXPECT_EQ(all[size_t((e * 2 * width + r) * kHidden)], fused(e, r)) << e << " " << r;
  EXPECT_EQ(bytesRead, uint64_t(all.size() * 4));

  // Rank 1 of 2 by the intermediate dimension (gate and up each halved): each expert's gate
  // rows 2..3 and up rows 2..3.
  SliceSpec half;
  half.dim = 1;
  half.offsets = {0, width};
  half.sizes = {width, width};
  half.chunks = 2;
  half.piece = 1;
  std::vector<float> mine(size_t(experts * width * kHidden), -1.0f);
  ASSERT_TRUE(model->read(gateUp, {experts, 2 * width, kHidden}, half, mine.data(), bytesRead,
                          error))
      << error;
  size_t at = 0;
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r : {2, 3, 6, 7}) {
      EXPECT_EQ(mine[at], fused(e, r)) << e << " " << r;
      at += size_t(kHidden);
    }

  // A shape the model does not have is refused, naming the tensor.
  EXPECT_FALSE(model->read(gateUp, {experts, width, kHidden}, SliceSpec(), all.data(),
                           bytesRead, error));
  EXPECT_NE(error.find(gateUp), std::string::npos) << error;
}

TEST(GgufModel, Qwen3MoeRefusesAGateWithoutItsUp) {
  ModelFile f = llamaMetadata("qwen3moe");
  std::string bytes;
  for (int i = 0; i < 2 * 4 * kHidden; ++i)
    putFloat(bytes, 0.0f);
  f.tensor("blk.0.ffn_gate_exps.weight", {uint64_t(kHidden), 4, 2}, GgmlType::F32, bytes);
  std::string error = openError(f, "qwen3moe-no-up");
  EXPECT_NE(error.find("blk.0.ffn_gate_exps.weight has no ffn_up_exps"), std::string::npos)
      << error;
}

namespace {

// A tiny gpt-oss file: two experts of width 4 on a hidden of 8, written as the converter writes
// GPT-OSS (each expert's matrix [out, in], gate and up apart, their biases apart), with YaRN
// keys from `scaling` ("" for none) and `extra` (a key to add, as "name=value").
constexpr int64_t kOssExperts = 2, kOssWidth = 4;
ModelFile gptOssFile(const std::string &scaling, const std::string &extra = "") {
  ModelFile f = llamaMetadata("gpt-oss");
  f.u32("gpt-oss.expert_count", kOssExperts);
  f.u32("gpt-oss.expert_used_count", 1);
  f.u32("gpt-oss.expert_feed_forward_length", kOssWidth);
  f.u32("gpt-oss.attention.sliding_window", 16);
  auto f32Key = [&](const std::string &k, float v) {
    putFloat(f.key("gpt-oss." + k, GgufValueType::F32), v);
  };
  f32Key("rope.freq_base", 150000.0f);
  if (!scaling.empty()) {
    f.str("gpt-oss.rope.scaling.type", scaling);
    f32Key("rope.scaling.factor", 32.0f);
    f.u32("gpt-oss.rope.scaling.original_context_length", 4096);
    f32Key("rope.scaling.yarn_beta_fast", 16.0f);
  }
  if (!extra.empty())
    f32Key(extra.substr(0, extra.find('=')), std::stof(extra.substr(extra.find('=') + 1)));
  auto tensor = [&](const std::string &name, std::vector<uint64_t> ne, float tag) {
    int64_t rows = 1;
    for (size_t i = 1; i < ne.size(); ++i)
      rows *= int64_t(ne[i]);
    std::string bytes;
    for (float v : hfMatrix(rows, int64_t(ne[0]), tag))
      putFloat(bytes, v);
    f.tensor(name, ne, GgmlType::F32, bytes);
  };
  tensor("blk.0.attn_sinks.weight", {uint64_t(kHeads)}, 50);
  tensor("blk.0.post_attention_norm.weight", {uint64_t(kHidden)}, 60);
  tensor("blk.0.ffn_gate_inp.weight", {uint64_t(kHidden), uint64_t(kOssExperts)}, 100);
  tensor("blk.0.ffn_gate_inp.bias", {uint64_t(kOssExperts)}, 200);
  for (auto [name, tag] : {std::pair{"gate", 1000.0f}, {"up", 2000.0f}}) {
    tensor(std::string("blk.0.ffn_") + name + "_exps.weight",
           {uint64_t(kHidden), uint64_t(kOssWidth), uint64_t(kOssExperts)}, tag);
    tensor(std::string("blk.0.ffn_") + name + "_exps.bias",
           {uint64_t(kOssWidth), uint64_t(kOssExperts)}, tag + 4000);
  }
  tensor("blk.0.ffn_down_exps.weight",
         {uint64_t(kOssWidth), uint64_t(kHidden), uint64_t(kOssExperts)}, 3000);
  tensor("blk.0.ffn_down_exps.bias", {uint64_t(kHidden), uint64_t(kOssExperts)}, 7000);
  return f;
}

} // namespace

TEST(GgufModel, GptOssExpertsAreTransposedAndInterleavedAsTransformersHoldsThem) {
  std::string path = writeTemp(gptOssFile("yarn").bytes(), "gpt-oss"), error;
  auto model = GgufModel::open(path, error);
  ASSERT_NE(model, nullptr) << error;
  auto config = nlohmann::json::parse(model->configJson());
  EXPECT_EQ(config["model_type"], "gpt_oss");
  EXPECT_EQ(config["num_local_experts"], kOssExperts);
  EXPECT_EQ(config["intermediate_size"], kOssWidth);
  EXPECT_EQ(config["sliding_window"], 16);
  const nlohmann::json &rope = config["rope_parameters"];
  EXPECT_EQ(rope["rope_type"], "yarn");
  EXPECT_EQ(rope["factor"], 32.0);
  EXPECT_EQ(rope["original_max_position_embeddings"], 4096);
  EXPECT_EQ(rope["beta_fast"], 16.0); // the file's
  EXPECT_EQ(rope["beta_slow"], 1.0);  // GptOssConfig's, where the file has none
  EXPECT_EQ(rope["truncate"], false);
  EXPECT_EQ(rope["rope_theta"], 150000.0);
  for (const char *name : {"model.layers.0.self_attn.sinks", "model.layers.0.mlp.router.weight",
                           "model.layers.0.mlp.router.bias",
                           "model.layers.0.post_attention_layernorm.weight"})
    EXPECT_NE(model->find(name), nullptr) << name;

  // Element (e, i, h) of a file expert tensor of `tag`, [E, rows, row].
  auto file = [](float tag, int64_t rows, int64_t e, int64_t r, int64_t c) {
    return hfValue(e * rows + r, c, tag);
  };
  uint64_t bytesRead = 0;
  // gate_up_proj [E, H, 2I]: column 2i of row h is gate's (i, h), column 2i + 1 up's.
  const std::string gateUp = "model.layers.0.mlp.experts.gate_up_proj";
  std::vector<float> all(size_t(kOssExperts * kHidden * 2 * kOssWidth), -1.0f);
  ASSERT_TRUE(model->read(gateUp, {kOssExperts, kHidden, 2 * kOssWidth}, SliceSpec(),
                          all.data(), bytesRead, error))
      << error;
  for (int64_t e = 0; e < kOssExperts; ++e)
    for (int64_t h = 0; h < kHidden; ++h)
      for (int64_t j = 0; j < 2 * kOssWidth; ++j)
        EXPECT_EQ(all[size_t((e * kHidden + h) * 2 * kOssWidth + j)],
                  file(j % 2 ? 2000 : 1000, kOssWidth, e, j / 2, h))
            << e << " " << h << " " << j;
  // Rank 1 of 2 along the last dimension: columns 4..7 (gate and up of i = 2, 3).
  SliceSpec last;
  last.dim = 2;
  last.offsets = {0};
  last.sizes = {2 * kOssWidth};
  last.chunks = 2;
  last.piece = 1;
  std::vector<float> mine(size_t(kOssExperts * kHidden * kOssWidth), -1.0f);
  ASSERT_TRUE(model->read(gateUp, {kOssExperts, kHidden, 2 * kOssWidth}, last, mine.data(),
                          bytesRead, error))
      << error;
  for (int64_t e = 0; e < kOssExperts; ++e)
    for (int64_t h = 0; h < kHidden; ++h)
      for (int64_t j = 0; j < kOssWidth; ++j)
        EXPECT_EQ(mine[size_t((e * kHidden + h) * kOssWidth + j)],
                  file(j % 2 ? 2000 : 1000, kOssWidth, e, (4 + j) / 2, h))
            << e << " " << h << " " << j;
  // down_proj [E, I, H]: (e, i, h) is the file's (e, h, i).
  std::vector<float> down(size_t(kOssExperts * kOssWidth * kHidden), -1.0f);
  ASSERT_TRUE(model->read("model.layers.0.mlp.experts.down_proj",
                          {kOssExperts, kOssWidth, kHidden}, SliceSpec(), down.data(), bytesRead,
                          error))
      << error;
  for (int64_t e = 0; e < kOssExperts; ++e)
    for (int64_t i = 0; i < kOssWidth; ++i)
      for (int64_t h = 0; h < kHidden; ++h)
        EXPECT_EQ(down[size_t((e * kOssWidth + i) * kHidden + h)], file(3000, kHidden, e, h, i));
  // gate_up_proj_bias [E, 2I]: gate's and up's biases alternating; down's as stored.
  std::vector<float> bias(size_t(kOssExperts * 2 * kOssWidth), -1.0f);
  ASSERT_TRUE(model->read("model.layers.0.mlp.experts.gate_up_proj_bias",
                          {kOssExperts, 2 * kOssWidth}, SliceSpec(), bias.data(), bytesRead,
                          error))
      << error;
  for (int64_t e = 0; e < kOssExperts; ++e)
    for (int64_t j = 0; j < 2 * kOssWidth; ++j)
      EXPECT_EQ(bias[size_t(e * 2 * kOssWidth + j)], file(j % 2 ? 6000 : 5000, 1, e, 0, j / 2));
  EXPECT_NE(model->find("model.layers.0.mlp.experts.down_proj_bias"), nullptr);

  // Blocks cannot be read from a transposed tensor.
  std::vector<uint8_t> raw(4096);
  EXPECT_FALSE(model->readBlocks(gateUp, {kOssExperts, kHidden, 2 * kOssWidth}, SliceSpec(),
                                 DType::Q8_0, raw.data(), bytesRead, error));
  EXPECT_NE(error.find("transposed"), std::string::npos) << error;
}

TEST(GgufModel, GptOssRopeIsWhatLlamaCppReads) {
  // No scaling type: none, as llama.cpp takes it.
  std::string path = writeTemp(gptOssFile("").bytes(), "gpt-oss-none"), error;
  auto model = GgufModel::open(path, error);
  ASSERT_NE(model, nullptr) << error;
  auto config = nlohmann::json::parse(model->configJson());
  EXPECT_EQ(config["rope_parameters"]["rope_type"], "default");
  // Another type, or a YaRN key tpc does not read, is refused by name.
  error = openError(gptOssFile("linear"), "gpt-oss-linear");
  EXPECT_NE(error.find("gpt-oss.rope.scaling.type is 'linear'"), std::string::npos) << error;
  error = openError(gptOssFile("yarn", "rope.scaling.yarn_log_multiplier=0.1"), "gpt-oss-mul");
  EXPECT_NE(error.find("gpt-oss.rope.scaling.yarn_log_multiplier"), std::string::npos) << error;
  error = openError(gptOssFile("yarn", "rope.scaling.yarn_beta_slow=-1"), "gpt-oss-beta");
  EXPECT_NE(error.find("gpt-oss.rope.scaling.yarn_beta_slow is -1"), std::string::npos) << error;
}

namespace {

// A tiny deepseek2 file as the converter writes it: 2 heads, kv_lora_rank 4, heads of 3 nope
// + 2 rope dims and values of 5, kv_b_proj as attn_k_b [H, kv_lora, nope] and attn_v_b
// [H, v, kv_lora]; `extra` adds a u32 key ("name=value") and `skip` leaves one out.
constexpr int64_t kMlaHeads = 2, kKvLora = 4, kNope = 3, kRope = 2, kValue = 5;
ModelFile deepseek2File(const std::string &extra = "", const std::string &skip = "") {
  ModelFile f;
  f.str("general.architecture", "deepseek2");
  auto u32 = [&](const std::string &k, uint32_t v) {
    if (k != skip)
      f.u32("deepseek2." + k, v);
  };
  u32("block_count", 1);
  u32("embedding_length", kHidden);
  u32("attention.head_count", kMlaHeads);
  u32("attention.head_count_kv", 1);
  u32("vocab_size", 4);
  u32("attention.kv_lora_rank", kKvLora);
  u32("attention.key_length", kKvLora + kRope);
  u32("attention.value_length", kKvLora);
  u32("attention.key_length_mla", kNope + kRope);
  u32("attention.value_length_mla", kValue);
  u32("rope.dimension_count", kRope);
  u32("expert_count", 4);
  u32("expert_used_count", 2);
  u32("expert_feed_forward_length", 6);
  u32("leading_dense_block_count", 1);
  if (!extra.empty())
    f.u32("deepseek2." + extra.substr(0, extra.find('=')),
          uint32_t(std::stoul(extra.substr(extra.find('=') + 1))));
  std::string k, v;
  for (float x : hfMatrix(kMlaHeads * kKvLora, kNope, 100))
    putFloat(k, x);
  for (float x : hfMatrix(kMlaHeads * kValue, kKvLora, 200))
    putFloat(v, x);
  f.tensor("blk.0.attn_k_b.weight", {uint64_t(kNope), uint64_t(kKvLora), uint64_t(kMlaHeads)},
           GgmlType::F32, k);
  if (skip != "attn_v_b")
    f.tensor("blk.0.attn_v_b.weight", {uint64_t(kKvLora), uint64_t(kValue), uint64_t(kMlaHeads)},
             GgmlType::F32, v);
  return f;
}

} // namespace

TEST(GgufModel, Deepseek2IsTransformersLatentAttentionFromLlamaCppsMqa) {
  std::string path = writeTemp(deepseek2File().bytes(), "deepseek2"), error;
  auto model = GgufModel::open(path, error);
  ASSERT_NE(model, nullptr) << error;
  auto config = nlohmann::json::parse(model->configJson());
  EXPECT_EQ(config["model_type"], "deepseek_v2");
  EXPECT_EQ(config["num_key_value_heads"], kMlaHeads); // not the file's 1
  EXPECT_TRUE(config["q_lora_rank"].is_null());         // no q_lora_rank: q_proj
  EXPECT_EQ(config["kv_lora_rank"], kKvLora);
  EXPECT_EQ(config["qk_nope_head_dim"], kNope);
  EXPECT_EQ(config["qk_rope_head_dim"], kRope);
  EXPECT_EQ(config["v_head_dim"], kValue);
  EXPECT_EQ(config["first_k_dense_replace"], 1);
  EXPECT_EQ(config["n_routed_experts"], 4);
  EXPECT_EQ(config["n_shared_experts"], 0);
  EXPECT_EQ(config["topk_method"], "greedy");
  EXPECT_EQ(config["rope_parameters"]["rope_type"], "default");

  // kv_b_proj [H * (nope + v), kv_lora]: head h's row j < nope is column j of attn_k_b's head
  // (its rows are the kv_lora inputs), row nope + r attn_v_b's row r.
  const std::string name = "model.layers.0.self_attn.kv_b_proj.weight";
  const std::vector<int64_t> shape = {kMlaHeads * (kNope + kValue), kKvLora};
  std::vector<float> all(size_t(shape[0] * shape[1]), -1.0f);
  uint64_t bytesRead = 0;
  ASSERT_TRUE(model->read(name, shape, SliceSpec(), all.data(), bytesRead, error)) << error;
  for (int64_t h = 0; h < kMlaHeads; ++h)
    for (int64_t r = 0; r < kNope + kValue; ++r)
      for (int64_t c = 0; c < kKvLora; ++c)
        EXPECT_EQ(all[size_t((h * (kNope + kValue) + r) * kKvLora + c)],
                  r < kNope ? hfValue(h * kKvLora + c, r, 100)
                            : hfValue(h * kValue + r - kNope, c, 200))
            << h << " " << r << " " << c;
  // Rank 1 of 2 by rows (colwise by heads): head 1 alone.
  SliceSpec second;
  second.dim = 0;
  second.offsets = {0};
  second.sizes = {shape[0]};
  second.chunks = 2;
  second.piece = 1;
  std::vector<float> mine(size_t(shape[0] * shape[1] / 2), -1.0f);
  ASSERT_TRUE(model->read(name, shape, second, mine.data(), bytesRead, error)) << error;
  EXPECT_TRUE(std::equal(mine.begin(), mine.end(), all.begin() + long(mine.size())));
}

TEST(GgufModel, Deepseek2RefusesWhatLlamaCppComputesOtherwise) {
  std::string error = openError(deepseek2File("expert_group_count=2"), "deepseek2-groups");
  EXPECT_NE(error.find("deepseek2.expert_group_count"), std::string::npos) << error;
  error = openError(deepseek2File("expert_gating_func=2"), "deepseek2-sigmoid");
  EXPECT_NE(error.find("deepseek2.expert_gating_func"), std::string::npos) << error;
  ModelFile norm = deepseek2File();
  norm.key("deepseek2.expert_weights_norm", GgufValueType::Bool) += char(1);
  error = openError(norm, "deepseek2-norm");
  EXPECT_NE(error.find("deepseek2.expert_weights_norm"), std::string::npos) << error;
  error = openError(deepseek2File("attention.key_length_mla=2", "attention.key_length_mla"),
                    "deepseek2-no-nope");
  EXPECT_NE(error.find("leaves no dimensions without RoPE"), std::string::npos) << error;
  error = openError(deepseek2File("", "attention.kv_lora_rank"), "deepseek2-no-rank");
  EXPECT_NE(error.find("deepseek2.attention.kv_lora_rank"), std::string::npos) << error;
  error = openError(deepseek2File("", "attn_v_b"), "deepseek2-no-v-b");
  EXPECT_NE(error.find("no attn_v_b"), std::string::npos) << error;
}

TEST(GgufModel, Llama4IsReadAsLlamaCppReadsIt) {
  // Two layers, experts every second; the experts transposed as the converter writes them.
  constexpr int64_t experts = 2, width = 4, dense = 6;
  auto file = [&](uint32_t expertCount, int64_t window) {
    ModelFile f = llamaMetadata("llama4");
    f.u32("llama4.expert_count", expertCount);
    f.u32("llama4.expert_used_count", 1);
    f.u32("llama4.feed_forward_length", dense);
    f.u32("llama4.expert_feed_forward_length", width);
    f.u32("llama4.interleave_moe_layer_step", 2);
    if (window >= 0)
      f.u32("llama4.attention.sliding_window", uint32_t(window));
    std::string gate, up, down;
    for (float v : hfMatrix(experts * width, kHidden, 1000))
      putFloat(gate, v);
    for (float v : hfMatrix(experts * width, kHidden, 2000))
      putFloat(up, v);
    for (float v : hfMatrix(experts * kHidden, width, 3000))
      putFloat(down, v);
    f.tensor("blk.1.ffn_gate_exps.weight", {uint64_t(kHidden), uint64_t(width), uint64_t(experts)},
             GgmlType::F32, gate);
    f.tensor("blk.1.ffn_up_exps.weight", {uint64_t(kHidden), uint64_t(width), uint64_t(experts)},
             GgmlType::F32, up);
    f.tensor("blk.1.ffn_down_exps.weight",
             {uint64_t(width), uint64_t(kHidden), uint64_t(experts)}, GgmlType::F32, down);
    return f;
  };
  std::string path = writeTemp(file(16, -1).bytes(), "llama4"), error;
  auto model = GgufModel::open(path, error);
  ASSERT_NE(model, nullptr) << error;
  auto config = nlohmann::json::parse(model->configJson());
  EXPECT_EQ(config["model_type"], "llama4_text");
  EXPECT_EQ(config["intermediate_size_mlp"], dense);
  EXPECT_EQ(config["intermediate_size"], width);
  EXPECT_EQ(config["interleave_moe_layer_step"], 2);
  EXPECT_EQ(config["num_local_experts"], 16);
  EXPECT_EQ(config["use_qk_norm"], true);
  EXPECT_FALSE(config.contains("no_rope_layers")); // Llama4TextConfig's (and llama.cpp's)

  // gate_up_proj [E, H, 2I]: column i < I of row h is gate's (i, h), column I + i up's.
  std::vector<float> all(size_t(experts * kHidden * 2 * width), -1.0f);
  uint64_t bytesRead = 0;
  ASSERT_TRUE(model->read("model.layers.1.feed_forward.experts.gate_up_proj",
                          {experts, kHidden, 2 * width}, SliceSpec(), all.data(), bytesRead,
                          error))
      << error;
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t h = 0; h < kHidden; ++h)
      for (int64_t j = 0; j < 2 * width; ++j)
        EXPECT_EQ(all[size_t((e * kHidden + h) * 2 * width + j)],
                  hfValue(e * width + j % width, h, j < width ? 1000 : 2000))
            << e << " " << h << " " << j;
  std::vector<float> down(size_t(experts * width * kHidden), -1.0f);
  ASSERT_TRUE(model->read("model.layers.1.feed_forward.experts.down_proj",
                          {experts, width, kHidden}, SliceSpec(), down.data(), bytesRead, error))
      << error;
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t i = 0; i < width; ++i)
      for (int64_t h = 0; h < kHidden; ++h)
        EXPECT_EQ(down[size_t((e * width + i) * kHidden + h)], hfValue(e * kHidden + h, i, 3000));

  // 128 experts (Maverick): no q/k norm; a window of 0 (MobileLLM): RoPE on every layer, none
  // chunked.
  path = writeTemp(file(128, 0).bytes(), "llama4-128");
  model = GgufModel::open(path, error);
  ASSERT_NE(model, nullptr) << error;
  config = nlohmann::json::parse(model->configJson());
  EXPECT_EQ(config["use_qk_norm"], false);
  EXPECT_EQ(config["no_rope_layers"], nlohmann::json::array({1}));
  EXPECT_EQ(config["layer_types"], nlohmann::json::array({"full_attention"}));
}

TEST(GgufModel, FusedGateUpExpertsAreRead) {
  // The converter's --fuse-gate-up-exps: ffn_gate_up_exps [E, 2I, H], each expert's gate rows
  // then its up rows, which is a qwen3moe's gate_up_proj as it is and a llama4's transposed.
  constexpr int64_t experts = 2, width = 4;
  auto file = [&](const std::string &architecture) {
    ModelFile f = llamaMetadata(architecture);
    f.u32(architecture + ".expert_count", experts);
    f.u32(architecture + ".expert_used_count", 1);
    f.u32(architecture + ".expert_feed_forward_length", width);
    std::string bytes;
    for (float v : hfMatrix(experts * 2 * width, kHidden, 1000))
      putFloat(bytes, v);
    f.tensor("blk.0.ffn_gate_up_exps.weight",
             {uint64_t(kHidden), uint64_t(2 * width), uint64_t(experts)}, GgmlType::F32, bytes);
    return f;
  };
  uint64_t bytesRead = 0;
  std::string error;
  auto qwen = GgufModel::open(writeTemp(file("qwen3moe").bytes(), "fused-qwen3moe"), error);
  ASSERT_NE(qwen, nullptr) << error;
  std::vector<float> all(size_t(experts * 2 * width * kHidden), -1.0f);
  ASSERT_TRUE(qwen->read("model.layers.0.mlp.experts.gate_up_proj", {experts, 2 * width, kHidden},
                         SliceSpec(), all.data(), bytesRead, error))
      << error;
  EXPECT_EQ(all, hfMatrix(experts * 2 * width, kHidden, 1000));

  auto llama4 = GgufModel::open(writeTemp(file("llama4").bytes(), "fused-llama4"), error);
  ASSERT_NE(llama4, nullptr) << error;
  ASSERT_TRUE(llama4->read("model.layers.0.feed_forward.experts.gate_up_proj",
                           {experts, kHidden, 2 * width}, SliceSpec(), all.data(), bytesRead,
                           error))
      << error;
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t h = 0; h < kHidden; ++h)
      for (int64_t j = 0; j < 2 * width; ++j)
        EXPECT_EQ(all[size_t((e * kHidden + h) * 2 * width + j)],
                  hfValue(e * 2 * width + j, h, 1000));

  error = openError(file("gpt-oss"), "fused-gpt-oss");
  EXPECT_NE(error.find("--fuse-gate-up-exps"), std::string::npos) << error;
}

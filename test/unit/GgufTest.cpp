// The GGUF reader (runtime/weights/gguf.cpp) on files written here: a small
// valid file parsed in full, every truncation of it refused, and hostile
// headers each refused with an error naming the field. Dequantization is
// compared with gguf-py in test/Tools/gguf-*.test.
#include "tpcrt/gguf.h"

#include "GgufWriter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace tpcrt;

using tpc::test::put32;
using tpc::test::put64;
using tpc::test::putString;
using Writer = tpc::test::GgufWriter;

namespace {

std::string writeTemp(const std::string &bytes, const std::string &name = "t.gguf") {
  return tpc::test::writeTemp(bytes, "gguf-test-" + name);
}

/// The valid file the tests start from: every value type, nested arrays, an F32
/// and a Q8_0 tensor.
Writer validFile() {
  Writer w;
  putString(w.key("general.architecture", GgufValueType::String), "llama");
  w.key("u8", GgufValueType::U8) += char(200);
  w.key("i8", GgufValueType::I8) += char(-5);
  std::string &u16 = w.key("u16", GgufValueType::U16);
  u16 += char(0x34), u16 += char(0x12);
  std::string &i16 = w.key("i16", GgufValueType::I16);
  i16 += char(0xff), i16 += char(0xff);
  put32(w.key("u32", GgufValueType::U32), 4000000000u);
  put32(w.key("i32", GgufValueType::I32), uint32_t(-7));
  float f = 1.5f;
  uint32_t fbits;
  std::memcpy(&fbits, &f, 4);
  put32(w.key("f32", GgufValueType::F32), fbits);
  w.key("bool", GgufValueType::Bool) += char(1);
  put64(w.key("u64", GgufValueType::U64), UINT64_MAX);
  put64(w.key("i64", GgufValueType::I64), uint64_t(INT64_MIN));
  double d = -0.25;
  uint64_t dbits;
  std::memcpy(&dbits, &d, 8);
  put64(w.key("f64", GgufValueType::F64), dbits);
  std::string &tokens = w.key("tokenizer.ggml.tokens", GgufValueType::Array);
  put32(tokens, uint32_t(GgufValueType::String));
  put64(tokens, 3);
  for (const char *t : {"a", "", "<s>"})
    putString(tokens, t);
  std::string &ints = w.key("ints", GgufValueType::Array);
  put32(ints, uint32_t(GgufValueType::I32));
  put64(ints, 2);
  put32(ints, uint32_t(-1)), put32(ints, 9);
  std::string &nested = w.key("nested", GgufValueType::Array);
  put32(nested, uint32_t(GgufValueType::Array));
  put64(nested, 2);
  for (int i = 0; i < 2; ++i) {
    put32(nested, uint32_t(GgufValueType::F32));
    put64(nested, 1);
    put32(nested, fbits);
  }
  put32(w.key("general.alignment", GgufValueType::U32), 32);
  // "a": F32 ne [4, 2] (HF shape [2, 4]); "b": one Q8_0 block at data
  // offset 32.
  w.tensor("a", {4, 2}, GgmlType::F32, 0);
  w.tensor("b", {32}, GgmlType::Q8_0, 32);
  for (int i = 0; i < 8; ++i) {
    float v = float(i) - 3.5f;
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    put32(w.data, bits);
  }
  w.data += char(0x00), w.data += char(0x38); // f16 0.5
  for (int i = 0; i < 32; ++i)
    w.data += char(i - 16);
  return w;
}

std::string openError(const std::string &bytes,
                      const GgufLimits &limits = GgufLimits()) {
  std::string path = writeTemp(bytes), error;
  std::unique_ptr<GgufFile> file = GgufFile::open(path, error, limits);
  EXPECT_EQ(file, nullptr) << "opened";
  EXPECT_EQ(error.rfind("GGUF file " + path + ": ", 0), 0u) << error;
  return error.substr(
      std::min(error.size(), ("GGUF file " + path + ": ").size()));
}

TEST(Gguf, ReadsEveryValueTypeAndTensors) {
  std::string path = writeTemp(validFile().bytes()), error;
  std::unique_ptr<GgufFile> file = GgufFile::open(path, error);
  ASSERT_TRUE(file) << error;
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->keys().size(), 16u);
  std::string s;
  ASSERT_TRUE(file->getString("general.architecture", s, error));
  EXPECT_EQ(s, "llama");
  int64_t i = 0;
  EXPECT_TRUE(file->getInt("u8", i, error) && i == 200);
  EXPECT_TRUE(file->getInt("i8", i, error) && i == -5);
  EXPECT_TRUE(file->getInt("u16", i, error) && i == 0x1234);
  EXPECT_TRUE(file->getInt("i16", i, error) && i == -1);
  EXPECT_TRUE(file->getInt("u32", i, error) && i == 4000000000);
  EXPECT_TRUE(file->getInt("i32", i, error) && i == -7);
  EXPECT_TRUE(file->getInt("i64", i, error) && i == INT64_MIN);
  // Range checks: u64's maximum is no int64_t; 4e9 is outside [0, 2^31).
  EXPECT_FALSE(file->getInt("u64", i, error));
  EXPECT_NE(error.find("metadata 'u64' is 18446744073709551615, outside"),
            std::string::npos);
  EXPECT_FALSE(file->getInt("u32", i, error, 0, INT32_MAX));
  EXPECT_FALSE(file->getInt("i8", i, error, 0, 10));
  double f = 0;
  EXPECT_TRUE(file->getFloat("f32", f, error) && f == 1.5);
  EXPECT_TRUE(file->getFloat("f64", f, error) && f == -0.25);
  bool b = false;
  EXPECT_TRUE(file->getBool("bool", b, error) && b);
  std::vector<std::string> tokens;
  ASSERT_TRUE(file->getStrings("tokenizer.ggml.tokens", tokens, error));
  EXPECT_EQ(tokens, (std::vector<std::string>{"a", "", "<s>"}));
  std::vector<int64_t> ints;
  ASSERT_TRUE(file->getInts("ints", ints, error));
  EXPECT_EQ(ints, (std::vector<int64_t>{-1, 9}));
  const GgufValue *nested = file->find("nested");
  ASSERT_TRUE(nested);
  ASSERT_EQ(nested->items.size(), 2u);
  EXPECT_EQ(nested->items[1].elementType, GgufValueType::F32);
  EXPECT_EQ(nested->items[1].words.size(), 1u);
  // Wrong types and missing keys are named.
  EXPECT_FALSE(file->getString("u8", s, error));
  EXPECT_NE(error.find("metadata 'u8' is a u8, not a string"),
            std::string::npos)
      << error;
  EXPECT_FALSE(file->getStrings("ints", tokens, error));
  EXPECT_NE(error.find("is a array of i32, not an array of strings"),
            std::string::npos)
      << error;
  EXPECT_FALSE(file->getInt("missing", i, error));
  EXPECT_NE(error.find("no metadata 'missing'"), std::string::npos);

  ASSERT_EQ(file->tensors().size(), 2u);
  const GgufTensor *a = file->tensor("a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->ne, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(a->bytes, 32u);
  EXPECT_EQ(a->rows, 2);
  EXPECT_EQ(a->offset, file->dataOffset());
  std::vector<float> values;
  ASSERT_TRUE(file->readRowsF32("a", 1, 1, values, error)) << error;
  EXPECT_EQ(values, (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f}));
  EXPECT_FALSE(file->readRowsF32("a", 1, 2, values, error));
  EXPECT_NE(error.find("tensor a: rows [1, +2) are not inside its 2"),
            std::string::npos);
  const GgufTensor *q = file->tensor("b");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->bytes, 34u);
  ASSERT_TRUE(file->readRowsF32("b", 0, 1, values, error)) << error;
  ASSERT_EQ(values.size(), 32u);
  for (int j = 0; j < 32; ++j)
    EXPECT_EQ(values[j], float(j - 16) * 0.5f);
  std::vector<uint8_t> raw;
  ASSERT_TRUE(file->readRows("b", 0, 1, raw, error));
  EXPECT_EQ(raw.size(), 34u);
}

TEST(Gguf, VersionTwoReads) {
  Writer w = validFile();
  w.version = 2;
  std::string path = writeTemp(w.bytes()), error;
  ASSERT_TRUE(GgufFile::open(path, error)) << error;
}

// Every prefix of a valid file is an error (the tensor data too lies in the
// file), never a crash or a read past the end.
TEST(Gguf, EveryTruncationIsAnError) {
  std::string bytes = validFile().bytes();
  for (size_t size = 0; size < bytes.size(); ++size) {
    std::string path = writeTemp(bytes.substr(0, size), "cut.gguf"), error;
    EXPECT_FALSE(GgufFile::open(path, error)) << "opened at " << size;
    EXPECT_FALSE(error.empty());
  }
}

TEST(Gguf, HeaderErrors) {
  EXPECT_EQ(openError("GGUX" + std::string(20, '\0')),
            "not a GGUF file (the magic is not \"GGUF\")");
  Writer w = validFile();
  w.version = 1;
  EXPECT_EQ(openError(w.bytes()), "version 1 is not one tpc reads (2 and 3)");
  w.version = 3u << 24; // version 3, big-endian
  EXPECT_NE(openError(w.bytes()).find("big-endian"), std::string::npos);
  w = Writer();
  w.rawCounts = true;
  w.tensorCountOverride = uint64_t(1) << 60;
  EXPECT_EQ(openError(w.bytes()),
            "tensor count 1152921504606846976 exceeds the limit of 1048576");
  w.tensorCountOverride = 0;
  w.kvCountOverride = UINT64_MAX;
  EXPECT_EQ(openError(w.bytes()),
            "metadata count 18446744073709551615 exceeds the limit of 65536");
  w.kvCountOverride = 3; // claims pairs the file does not hold
  w.alignment = 1;       // (no padding that would read as an empty key)
  EXPECT_EQ(openError(w.bytes()), "metadata 0: the key: the string length runs "
                                  "past the end of the file (24 bytes)");
}

TEST(Gguf, MetadataErrors) {
  // A string of 2^40 bytes in element 17 of an array: an error, not an
  // allocation.
  Writer w;
  std::string &tokens = w.key("tokenizer.ggml.tokens", GgufValueType::Array);
  put32(tokens, uint32_t(GgufValueType::String));
  put64(tokens, 20);
  for (int i = 0; i < 17; ++i)
    putString(tokens, "t");
  put64(tokens, uint64_t(1) << 40);
  tokens += std::string(24, 'x');
  std::string bytes = w.bytes();
  EXPECT_EQ(openError(bytes),
            "metadata 'tokenizer.ggml.tokens' element 17: string of "
            "1099511627776 bytes runs past the end of the file (" +
                std::to_string(bytes.size()) + " bytes)");

  // An array claiming more elements than the file could hold, or than the
  // limit.
  w = Writer();
  std::string &big = w.key("big", GgufValueType::Array);
  put32(big, uint32_t(GgufValueType::U32));
  put64(big, uint64_t(1) << 62);
  EXPECT_NE(openError(w.bytes()).find(
                "metadata 'big': array of 4611686018427387904 u32 "
                "elements runs past the end of the file"),
            std::string::npos);
  w = Writer();
  std::string &many = w.key("many", GgufValueType::Array);
  put32(many, uint32_t(GgufValueType::U8));
  put64(many, 100);
  many += std::string(100, '\0');
  GgufLimits limits;
  limits.maxArrayElements = 99;
  EXPECT_EQ(openError(w.bytes(), limits),
            "metadata 'many': array of 100 elements takes the "
            "metadata past the limit of 99 array elements");
  // Strings and keys over their limits.
  w = Writer();
  putString(w.key("s", GgufValueType::String), std::string(100, 'x'));
  limits = GgufLimits();
  limits.maxStringBytes = 99;
  EXPECT_EQ(openError(w.bytes(), limits),
            "metadata 's': string of 100 bytes exceeds the limit of 99");
  limits = GgufLimits();
  limits.maxNameBytes = 0;
  EXPECT_EQ(openError(w.bytes(), limits),
            "metadata 0: the key: string of 1 bytes exceeds the limit of 0");

  // Unknown value types, at the top and inside an array.
  w = Writer();
  w.key("odd", GgufValueType(13));
  EXPECT_EQ(openError(w.bytes()), "metadata 'odd': unknown value type 13");
  w = Writer();
  std::string &oddArray = w.key("odd", GgufValueType::Array);
  put32(oddArray, 99);
  put64(oddArray, 1);
  EXPECT_EQ(openError(w.bytes()),
            "metadata 'odd': unknown array element type 99");

  // Arrays nested past the limit.
  w = Writer();
  std::string &deep = w.key("deep", GgufValueType::Array);
  for (int i = 0; i < 9; ++i) {
    put32(deep, uint32_t(GgufValueType::Array));
    put64(deep, 1);
  }
  put32(deep, uint32_t(GgufValueType::U8));
  put64(deep, 0);
  EXPECT_EQ(openError(w.bytes()),
            "metadata 'deep' element 0 element 0 element 0 element 0 element 0 "
            "element 0 "
            "element 0 element 0: arrays nested deeper than the limit of 8");

  // A key given twice.
  w = Writer();
  w.key("k", GgufValueType::U8) += char(1);
  w.key("k", GgufValueType::U8) += char(2);
  EXPECT_EQ(openError(w.bytes()), "metadata 'k' is given twice");

  // general.alignment: 0, 3, a u64.
  for (uint32_t bad : {0u, 3u}) {
    w = Writer();
    put32(w.key("general.alignment", GgufValueType::U32), bad);
    EXPECT_EQ(openError(w.bytes()), "metadata 'general.alignment' is " +
                                        std::to_string(bad) +
                                        ", not a power of two");
  }
  w = Writer();
  put64(w.key("general.alignment", GgufValueType::U64), 32);
  EXPECT_EQ(openError(w.bytes()),
            "metadata 'general.alignment' is a u64, not a u32");
}

/// The valid file with its second tensor replaced by `b`.
std::string withTensor(void (*b)(Writer &)) {
  Writer w = validFile();
  w.infos.clear();
  w.tensorCount = 0;
  w.tensor("a", {4, 2}, GgmlType::F32, 0);
  b(w);
  return w.bytes();
}

TEST(Gguf, TensorErrors) {
  EXPECT_EQ(openError(withTensor(
                [](Writer &w) { w.tensor("b", {32}, GgmlType::Q8_0, 4096); })),
            "tensor b: its 34 bytes at data offset 4096 run past the end of "
            "the file (642 "
            "bytes, data from byte 576)");
  EXPECT_EQ(openError(withTensor(
                [](Writer &w) { w.tensor("b", {32}, GgmlType::Q8_0, 16); })),
            "tensor b: offset 16 is not a multiple of the alignment 32");
  EXPECT_EQ(openError(withTensor(
                [](Writer &w) { w.tensor("b", {32}, GgmlType(5), 32); })),
            "tensor b: unknown ggml type id 5");
  EXPECT_EQ(openError(withTensor([](Writer &w) {
              w.tensor("b", {1, 1, 1, 1, 32}, GgmlType::F32, 32);
            })),
            "tensor b: n_dims 5 is not between 1 and 4");
  EXPECT_EQ(openError(withTensor([](Writer &w) {
              w.tensor("b", {32, 0}, GgmlType::F32, 32);
            })),
            "tensor b: ne[1] is 0");
  EXPECT_EQ(openError(withTensor([](Writer &w) {
              w.tensor("b", {uint64_t(1) << 32, uint64_t(1) << 32},
                       GgmlType::F32, 32);
            })),
            "tensor b: ne[1] of 4294967296 makes the element count overflow");
  EXPECT_EQ(openError(withTensor([](Writer &w) {
              w.tensor("b", {uint64_t(1) << 62}, GgmlType::F64, 32);
            })),
            "tensor b: 4611686018427387904 F64 elements overflow a byte count");
  EXPECT_EQ(openError(withTensor(
                [](Writer &w) { w.tensor("b", {48}, GgmlType::Q8_0, 32); })),
            "tensor b: ne[0] 48 is not a multiple of Q8_0's block of 32");
  EXPECT_EQ(openError(withTensor(
                [](Writer &w) { w.tensor("a", {4}, GgmlType::F32, 0); })),
            "tensor a: the name is given twice (tensors 0 and 1)");
  GgufLimits limits;
  limits.maxTensors = 1;
  EXPECT_EQ(openError(validFile().bytes(), limits),
            "tensor count 2 exceeds the limit of 1");
}

// A type the table knows but tpc does not dequantize is listed, and reading it
// as fp32 names it.
TEST(Gguf, UnreadTypeIsListedAndNamed) {
  std::string path = writeTemp(withTensor([](Writer &w) {
    w.tensor("blk.0.attn_q.weight", {256}, GgmlType::IQ2_XXS, 32);
    w.data += std::string(32, '\0'); // 66 bytes from data offset 32
  })),
              error;
  std::unique_ptr<GgufFile> file = GgufFile::open(path, error);
  ASSERT_TRUE(file) << error;
  const GgufTensor *t = file->tensor("blk.0.attn_q.weight");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->bytes, 66u);
  std::vector<float> out;
  EXPECT_FALSE(file->readRowsF32(t->name, 0, 1, out, error));
  EXPECT_NE(
      error.find(
          "tensor blk.0.attn_q.weight has type IQ2_XXS, which tpc does not "
          "read "
          "(it reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, "
          "Q6_K, MXFP4)"),
      std::string::npos)
      << error;
}

// The type table agrees with ggml's block sizes where they are easy to state.
TEST(Gguf, TypeTable) {
  EXPECT_EQ(ggmlTypeInfo(GgmlType::Q4_K)->blockBytes, 2u + 2u + 12u + 128u);
  EXPECT_EQ(ggmlTypeInfo(GgmlType::Q6_K)->blockBytes, 128u + 64u + 16u + 2u);
  EXPECT_EQ(ggmlTypeInfo(GgmlType::Q5_1)->blockBytes, 2u + 2u + 4u + 16u);
  EXPECT_EQ(ggmlTypeInfo(4), nullptr); // Q4_2, removed from ggml
  EXPECT_STREQ(ggmlTypeInfo(30)->name, "BF16");
  std::string error;
  float out[32];
  uint8_t block[34] = {};
  EXPECT_FALSE(dequantize(GgmlType::Q8_0, block, 16, out, error));
  EXPECT_EQ(error, "16 elements are not whole Q8_0 blocks of 32");
}

} // namespace

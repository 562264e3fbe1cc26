// The lowering's runtime calls against tpcrt/calls.def: the table as the lowering reads it, an
// optional argument left out before a given one spelled with the table's value, and a call
// out of the table's order refused at its op; a forward's and main()'s alike, main()'s as the
// real lowering of main() makes them.
#include "../../lib/Target/Lowering/Lowering.h"
#include "tpc/Target/TargetInfo.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <set>

using namespace mlir;
using namespace tpc::target;
using namespace tpc::target::lowering;

TEST(CallsTable, OptionalArgumentsAreTrailingAndSpellable) {
  ASSERT_FALSE(allCalls().empty());
  for (const CallSpec &call : allCalls()) {
    bool optional = false;
    for (const CallArg &arg : call.args) {
      EXPECT_FALSE(optional && !arg.fallback)
          << call.name.str() << ": '" << arg.name.str() << "' is required after an optional one";
      optional |= arg.fallback.has_value();
      // The lowering spells these as numbers (Call::fillOptional).
      if (arg.fallback && (arg.type == "double" || arg.type == "int64_t")) {
        EXPECT_NO_THROW((void)std::stod(arg.fallback->str())) << call.name.str();
      }
    }
  }
  const CallSpec *rotary = lookupCall("rotary");
  ASSERT_NE(rotary, nullptr);
  EXPECT_EQ(rotary->args.back().name, "unrotated");
  EXPECT_EQ(lookupCall("rotary2"), nullptr);
}

// lookupCall finds a call by its name alone, whoever makes it.
TEST(CallsTable, NamesAreUnique) {
  std::set<std::string> names;
  for (const CallSpec &call : allCalls())
    EXPECT_TRUE(names.insert(call.name.str()).second) << call.name.str() << " is described twice";
}

// main() passes the spec newSpec returned first to every other call (MainBuilder::onSpec).
TEST(CallsTable, MainsCallsTakeTheSpecFirst) {
  for (const CallSpec &call : allCalls()) {
    if (call.kind == CallKind::forward)
      continue;
    bool takesSpec = !call.args.empty() && call.args.front().name == "spec";
    EXPECT_EQ(takesSpec, call.name != "newSpec") << call.name.str();
    if (takesSpec) {
      EXPECT_EQ(call.args.front().type, "ModelSpec *") << call.name.str();
    }
  }
  EXPECT_EQ(lookupCall("newSpec")->kind, CallKind::model);
  EXPECT_EQ(lookupCall("runModel")->kind, CallKind::program);
  EXPECT_EQ(lookupCall("addWeightGroup")->kind, CallKind::program);
  EXPECT_EQ(lookupCall("linear")->kind, CallKind::forward);
}

namespace {

/// A forward with one i64 argument standing for every value a call passes.
class LoweringCalls : public ::testing::Test {
protected:
  LoweringCalls() : builder(&ctx) {
    ctx.loadDialect<tpc::tp::TPDialect, func::FuncDialect, emitc::EmitCDialect>();
    module = ModuleOp::create(builder.getUnknownLoc());
    builder.setInsertionPointToEnd(module->getBody());
    func = func::FuncOp::create(builder, builder.getUnknownLoc(), "f",
                                builder.getFunctionType({builder.getI64Type()}, {}));
    body = func.addEntryBlock();
    lowering = std::make_unique<FunctionLowering>(func, *spelling, params, 1, builder);
    lowering->builder.setInsertionPointToEnd(body);
    v = body->getArgument(0);
    lowering->cx = lowering->n = v;
    ctx.getDiagEngine().registerHandler([&](Diagnostic &d) {
      message = d.str();
      return success();
    });
  }

  /// The literal arguments of the call just emitted, as text (operands as "v").
  std::vector<std::string> lastArgs() {
    std::vector<std::string> out;
    for (Attribute a : cast<emitc::CallOpaqueOp>(body->back()).getArgsAttr()) {
      if (auto i = dyn_cast<IntegerAttr>(a))
        out.push_back(isa<IndexType>(i.getType()) ? "v" : std::to_string(i.getInt()));
      else if (auto f = dyn_cast<FloatAttr>(a))
        out.push_back(std::to_string(f.getValueAsDouble()));
      else
        out.push_back(cast<emitc::OpaqueAttr>(a).getValue().str());
    }
    return out;
  }

  MLIRContext ctx;
  OpBuilder builder;
  OwningOpRef<ModuleOp> module;
  func::FuncOp func;
  Block *body = nullptr;
  std::unique_ptr<Spelling> spelling = makeCpuSpelling();
  llvm::DenseMap<StringAttr, int64_t> params;
  std::unique_ptr<FunctionLowering> lowering;
  Value v;
  std::string message; // the last diagnostic
};

} // namespace

TEST_F(LoweringCalls, SkippedOptionalArgumentsTakeTheTablesValues) {
  Call c = lowering->call(func, "rotary");
  c.value("x", v).integer("rows", 2).integer("cols", 8).integer("headDim", 4);
  c.pointer("invFreq", Value()).value("positions", v).value("out", v).boolean("interleaved", true);
  c.emit(); // a void call: no value
  ASSERT_FALSE(lowering->mismatchedCall);
  std::vector<std::string> expected = {"v", "v", "2",        "8",   "4",
                                       "nullptr", "v", "v", "1.000000", "true"};
  EXPECT_EQ(lastArgs(), expected);
  EXPECT_EQ(cast<emitc::CallOpaqueOp>(body->back()).getCallee(), "tpcrt::rotary");
}

TEST_F(LoweringCalls, AnArgumentOutOfOrderIsAnErrorAtTheOp) {
  Call c = lowering->call(func, "linear");
  c.value("x", v).integer("cols", 8);
  EXPECT_FALSE(c.emit());
  EXPECT_TRUE(lowering->mismatchedCall);
  EXPECT_EQ(message, "lowers to a runtime call 'linear' that does not match tpcrt/calls.def: it "
                     "passes 'cols' where calls.def has 'rows'");
}

TEST_F(LoweringCalls, ARequiredArgumentLeftOutIsAnError) {
  Call c = lowering->call(func, "slot");
  c.integer("offset", 0);
  EXPECT_FALSE(c.emit(lowering->actPtr()));
  EXPECT_EQ(message, "lowers to a runtime call 'slot' that does not match tpcrt/calls.def: it "
                     "leaves out 'n', which calls.def requires");
}

TEST_F(LoweringCalls, AModelDescriptionCallThatDoesNotMatchIsRefused) {
  bool failed = false;
  Call c(lowering->builder, *spelling, *module, "addEosId", failed);
  c.integer("id", 7); // without the spec, which calls.def lists first
  EXPECT_FALSE(c.emit());
  EXPECT_TRUE(failed);
  EXPECT_EQ(message, "lowers to a runtime call 'addEosId' that does not match tpcrt/calls.def: "
                     "it passes 'id' where calls.def has 'spec'");
}

TEST_F(LoweringCalls, AForwardsCallsAndMainsAreApart) {
  bool failed = false;
  Call(lowering->builder, *spelling, *module, "linear", failed).emit();
  EXPECT_TRUE(failed);
  EXPECT_EQ(message, "lowers to a runtime call 'linear' that does not match tpcrt/calls.def: "
                     "it is not one of calls.def's calls of main()");
  lowering->call(func, "addEosId").integer("spec", 0).emit();
  EXPECT_TRUE(lowering->mismatchedCall);
  EXPECT_EQ(message, "lowers to a runtime call 'addEosId' that does not match tpcrt/calls.def: "
                     "it is not one of calls.def's calls of a forward");
}

// The model's description is tpcrt's on every target; the rest of main() the target's own.
TEST_F(LoweringCalls, MainsCallsLiveWhereTheTableSays) {
  std::unique_ptr<Spelling> cuda = makeCudaSpelling();
  bool failed = false;
  auto callee = [&](const Spelling &target, StringRef name) {
    Call c(lowering->builder, target, *module, name, failed);
    c.value("spec", v);
    if (name == "setForwards")
      c.text("forward", "forward").text("sequenceParallel", "nullptr");
    else
      c.integer("id", 7);
    c.emit();
    return cast<emitc::CallOpaqueOp>(body->back()).getCallee().str();
  };
  EXPECT_EQ(callee(*spelling, "addEosId"), "tpcrt::addEosId");
  EXPECT_EQ(callee(*cuda, "addEosId"), "tpcrt::addEosId");
  EXPECT_EQ(callee(*spelling, "setForwards"), "tpcrt::setForwards");
  EXPECT_EQ(callee(*cuda, "setForwards"), "tpcrt::cuda::setForwards");
  EXPECT_FALSE(failed) << message;
}

namespace {

// Two decided programs (as tp-plan-arena leaves them) whose main()s make every call of main()
// that calls.def describes between them: on the CPU, a weight held in bf16, MLA's value heads,
// the EOS ids, the context, the KV cache's blocks and a sequence-parallel forward; on the
// device, a "linears" unit (a weight group) and the attention's bounds; with pipeline stages
// (kPipelineProgram below), what says which stage holds what.
constexpr llvm::StringLiteral kCpuProgram = R"mlir(
module @tiny attributes {tp.mesh = #tp.mesh<tp = 1>, tp.eos_token_ids = array<i64: 7>,
                         tp.max_position_embeddings = 64 : i64, tp.kv_block_size = 16 : i64} {
  tp.param @"embed.weight" {storage = #tp.storage<bf16>} : tensor<32x32xf32>
  tp.param @"q.weight" : tensor<32x32xf32>
  tp.param @"k.weight" : tensor<16x32xf32>
  tp.param @"v.weight" : tensor<8x32xf32>
  func.func @forward(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> tensor<?x16xf32>
      attributes {tp.arena_size = 112 : i64} {
    %we = tp.weight @"embed.weight" : tensor<32x32xf32>
    %h = tp.embedding "embed" %ids, %we {tp.arena = array<i64: 0>} : (tensor<?xi64>, tensor<32x32xf32>) -> tensor<?x32xf32>
    %wq = tp.weight @"q.weight" : tensor<32x32xf32>
    %wk = tp.weight @"k.weight" : tensor<16x32xf32>
    %wv = tp.weight @"v.weight" : tensor<8x32xf32>
    %q = tp.linear "q_proj" %h, %wq {tp.arena = array<i64: 32>} : (tensor<?x32xf32>, tensor<32x32xf32>) -> tensor<?x32xf32>
    %k = tp.linear "k_proj" %h, %wk {tp.arena = array<i64: 64>} : (tensor<?x32xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
    %v = tp.linear "v_proj" %h, %wv {tp.arena = array<i64: 80>} : (tensor<?x32xf32>, tensor<8x32xf32>) -> tensor<?x8xf32>
    %o = tp.attention "attn" %q, %k, %v {head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, value_head_dim = 8 : i64, tp.arena = array<i64: 96>} : (tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x8xf32>) -> tensor<?x16xf32>
    return %o : tensor<?x16xf32>
  }
  func.func @forward_sequence_parallel(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> tensor<?x32xf32>
      attributes {tp.arena_size = 32 : i64, tp.sequence_parallel = 1 : i64} {
    %we = tp.weight @"embed.weight" : tensor<32x32xf32>
    %h = tp.embedding "embed" %ids, %we {tp.arena = array<i64: 0>} : (tensor<?xi64>, tensor<32x32xf32>) -> tensor<?x32xf32>
    return %h : tensor<?x32xf32>
  }
}
)mlir";

constexpr llvm::StringLiteral kCudaProgram = R"mlir(
module @tiny attributes {tp.mesh = #tp.mesh<tp = 1>} {
  tp.param @"embed.weight" : tensor<32x32xf32>
  tp.param @"q.weight" : tensor<32x32xf32>
  tp.param @"k.weight" : tensor<16x32xf32>
  tp.param @"v.weight" : tensor<16x32xf32>
  func.func @forward(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> tensor<?x32xf32>
      attributes {tp.arena_size = 128 : i64} {
    %we = tp.weight @"embed.weight" : tensor<32x32xf32>
    %h = tp.embedding "embed" %ids, %we {tp.arena = array<i64: 0>} : (tensor<?xi64>, tensor<32x32xf32>) -> tensor<?x32xf32>
    %wq = tp.weight @"q.weight" : tensor<32x32xf32>
    %wk = tp.weight @"k.weight" : tensor<16x32xf32>
    %wv = tp.weight @"v.weight" : tensor<16x32xf32>
    %u:3 = tp.fused linears -> tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32> attributes {tp.arena = array<i64: 32, 64, 80>} {
      %q = tp.linear "q_proj" %h, %wq : (tensor<?x32xf32>, tensor<32x32xf32>) -> tensor<?x32xf32>
      %k = tp.linear "k_proj" %h, %wk : (tensor<?x32xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
      %v = tp.linear "v_proj" %h, %wv : (tensor<?x32xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
      tp.yield %q, %k, %v : tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32>
    }
    %o = tp.attention "attn" %u#0, %u#1, %u#2 {head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, tp.arena = array<i64: 96>} : (tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x32xf32>
    return %o : tensor<?x32xf32>
  }
}
)mlir";

// A program of two pipeline stages (the CPU's): each stage's parameters, a KV cache with its
// stage, and the second stage's forward.
constexpr llvm::StringLiteral kPipelineProgram = R"mlir(
module @tiny attributes {tp.mesh = #tp.mesh<pp = 2, tp = 1>, tp.stage_layers = array<i64: 1, 1>} {
  tp.param @"embed.weight" {stages = array<i64: 0>} : tensor<32x16xf32>
  tp.param @"out.weight" {stages = array<i64: 1>} : tensor<16x16xf32>
  func.func @forward(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> tensor<?x16xf32>
      attributes {tp.arena_size = 48 : i64} {
    %we = tp.weight @"embed.weight" {tp.stage = 0 : i64} : tensor<32x16xf32>
    %h = tp.embedding "embed" %ids, %we {tp.arena = array<i64: 0>, tp.stage = 0 : i64} : (tensor<?xi64>, tensor<32x16xf32>) -> tensor<?x16xf32>
    %s = tp.transfer %h from 0 to 1 {tp.arena = array<i64: 16>, tp.stage = 1 : i64} : tensor<?x16xf32>
    %o = tp.attention "attn" %s, %s, %s {head_dim = 16 : i64, num_heads = 1 : i64, num_kv_heads = 1 : i64, tp.arena = array<i64: 32>, tp.stage = 1 : i64} : (tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    %wo = tp.weight @"out.weight" {tp.stage = 1 : i64} : tensor<16x16xf32>
    %y = tp.linear "out" %o, %wo {tp.arena = array<i64: 0>, tp.stage = 1 : i64} : (tensor<?x16xf32>, tensor<16x16xf32>) -> tensor<?x16xf32>
    %b = tp.transfer %y from 1 to 0 {tp.arena = array<i64: 16>, tp.stage = 0 : i64} : tensor<?x16xf32>
    return {tp.stage = 0 : i64} %b : tensor<?x16xf32>
  }
}
)mlir";

/// Checks each call of main() in `program` lowered for `target` against calls.def, which the
/// lowering does too: where the callee lives and how many arguments it passes, read from the
/// emitted op. Adds each callee's name to `made`.
void checkMain(MLIRContext &ctx, StringRef program, StringRef target, std::set<std::string> &made) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(program, &ctx);
  ASSERT_TRUE(module) << target.str();
  const TargetInfo *info = findTarget(target);
  (*module)->setAttr(tpc::tp::kTargetAttrName, info->describe(&ctx));
  OwningOpRef<ModuleOp> lowered = lowerToEmitC(*module);
  ASSERT_TRUE(lowered) << target.str() << ": a call of main() does not match calls.def";
  StringRef ns = info->spelling()->ns();
  (*lowered).lookupSymbol<emitc::FuncOp>("main").walk([&](emitc::CallOpaqueOp call) {
    auto [where, name] = call.getCallee().rsplit("::");
    const CallSpec *spec = lookupCall(name);
    ASSERT_TRUE(spec && spec->kind != CallKind::forward) << call.getCallee().str();
    EXPECT_EQ(where, spec->kind == CallKind::model ? StringRef("tpcrt") : ns) << name.str();
    ArrayAttr args = call.getArgsAttr();
    size_t passed = args ? args.size() : call.getNumOperands();
    size_t required = llvm::count_if(spec->args, [](const CallArg &a) { return !a.fallback; });
    EXPECT_GE(passed, required) << name.str();
    EXPECT_LE(passed, spec->args.size()) << name.str();
    made.insert(name.str());
  });
}

} // namespace

TEST(LoweringMain, EveryCallMatchesTheTable) {
  MLIRContext ctx;
  ctx.loadDialect<tpc::tp::TPDialect, func::FuncDialect, emitc::EmitCDialect>();
  std::set<std::string> made;
  checkMain(ctx, kCpuProgram, "cpu", made);
  checkMain(ctx, kCudaProgram, "cuda", made);
  checkMain(ctx, kPipelineProgram, "cpu", made);
  for (const CallSpec &call : allCalls()) {
    if (call.kind != CallKind::forward) {
      EXPECT_TRUE(made.count(call.name.str())) << call.name.str() << ": neither main() makes it";
    }
  }
}

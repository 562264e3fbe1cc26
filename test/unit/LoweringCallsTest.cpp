// The lowering's runtime calls against tpcrt/calls.def: the table as the lowering reads it, an
// optional argument left out before a given one spelled with the table's value, and a call
// out of the table's order refused at its op.
#include "../../lib/Target/Lowering/Lowering.h"

#include "mlir/IR/Diagnostics.h"

#include <gtest/gtest.h>

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

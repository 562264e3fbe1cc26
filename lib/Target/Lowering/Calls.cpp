// The runtime's calls as tpcrt/calls.def describes them, and the builder that checks each
// call the lowering makes against that description, a forward's and main()'s alike: the
// runtime declares its functions from the same lines, so an argument added, dropped or
// reordered on one side is an error on the other, not a program that calls an overload nobody
// meant.
#include "Lowering.h"

#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace tpc::target::lowering;

ArrayRef<CallSpec> tpc::target::lowering::allCalls() {
  static const std::vector<CallSpec> table = [] {
    std::vector<CallSpec> t;
    auto add = [&](CallSpec spec) { t.push_back(std::move(spec)); };
#define TPC_ARG(type, name) CallArg{#type, #name, std::nullopt},
#define TPC_OPT(type, name, value) CallArg{#type, #name, llvm::StringRef(#value)},
#define TPC_CALL(result, name, args) add(CallSpec{#name, {args}, CallKind::forward});
#define TPC_CPU_CALL TPC_CALL
#define TPC_SPEC_CALL(result, name, args) add(CallSpec{#name, {args}, CallKind::model});
#define TPC_TARGET_SPEC_CALL(result, name, args) add(CallSpec{#name, {args}, CallKind::program});
#define TPC_CUDA_SPEC_CALL TPC_TARGET_SPEC_CALL
#include "tpcrt/calls.def"
#undef TPC_ARG
#undef TPC_OPT
#undef TPC_CALL
#undef TPC_CPU_CALL
#undef TPC_SPEC_CALL
#undef TPC_TARGET_SPEC_CALL
#undef TPC_CUDA_SPEC_CALL
    return t;
  }();
  return table;
}

const CallSpec *tpc::target::lowering::lookupCall(StringRef name) {
  const CallSpec *it = llvm::find_if(allCalls(), [&](const CallSpec &c) { return c.name == name; });
  return it == allCalls().end() ? nullptr : it;
}

Args &Args::value(Value v) {
  args.push_back(IntegerAttr::get(IndexType::get(ctx), operands.size()));
  operands.push_back(v);
  return *this;
}

Args &Args::integer(int64_t v) {
  args.push_back(IntegerAttr::get(IntegerType::get(ctx, 64), v));
  return *this;
}

Args &Args::real(double v) {
  args.push_back(FloatAttr::get(Float64Type::get(ctx), v));
  return *this;
}

Args &Args::text(StringRef code) {
  args.push_back(emitc::OpaqueAttr::get(ctx, code));
  return *this;
}

Value tpc::target::lowering::emitCall(OpBuilder &b, Location loc, StringRef callee, Args &args,
                                      Type result) {
  SmallVector<Type> results;
  if (result)
    results.push_back(result);
  auto op = emitc::CallOpaqueOp::create(b, loc, results, callee, args.operands,
                                        b.getArrayAttr(args.args), ArrayAttr());
  return result ? op.getResult(0) : Value();
}

/// A forward's calls and main()'s are apart in calls.def: a call of the one kind that names
/// the other is no call the runtime declares where it is made.
Call::Call(OpBuilder &b, Operation *op, StringRef name, bool forward, bool &failed)
    : builder(b), op(op), name(name.str()), spec(lookupCall(name)), failed(failed),
      args(b.getContext()) {
  if (!spec || (spec->kind == CallKind::forward) != forward)
    mismatch = std::string("is not one of calls.def's calls of ") +
               (forward ? "a forward" : "main()");
}

Call::Call(FunctionLowering &l, Operation *op, StringRef name)
    : Call(l.builder, op, name, /*forward=*/true, l.mismatchedCall) {
  this->l = &l;
  callee = l.callee(name);
  args.value(l.cx);
}

Call::Call(OpBuilder &b, const Spelling &spelling, Operation *op, StringRef name, bool &failed)
    : Call(b, op, name, /*forward=*/false, failed) {
  // The model's description is tpcrt's, whatever the target; the rest is the target's own.
  StringRef ns = spec && spec->kind == CallKind::model ? StringRef("tpcrt") : spelling.ns();
  callee = (ns + "::" + name).str();
}

/// Moves to the argument `name`, spelling the optional ones before it that the caller left
/// out.
Call &Call::next(StringRef argName) {
  if (!mismatch.empty())
    return *this;
  while (at < spec->args.size() && spec->args[at].name != argName && spec->args[at].fallback)
    fillOptional(spec->args[at++]);
  if (at == spec->args.size() || spec->args[at].name != argName)
    mismatch =
        ("passes '" + argName + "' where calls.def has " +
         (at == spec->args.size() ? "no more arguments" : "'" + spec->args[at].name.str() + "'"))
            .str();
  else
    ++at;
  return *this;
}

/// The value calls.def gives an optional argument, in the form the lowering would spell it.
void Call::fillOptional(const CallArg &arg) {
  StringRef value = *arg.fallback;
  if (arg.type == "double")
    args.real(std::stod(value.str()));
  else if (arg.type == "int64_t")
    args.integer(std::stoll(value.str()));
  else
    args.text(value);
}

Call &Call::pointer(StringRef argName, Value v) {
  return v ? value(argName, v) : text(argName, "nullptr");
}

Call &Call::rows(StringRef argName, Value v) {
  assert(l && "rows are a forward's");
  l->addRows(next(argName).args, v);
  return *this;
}

Call &Call::input(Value v, StringRef argName) {
  assert(l && "inputs are a forward's");
  return value(argName, l->ref(v)).rows("rows", v).integer("cols", columns(v));
}

Value Call::emit(Type result) {
  if (mismatch.empty())
    for (const CallArg &arg : ArrayRef(spec->args).drop_front(at))
      if (!arg.fallback) {
        mismatch = ("leaves out '" + arg.name + "', which calls.def requires").str();
        break;
      }
  if (!mismatch.empty()) {
    op->emitError() << "lowers to a runtime call '" << name
                    << "' that does not match tpcrt/calls.def: it " << mismatch;
    failed = true;
    return Value();
  }
  return emitCall(builder, op->getLoc(), callee, args, result);
}

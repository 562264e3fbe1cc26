// The lowering of a decided tp program to EmitC, one spelling per target (lib/Target).
#ifndef TPC_TARGET_PASSES_TD
#define TPC_TARGET_PASSES_TD

include "mlir/Pass/PassBase.td"

def TPLowerToEmitC : Pass<"tp-lower-to-emitc", "::mlir::ModuleOp"> {
  let summary = "Spell a partitioned, decided tp program as EmitC calls into libtpcrt";
  let description = [{
    Reads the module after tp-partition and the decision passes (tp-elide-collectives,
    tp-fuse, tp-group-linears, tp-plan-arena), built for the target its `#tp.target`
    names (tp-set-target, or buildProgram, sets it), and writes the program each rank runs, as
    EmitC: every forward becomes an `emitc.func` with one `emitc.call_opaque` per op, its
    placement spelled out in the arguments (which rank adds a rowwise bias, which vocab rows
    an embedding holds, how a gather puts pieces back) and its output at the offset
    tp-plan-arena recorded; every tp.fused unit becomes a generated kernel (the one place an
    `emitc.verbatim` is used) and its call; `main` describes the model to the runtime. The
    CPU target calls libtpcrt (fp32, OpenBLAS, Gloo), the CUDA target libtpcrt_cuda (bf16,
    cuBLASLt, NCCL); the two differ only in namespace, element type and kernel wrappers.
    Upstream's C++ translator (`mlir-translate --mlir-to-cpp`) prints the result.
  }];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
}

def TPSetTarget : Pass<"tp-set-target", "::mlir::ModuleOp"> {
  let summary = "Record the target a program is built for (#tp.target) on the module";
  let description = [{
    Sets `tp.target` to the named target's description (lib/Target/Cpu, lib/Target/Cuda):
    what buildProgram does before the sharding and decision passes, so that tp-fuse,
    tp-group-linears and tp-lower-to-emitc, run alone in tpc-opt, read the same facts. The
    target is the only place a target's name is turned into what follows from it.
  }];
  let dependentDialects = ["::tpc::tp::TPDialect"];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"\"",
           "the target, as --target spells it (cpu, cuda)">,
  ];
}

#endif // TPC_TARGET_PASSES_TD

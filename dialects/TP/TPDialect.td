// The tp dialect: a model graph whose values live on a one-dimensional "tp" mesh.
#ifndef TPC_TP_DIALECT_TD
#define TPC_TP_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def TP_Dialect : Dialect {
  let name = "tp";
  let cppNamespace = "::tpc::tp";
  let summary = "Tensor-parallel model graphs: parameters, layers, placements, collectives";
  let description = [{
    A tp module models one Hugging Face causal LM. `tp.param` declares each parameter under its
    HF name and global shape; layer ops (`tp.linear`, `tp.attention`, ...) carry the name of the
    HF module they model, so every diagnostic points at the user's module. Placements follow
    PyTorch DTensor on one mesh axis ("tp"): Replicate, Shard(d), StridedShard(d, blocks) and
    Partial(sum). Collectives appear first as `tp.redistribute` (a change of placement) and are
    lowered to `tp.all_reduce`, `tp.all_gather`, `tp.reduce_scatter` and `tp.all_to_all`.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let dependentDialects = ["::mlir::func::FuncDialect"];
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

#endif // TPC_TP_DIALECT_TD

// Placements: their DTensor spellings and the checks that tie them to a tensor shape.
#include "tpc/Dialect/TP/TPDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>

using namespace mlir;
using namespace tpc::tp;

#include "TP/TPAttrInterfaces.cpp.inc"
#include "TP/TPEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "TP/TPAttrs.cpp.inc"

void TPDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "TP/TPAttrs.cpp.inc"
      >();
}

// A placement that names a dim needs the tensor to have it.
static LogicalResult verifyDimFor(llvm::StringRef placement, int64_t dim, ArrayRef<int64_t> shape,
                                  llvm::function_ref<InFlightDiagnostic()> emitError) {
  if (normalizeDim(dim, shape.size()) >= 0)
    return success();
  return emitError() << placement << " needs dim " << dim << ", but the tensor has rank "
                     << shape.size();
}

std::string ReplicateAttr::str() const { return "Replicate()"; }
LogicalResult ReplicateAttr::verifyFor(ArrayRef<int64_t>,
                                       llvm::function_ref<InFlightDiagnostic()>) const {
  return success();
}

std::string ShardAttr::str() const { return "Shard(" + std::to_string(getDim()) + ")"; }
LogicalResult ShardAttr::verifyFor(ArrayRef<int64_t> shape,
                                   llvm::function_ref<InFlightDiagnostic()> emitError) const {
  return verifyDimFor(str(), getDim(), shape, emitError);
}

std::string StridedShardAttr::str() const {
  std::string s = "StridedShard(" + std::to_string(getDim()) + ", [";
  llvm::ListSeparator sep(", ");
  for (int64_t b : getBlocks())
    s += StringRef(sep).str() + std::to_string(b);
  return s + "])";
}
LogicalResult StridedShardAttr::verifyFor(ArrayRef<int64_t> shape,
                                          llvm::function_ref<InFlightDiagnostic()> emitError) const {
  if (failed(verifyDimFor(str(), getDim(), shape, emitError)))
    return failure();
  int64_t size = shape[normalizeDim(getDim(), shape.size())];
  int64_t total = 0;
  for (int64_t b : getBlocks())
    total += b;
  if (!ShapedType::isDynamic(size) && total != size)
    return emitError() << str() << ": the blocks add up to " << total << ", but dim "
                       << getDim() << " has " << size;
  return success();
}
LogicalResult StridedShardAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                                       int64_t dim, ArrayRef<int64_t> blocks) {
  if (blocks.size() < 2)
    return emitError() << "a strided shard needs at least two blocks, got " << blocks.size();
  for (int64_t b : blocks)
    if (b <= 0)
      return emitError() << "strided shard blocks must be positive, got " << b;
  return success();
}

std::string PartialAttr::str() const {
  return "Partial(" + stringifyReduceKind(getKind()).str() + ")";
}
LogicalResult PartialAttr::verifyFor(ArrayRef<int64_t>,
                                     llvm::function_ref<InFlightDiagnostic()>) const {
  return success();
}

LogicalResult ShardDescAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                                    int64_t dim, ArrayRef<int64_t> hfShape,
                                    ArrayRef<int64_t> offsets, ArrayRef<int64_t> sizes,
                                    int64_t chunks, ArrayRef<int64_t> ranks) {
  if (dim < 0 || dim >= static_cast<int64_t>(hfShape.size()))
    return emitError() << "shard_desc: dim " << dim << " is not a dim of the HF tensor";
  if (offsets.empty() || offsets.size() != sizes.size())
    return emitError() << "shard_desc: needs as many offsets as sizes, at least one";
  if (chunks < 1)
    return emitError() << "shard_desc: chunks must be at least 1, got " << chunks;
  for (auto [offset, size] : llvm::zip(offsets, sizes))
    if (offset < 0 || size < 1 || offset + size > hfShape[dim])
      return emitError() << "shard_desc: block [" << offset << ", " << offset + size
                         << ") is outside dim " << dim << " of size " << hfShape[dim];
  if (ranks.size() % 2 != 0)
    return emitError() << "shard_desc: ranks holds an offset and a size per rank, got "
                       << ranks.size() << " numbers";
  for (size_t r = 0; r < ranks.size(); r += 2)
    if (ranks[r] < 0 || ranks[r + 1] < 1 || ranks[r] + ranks[r + 1] > hfShape[dim])
      return emitError() << "shard_desc: rank " << r / 2 << "'s [" << ranks[r] << ", "
                         << ranks[r] + ranks[r + 1] << ") is outside dim " << dim
                         << " of size " << hfShape[dim];
  return success();
}

int64_t ShardDescAttr::heldElements(int64_t rank, int64_t tp) const {
  ArrayRef<int64_t> hf = getHfShape();
  int64_t dim = getDim(), others = 1;
  for (size_t i = 0; i < hf.size(); ++i)
    if (static_cast<int64_t>(i) != dim)
      others *= hf[i];
  if (!getRanks().empty())
    return others * getRanks()[2 * rank + 1];
  // torch.chunk pieces of every block: piece rank * chunks / tp, the last ones short.
  int64_t piece = rank * getChunks() / tp, rows = 0;
  for (auto [offset, size] : llvm::zip(getOffsets(), getSizes())) {
    int64_t chunk = (size + getChunks() - 1) / getChunks();
    rows += std::clamp<int64_t>(size - piece * chunk, 0, chunk);
  }
  return others * rows;
}

LogicalResult MeshAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError, int64_t pp,
                               int64_t size) {
  if (pp < 1)
    return emitError() << "the pp size must be at least 1, got " << pp;
  if (size < 1)
    return emitError() << "the tp size must be at least 1, got " << size;
  return success();
}

bool tpc::tp::samePlacement(PlacementAttr a, PlacementAttr b, int64_t rank) {
  if (a == b)
    return true;
  if (auto sa = dyn_cast<ShardAttr>(a))
    if (auto sb = dyn_cast<ShardAttr>(b))
      return normalizeDim(sa.getDim(), rank) == normalizeDim(sb.getDim(), rank);
  if (auto sa = dyn_cast<StridedShardAttr>(a))
    if (auto sb = dyn_cast<StridedShardAttr>(b))
      return normalizeDim(sa.getDim(), rank) == normalizeDim(sb.getDim(), rank) &&
             sa.getBlocks() == sb.getBlocks();
  return false;
}

LogicalResult TargetAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                                 StringRef name, Type activation, bool, bool, bool, bool,
                                 GatherMode, bool, int64_t arenaAlign) {
  if (name.empty())
    return emitError() << "a target needs a name";
  if (!isa<FloatType>(activation) || activation.getIntOrFloatBitWidth() % 8 != 0)
    return emitError() << "a target's activation must be a float type of whole bytes, got "
                       << activation;
  if (arenaAlign < 1)
    return emitError() << "a target's arena_align must be at least 1 element, got "
                       << arenaAlign;
  return success();
}

int64_t TargetAttr::activationBytes() const {
  return getActivation().getIntOrFloatBitWidth() / 8;
}

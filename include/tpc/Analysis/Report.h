// What `tpc analyze` reports, computed from the IR the pipeline produces: the collectives of
// each phase, transformers' count for the same plan, and memory per rank.
#ifndef TPC_ANALYSIS_REPORT_H
#define TPC_ANALYSIS_REPORT_H

#include "tpc/Analysis/CostModel.h"
#include "tpc/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace tpc {

struct CollectiveEntry {
  std::string layer;  // model.layers.N, or the top-level module
  std::string module; // the HF module whose hook or op needs it
  CollectiveKind kind;
  int64_t dim = -1;       // gathered or scattered dim; -1 where none
  /// tpc's: what goes on the wire, the larger of one rank's buffers of the communicator call
  /// (padding included); transformers': the module output's full tensor.
  double bytes = 0;
  double sentBytes = 0;   // what each rank sends for it (cost model)
  /// Of `bytes`, the padding: where tp does not divide the dim, the communicator moves equal
  /// pieces, torch.chunk's short last ones padded to the first's size.
  double paddedBytes = 0;
  /// tpc's gather of the logits marked argmax_if_greedy, on a greedy step: each rank's
  /// largest logit of every row and its id (two elements a row), not the rows.
  bool argmax = false;
  /// The pipeline stage whose ranks run it (a send's, the stage it leaves), and a send's or
  /// receive's other stage (-1 for a collective).
  int64_t stage = 0, peer = -1;
};

struct PhaseReport {
  std::string name;
  int64_t tokens = 0;
  int64_t sequences = 1; // a step's (--step-tokens of --step-seqs sequences)
  bool sequenceParallel = false;
  std::vector<CollectiveEntry> collectives;   // tpc's, after folding
  std::vector<CollectiveEntry> transformers;  // transformers' module hooks, same plan
  std::string transformersFails; // why transformers' TP cannot run it; then no hooks run
  int64_t cachedTokens = 0; // a prefill after a prefix-cache hit: the tokens it did not compute
};

struct MemoryReport {
  double weights = 0, unshardedWeights = 0, kvCache = 0, arena = 0;
  double kvCachePerToken = 0; // a token's keys and values on the largest rank
  int64_t kvBlockSize = 0;    // the paged cache's tokens per block (tp.kv_block_size); 0: none
  /// The weight bytes one decode step reads on the rank that reads most (each matrix once,
  /// an embedding table's one row), and the types the weights are held in ("bf16: 211
  /// parameters, f32: 61").
  double decodeReads = 0;
  /// Of decodeReads, the expert banks' bytes (all of each, as held), and the share of a
  /// bank's experts one token is routed to (top_k / experts; 0 without experts): a step
  /// reads only the experts its tokens are routed to (the CPU kernel skips the others).
  double expertReads = 0, expertsRouted = 0;
  std::string heldTypes;
  double mlaLatentCache = 0; // the latent cache transformers keeps for MLA layers instead
  int64_t maxSeqLen = 0, arenaElementsPerToken = 0;
  /// The KV cache by the keys its layers read (tpcrt/kv_groups.h' groups, as the target's
  /// runtime forms them): each group's layers on the rank, their bytes a token, and the
  /// blocks of tp.kv_block_size a sequence of maxSeqLen holds in them at most.
  struct KvGroup {
    std::string reads;
    int64_t layers = 0, blocksPerSequence = 0;
    int64_t keysRead = 0; // the most keys a query reads (its window or chunk); 0: every key
    double bytesPerToken = 0;
  };
  std::vector<KvGroup> kvGroups;
  /// The cache a sequence of maxSeqLen holds at most, over the groups.
  double kvCachePerSequence = 0;
  /// The KV bytes a decode step's query at `context` reads: each group's keys, up to its
  /// window or chunk.
  double kvReadBytes(int64_t context) const {
    if (kvGroups.empty())
      return kvCachePerToken * double(context);
    double bytes = 0;
    for (const KvGroup &group : kvGroups)
      bytes += group.bytesPerToken *
               double(group.keysRead > 0 ? std::min(context, group.keysRead) : context);
    return bytes;
  }
  /// Sequences of maxSeqLen that 1 GiB of KV cache holds, as the groups keep their blocks,
  /// and were every layer to keep every key.
  double kvSequencesPerGiB = 0, kvSequencesPerGiBWhole = 0;
};

/// "model.layers.3" for any module inside decoder layer 3; the module itself otherwise.
std::string layerOf(llvm::StringRef module);

/// The collectives one forward of the program the binary is built from (buildProgram's)
/// runs for a step of `tokens` tokens, `sampled` sequences sampled (the rows tp.last_token
/// leaves, one a sequence), in order, as the runtime's collective layer executes them over
/// `tp` ranks with elements of `elementBytes`: the communicator call each is and its bytes
/// on the wire. `variableGather`: the target's communicator gathers uneven pieces unpadded
/// (the CPU's Gloo allgatherv), so such a gather moves the whole tensor and no padding.
/// `greedy`: the step's sampled rows are all greedy, so a gather marked argmax_if_greedy
/// moves each row's (logit, id) pair of every rank instead of the logits.
/// With pipeline stages, `stage`: what one of its ranks runs, its collectives and, where a
/// tp.transfer leaves or reaches it, a send or a receive of the rank's piece; without, every
/// stage's collectives and each transfer once, as its send.
std::vector<CollectiveEntry> programCollectives(mlir::func::FuncOp forward, int64_t tokens,
                                                int64_t tp, int64_t elementBytes,
                                                bool variableGather, int64_t sampled = 1,
                                                bool greedy = false,
                                                std::optional<int64_t> stage = std::nullopt);

/// transformers' count, from its module-boundary hooks before any folding: every module with
/// a strategy whose forward hook communicates (the strategy table of docs/plans.md) runs that
/// collective once on its output: all_gather(-1) for colwise_gather_output, colwise_rep and
/// embedding_colwise; all_reduce for rowwise, rowwise_split_input, rowwise_rep,
/// embedding_rowwise, all_reduce and moe_tp_experts. Bytes: the module output's size, for
/// the last token only where generate computes only that (lm_head, logits_to_keep=1).
/// None on a mesh of one rank, where transformers applies no plan. What transformers runs
/// only where transformersFailure is empty.
std::vector<CollectiveEntry> transformersCollectives(mlir::ModuleOp planned, int64_t tokens);

/// Why transformers' TP cannot run `planned` at its mesh's tp: where it refuses to load it or
/// fails in the forward, and what it raises; "" where it runs. transformers shards with
/// DTensor, whose Shard(d) gives rank r the r-th torch.chunk piece, and its colwise hooks
/// hand the next module that local piece. So:
/// - a strategy its registry lacks (embedding_colwise, local_params): refused at load;
/// - colwise_gather_output / colwise_rep over output features tp does not divide: refused at
///   load (ColwiseParallel.validate_param);
/// - grouped_gemm over experts tp does not divide: refused at load (MoEParamShard);
/// - ep_router over experts tp does not divide: fails in the router's forward;
/// - q, k or v from a colwise projection whose piece on some rank is not whole heads: the
///   attention's view(*input_shape, -1, head_dim) fails; whole heads, but a rank's query
///   heads are not its KV heads times num_heads / num_kv_heads (what repeat_kv makes of
///   them): the attention's shapes disagree;
/// - experts split on their intermediate size where a rank's piece is not a multiple of 16
///   bytes: its default experts implementation (grouped_mm) fails in the forward.
/// Other uneven splits run: a colwise output's pieces and those of the rowwise weight after
/// it are the same torch.chunk pieces (an intermediate size tp does not divide).
std::string transformersFailure(mlir::ModuleOp planned);

/// Bytes of one parameter, whole, in the type it is stored in.
double paramBytes(tp::ParamOp param);

// What the ranks hold and read. With pipeline stages, `stage` counts what the ranks of that
// stage hold (the parameters it lists, inStage; its attentions' caches), as the binary's
// loader does; without, the whole model's.

/// Bytes of every tp.param as stored (its `storage`, else its element type), as typed:
/// global before tp-partition, local after.
double parameterBytes(mlir::ModuleOp module, std::optional<int64_t> stage = std::nullopt);
/// Bytes of every tp.param of a partitioned module at its HF shape, as stored.
double unshardedParameterBytes(mlir::ModuleOp partitioned);
/// The weight bytes a one-token forward reads on the rank that reads most: every element of
/// every parameter it holds, but one row of a table only an embedding reads.
double decodeWeightReads(mlir::ModuleOp partitioned,
                         std::optional<int64_t> stage = std::nullopt);
/// The expert banks a module's experts multiply by, each with the share of its experts one
/// token is routed to (top_k / experts).
llvm::DenseMap<mlir::StringAttr, double> routedShares(mlir::ModuleOp module);
/// Of decodeWeightReads' bytes (on the same rank), those of expert banks.
double decodeExpertReads(mlir::ModuleOp partitioned,
                         std::optional<int64_t> stage = std::nullopt);
/// How many parameters are held in each type, "bf16: 211 parameters, f32: 61".
std::string heldTypes(mlir::ModuleOp module, std::optional<int64_t> stage = std::nullopt);

/// What each rank of a partitioned module holds and computes, padding left out, read off the
/// shard descriptors and the attentions' rank_heads: uneven where tp does not divide a head
/// count, an intermediate size or a vocabulary.
struct RankShares {
  std::vector<double> weightBytes;    // the parameters' elements each rank loads, as bytes
  std::vector<double> matmulElements; // weight elements of its matmuls: its multiply-adds per token
  /// Of matmulElements, those of expert banks, every expert's (a token meets its routed
  /// share, MemoryReport::expertsRouted).
  std::vector<double> expertElements;
  std::vector<double> queryHeads;     // its attention heads, over every layer
};
RankShares rankShares(mlir::ModuleOp partitioned, std::optional<int64_t> stage = std::nullopt);

/// The largest rank's share of `perRank` against the even share (their mean): 1 where
/// balanced, 0 where there is nothing.
double imbalance(const std::vector<double> &perRank);
/// Keys and values of every attention layer for `maxSeqLen` tokens, as partitioned.
double kvCacheBytes(mlir::ModuleOp partitioned, int64_t maxSeqLen,
                    std::optional<int64_t> stage = std::nullopt);
/// The KV cache a rank of `stage` (none: a mesh without stages) allocates for
/// --kv-cache-tokens `tokens`, sequences of at most `maxSeqLen` and --max-num-seqs
/// `maxNumSeqs`: each layer in its group's pool as the runtime sizes them
/// (tpcrt/kv_groups.h' kvPoolBlocks), in blocks of `blockSize`. Fills `memory`'s kvGroups and
/// sequences a GiB holds; returns the bytes, of elements of the activations' type.
double kvCacheAllocated(mlir::ModuleOp partitioned, int64_t tokens, int64_t maxSeqLen,
                        int64_t maxNumSeqs, int64_t blockSize,
                        std::optional<int64_t> stage, MemoryReport &memory);
/// What DeepSeek's MLA layers would cache as transformers does (the latent and the rope key,
/// on every rank) where tpc caches per-head keys and values; 0 without MLA.
double mlaLatentCacheBytes(mlir::ModuleOp partitioned, int64_t maxSeqLen,
                           std::optional<int64_t> stage = std::nullopt);
/// The activation arena tp-plan-arena laid out, in elements per token: the largest of the
/// program's forwards, which share it. The binary allocates it for --max-model-len tokens.
int64_t arenaElementsPerToken(mlir::ModuleOp program);

/// Graphviz DOT of a lowered module: ops as nodes (collectives highlighted), edges labelled
/// with the placement of the value they carry.
void writeDot(mlir::ModuleOp lowered, llvm::raw_ostream &os);

} // namespace tpc

#endif // TPC_ANALYSIS_REPORT_H

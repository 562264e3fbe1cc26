// The one widening to virtual KV heads that tp-propagate-layouts and tp-fold-redistribute
// share (see tpc/Transforms/VirtualKVHeads.h).
#include "tpc/Transforms/VirtualKVHeads.h"

using namespace mlir;
using namespace tpc;
using namespace tpc::tp;

std::optional<int64_t> tpc::tp::virtualKVRepeat(AttentionOp attention, int64_t tp) {
  int64_t kvHeads = attention.getNumKvHeads();
  if (kvHeads >= tp || tp % kvHeads != 0 || attention.getNumHeads() % tp != 0)
    return std::nullopt;
  return tp / kvHeads;
}

void WideningLog::restore() {
  for (auto [value, type] : values)
    value.setType(type);
  for (auto [param, type, repeat] : params) {
    param.setType(cast<RankedTensorType>(type));
    if (repeat)
      param.setHeadRepeat(*repeat);
    else
      param.removeHeadRepeatAttr();
  }
  for (auto [attention, heads] : kvHeads)
    attention.setNumKvHeads(heads);
}

void KVHeadWidener::widenValue(Value value, int64_t dim) {
  auto type = typeOf(value);
  if (log)
    log->values.push_back({value, type});
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] *= repeat;
  value.setType(type.clone(shape));
}

bool KVHeadWidener::widenParam(Value use) {
  ParamOp param = paramOf(use);
  if (!param || !use.hasOneUse() || param.getHeadRepeat())
    return false;
  if (log)
    log->params.push_back({param, param.getType(), param.getHeadRepeat()});
  RankedTensorType type = param.getTensorType();
  SmallVector<int64_t> shape(type.getShape());
  shape[0] *= repeat;
  param.setType(type.clone(shape));
  param.setHeadRepeat(repeat);
  widenValue(use, 0);
  return true;
}

void KVHeadWidener::widenAttention(AttentionOp attention, int64_t tp) {
  if (log)
    log->kvHeads.push_back({attention, attention.getNumKvHeads()});
  attention.setNumKvHeads(tp);
}

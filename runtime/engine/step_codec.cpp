// The step descriptor's encoding (step_codec.h). The header and each sequence's fields are
// copied as their structs' words, so a field is named once, in the struct.
#include "step_codec.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace tpcrt {

namespace {
constexpr size_t kHeaderWords = sizeof(StepHeader) / sizeof(int64_t);
constexpr size_t kSequenceWords = sizeof(SequenceFields) / sizeof(int64_t);
static_assert(sizeof(StepHeader) == kHeaderWords * sizeof(int64_t), "words only");
static_assert(sizeof(SequenceFields) == kSequenceWords * sizeof(int64_t), "words only");

[[noreturn]] void corrupt(const std::string &what) {
  throw std::runtime_error("internal error: a step descriptor" + what);
}

int64_t bitsOf(double v) {
  int64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

double valueOf(int64_t bits) {
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}
} // namespace

size_t StepCodec::sequencesOffset() const { return kHeaderWords + size_t(layout.maxTokens); }

size_t StepCodec::tablesOffset() const {
  return sequencesOffset() + size_t(layout.maxSequences) * kSequenceWords;
}

size_t StepCodec::length() const {
  return tablesOffset() +
         size_t(layout.maxSequences * layout.groups()) * size_t(layout.blocksPerSequence);
}

void StepCodec::encodeSignal(StepKind kind, std::vector<int64_t> &d,
                             StepCollect collect) const {
  d.assign(length(), 0);
  StepHeader header;
  header.kind = int64_t(kind);
  header.collectBefore = collect.before;
  header.collectBeforeIds = collect.beforeIds;
  std::memcpy(d.data(), &header, sizeof header);
}

void StepCodec::encode(const std::vector<PlannedSequence> &plan, bool argmax,
                       StepCollect collect, std::vector<int64_t> &d) const {
  if (plan.empty() || int64_t(plan.size()) > layout.maxSequences)
    corrupt(" of " + std::to_string(plan.size()) + " sequences was asked for");
  d.assign(length(), 0);
  StepHeader header;
  header.kind = int64_t(StepKind::Run);
  header.sequences = int64_t(plan.size());
  header.argmax = argmax;
  header.collectBefore = collect.before;
  header.collectAfter = collect.after;
  header.collectBeforeIds = collect.beforeIds;
  header.collectAfterIds = collect.afterIds;
  for (size_t s = 0; s < plan.size(); ++s) {
    const PlannedSequence &p = plan[s];
    size_t windows = layout.windowBlocks.size();
    if (header.tokens + p.count > layout.maxTokens ||
        int64_t(p.blocks->size()) > layout.blocksPerSequence ||
        (windows && (!p.windowBlocks || p.windowBlocks->size() != windows)))
      corrupt(" over its layout was asked for");
    SequenceFields fields;
    fields.first = header.tokens;
    fields.count = p.count;
    fields.cached = p.cached;
    fields.logits = p.logits;
    fields.temperature = bitsOf(p.draw.temperature);
    fields.topK = p.draw.topK;
    fields.topP = bitsOf(p.draw.topP);
    fields.minP = bitsOf(p.draw.minP);
    fields.u = bitsOf(p.draw.u);
    std::memcpy(d.data() + sequencesOffset() + s * kSequenceWords, &fields, sizeof fields);
    std::copy(p.tokens, p.tokens + p.count, d.begin() + ptrdiff_t(kHeaderWords) + header.tokens);
    size_t stride = size_t(layout.blocksPerSequence);
    size_t tables = tablesOffset() + s * size_t(layout.groups()) * stride;
    std::copy(p.blocks->begin(), p.blocks->end(), d.begin() + ptrdiff_t(tables));
    for (size_t w = 0; w < windows; ++w) {
      const std::vector<int32_t> &table = (*p.windowBlocks)[w];
      if (table.size() != p.blocks->size())
        corrupt(" over its layout was asked for");
      std::copy(table.begin(), table.end(), d.begin() + ptrdiff_t(tables + (w + 1) * stride));
    }
    header.tokens += p.count;
  }
  std::memcpy(d.data(), &header, sizeof header);
}

StepKind StepCodec::kind(const std::vector<int64_t> &d) const {
  if (d.size() != length())
    corrupt(" of " + std::to_string(d.size()) + " words, not " + std::to_string(length()));
  int64_t kind = d[0];
  if (kind != int64_t(StepKind::End) && kind != int64_t(StepKind::Run) &&
      kind != int64_t(StepKind::Idle) && kind != int64_t(StepKind::Collect))
    corrupt(" of kind " + std::to_string(kind));
  return StepKind(kind);
}

StepCollect StepCodec::collect(const std::vector<int64_t> &d) const {
  kind(d);
  StepHeader header;
  std::memcpy(&header, d.data(), sizeof header);
  // Rows of logits: at most a step's tokens (a program without tp.last_token returns them all).
  for (int64_t rows : {header.collectBefore, header.collectAfter})
    if (rows < -1 || rows > layout.maxTokens)
      corrupt(" collects " + std::to_string(rows) + " rows of logits");
  for (int64_t ids : {header.collectBeforeIds, header.collectAfterIds})
    if (ids != 0 && ids != 1)
      corrupt(" collects rows as ids " + std::to_string(ids));
  return {header.collectBefore, header.collectAfter, header.collectBeforeIds != 0,
          header.collectAfterIds != 0};
}

void StepCodec::decode(const std::vector<int64_t> &d, DecodedStep &out) const {
  if (kind(d) != StepKind::Run)
    corrupt(" with no step was decoded");
  StepHeader header;
  std::memcpy(&header, d.data(), sizeof header);
  if (header.tokens < 1 || header.tokens > layout.maxTokens || header.sequences < 1 ||
      header.sequences > layout.maxSequences)
    corrupt(" of " + std::to_string(header.tokens) + " tokens in " +
            std::to_string(header.sequences) + " sequences");
  out.ids.assign(d.begin() + ptrdiff_t(kHeaderWords),
                 d.begin() + ptrdiff_t(kHeaderWords + size_t(header.tokens)));
  out.positions.resize(size_t(header.tokens));
  int64_t stride = layout.blocksPerSequence, groups = layout.groups();
  out.tables.resize(size_t(layout.maxSequences * groups * stride));
  Step &step = out.step;
  step.sequences.clear();
  for (int64_t s = 0; s < header.sequences; ++s) {
    SequenceFields f;
    std::memcpy(&f, d.data() + sequencesOffset() + size_t(s) * kSequenceWords, sizeof f);
    int64_t used = (f.cached + f.count + layout.blockSize - 1) / layout.blockSize;
    if (f.first < 0 || f.count < 1 || f.first + f.count > header.tokens || f.cached < 0 ||
        used > layout.blocksPerSequence || f.logits < 0 || f.logits > f.count)
      corrupt("'s sequence " + std::to_string(s) + " is out of range");
    int32_t *mine = out.tables.data() + s * groups * stride;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t *table = d.data() + tablesOffset() + size_t((s * groups + g) * stride);
      // A window group's blocks before the first the step reads may be given back (-1).
      int64_t first = 0, blocks = layout.blocks;
      if (g > 0) {
        first = layout.windowReaches[size_t(g - 1)].firstRead(f.cached) / layout.blockSize;
        blocks = layout.windowBlocks[size_t(g - 1)];
      }
      for (int64_t b = 0; b < used; ++b) {
        if (table[b] >= blocks || table[b] < (b < first ? -1 : 0))
          corrupt(" names KV block " + std::to_string(table[b]));
        mine[g * stride + b] = int32_t(table[b]);
      }
    }
    for (int64_t i = 0; i < f.count; ++i)
      out.positions[size_t(f.first + i)] = f.cached + i;
    StepSequence sequence;
    sequence.first = f.first;
    sequence.count = f.count;
    sequence.cached = f.cached;
    sequence.logits = f.logits;
    sequence.draw = {valueOf(f.temperature), f.topK, valueOf(f.topP), valueOf(f.minP),
                     valueOf(f.u)};
    if (std::string why = sequence.draw.check(); !why.empty())
      corrupt("'s sequence " + std::to_string(s) + " has a draw of " + why);
    sequence.blocks = mine;
    step.sequences.push_back(sequence);
  }
  step.tableStride = stride;
  step.ids = out.ids.data();
  step.positions = out.positions.data();
  step.tokens = header.tokens;
  step.argmax = header.argmax != 0;
}

} // namespace tpcrt

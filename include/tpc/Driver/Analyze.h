// tpc analyze's driver: its arguments checked, the model loaded and analyzed as
// lib/Analysis/Analyze.cpp does, and --dot's graph written (and drawn, where Graphviz is
// installed), leaving the tool the report to print.
#ifndef TPC_DRIVER_ANALYZE_H
#define TPC_DRIVER_ANALYZE_H

#include "tpc/Analysis/Analyze.h"
#include "tpc/Driver/Compile.h"

#include <string>

namespace tpc::driver {

/// What `tpc analyze` takes besides how it prints.
struct AnalyzeArgs : PlanArgs {
  std::string dot; // --dot: where the prefill's graph goes
  analysis::AnalyzeOptions analysis;
};

/// The analysis of `args`' model, loaded into `session` (the report's graph lives there).
/// Fails, with the errors reported, on a usage error, a model or plan that fails, or a --dot
/// that cannot be written.
mlir::FailureOr<analysis::Analysis> analyzeModel(Session &session, const AnalyzeArgs &args);

} // namespace tpc::driver

#endif // TPC_DRIVER_ANALYZE_H

// JSON files read with source locations, so plan diagnostics can point at file:line:col.
#ifndef TPC_PLAN_JSON_H
#define TPC_PLAN_JSON_H

#include "mlir/IR/Location.h"
#include "mlir/Support/LogicalResult.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace tpc::plan {

/// A parsed JSON file that remembers where each object key was written.
class JsonDocument {
public:
  /// Reads and parses `path`. A file that cannot be read, is not JSON, nests deeper than 128
  /// levels, holds a number out of range or gives a key twice in one object gets an error at
  /// the offending line and column; returns failure then.
  static mlir::FailureOr<JsonDocument> read(llvm::StringRef path, mlir::MLIRContext *context);

  /// Parses `text` as if it had been read from `path`.
  static mlir::FailureOr<JsonDocument> parse(llvm::StringRef path, std::string text,
                                             mlir::MLIRContext *context);

  const nlohmann::ordered_json &value() const { return root; }
  llvm::StringRef path() const { return filePath; }

  /// Where the key at `keyPath` (object keys from the root down) was written; the file's
  /// start when it cannot be found.
  mlir::Location keyLoc(const std::vector<std::string> &keyPath) const;

  mlir::Location locAt(size_t offset) const;

private:
  void indexKeys();

  std::string filePath;
  std::string text;
  nlohmann::ordered_json root;
  mlir::MLIRContext *context = nullptr;
  std::map<std::vector<std::string>, size_t> keyOffsets;
  struct Duplicate {
    std::vector<std::string> path;
    size_t later, first; // offsets of the two entries
  };
  std::vector<Duplicate> duplicateKeys;
};

/// A JSON type's name as a reader would say it ("a number", "an object").
std::string describeJsonType(const nlohmann::ordered_json &value);

} // namespace tpc::plan

#endif // TPC_PLAN_JSON_H

// tpc run's compile cache (include/tpc/Driver/Run.h): a checkpoint's binary, compiled once
// per everything that decides it and kept under a key of those facts.
#include "tpc/Driver/Run.h"

#include "tpc/Driver/Compile.h"
#include "tpc/Import/Importer.h"
#include "tpc/Target/TargetInfo.h"
#include "tpcrt/dtype.h"
#include "tpcrt/gguf.h"
#include "tpcrt/gguf_model.h"
#include "tpcrt/weights.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

namespace tpc::driver {

namespace {

/// Where compiled binaries are kept: TPC_CACHE_DIR, else $XDG_CACHE_HOME/tpc, else
/// ~/.cache/tpc.
std::string cacheRoot() {
  if (std::optional<std::string> dir = llvm::sys::Process::GetEnv("TPC_CACHE_DIR"))
    if (!dir->empty())
      return *dir;
  llvm::SmallString<256> root;
  if (std::optional<std::string> xdg = llvm::sys::Process::GetEnv("XDG_CACHE_HOME");
      xdg && !xdg->empty())
    root = *xdg;
  else if (std::optional<std::string> home = llvm::sys::Process::GetEnv("HOME"))
    llvm::sys::path::append(root, *home, ".cache");
  else
    root = "/tmp";
  llvm::sys::path::append(root, "tpc");
  return root.str().str();
}

/// "path size mtime" of a file that makes the binary, or "path missing".
std::string stamp(const std::string &path) {
  llvm::sys::fs::file_status status;
  if (llvm::sys::fs::status(path, status))
    return path + " missing";
  return fmt::format("{} {} {}", path, status.getSize(),
                     status.getLastModificationTime().time_since_epoch().count());
}

/// Everything that decides the compiled binary, one fact per line: tpc itself and the
/// runtime it links (by size and time, so a rebuilt tpc compiles again), the checkpoint's
/// config.json and the types it stores its tensors in, the plan, tp, target, sequence
/// parallelism and --weights-dtype.
std::string cacheKey(const RunBuild &o, llvm::StringRef config, llvm::StringRef plan,
                     const import::StoredTypes &stored) {
  std::string key = "tpc 0.1.0\n";
  key += stamp(llvm::sys::fs::getMainExecutable(nullptr, nullptr)) + "\n";
  for (const std::string &input : target::findTarget(o.target)->runtimeLibraries())
    key += stamp(input) + "\n";
  key += fmt::format("tp {}\ntarget {}\nsequence parallel {}\nweights {}\n", o.tp, o.target,
                     o.sequenceParallel ? "on" : "off", o.weights);
  key += fmt::format("pp {}\npp split {}\n", o.pp, fmt::join(o.ppSplit, ","));
  for (const auto &[name, type] : stored)
    key += "stored " + name + " " + type + "\n";
  key += "plan " + o.plan + "\n" + plan.str() + "\n";
  key += "config.json\n" + config.str();
  return key;
}

std::optional<std::string> readFile(const std::string &path, const char *what) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer) {
    reportError(fmt::format("cannot read {} {}: {}", what, path, buffer.getError().message()));
    return std::nullopt;
  }
  return (*buffer)->getBuffer().str();
}

/// Imports the checkpoint and compiles it into `dir`; the binary's path, or none (errors
/// reported).
std::optional<std::string> compileInto(const RunBuild &o, const CheckpointConfig &config,
                                       const std::string &dir) {
  std::string modelPath;
  {
    Session session;
    mlir::FailureOr<std::string> text = import::importConfigText(
        config.name, config.text, &session.context(), &config.stored);
    if (mlir::failed(text))
      return std::nullopt;
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, "model.mlir");
    modelPath = path.str().str();
    if (!writeAtomically(modelPath, *text))
      return std::nullopt;
  }
  CompileArgs args;
  args.model = modelPath;
  args.plan = o.plan;
  args.tp = o.tp;
  args.pp = o.pp;
  args.ppSplit = o.ppSplit;
  args.target = o.target;
  args.sequenceParallel = o.sequenceParallel;
  args.weights = o.weights;
  args.output = dir;
  args.quiet = !o.verbose;
  if (compileModel(args, o.verbose ? llvm::errs() : llvm::nulls()) != 0)
    return std::nullopt;
  return args.binary;
}

} // namespace

bool checkpointExists(const std::string &command, const std::string &path) {
  if (llvm::sys::fs::exists(path))
    return true;
  reportError(fmt::format("{}: {} does not exist: give a checkpoint directory (config.json, "
                          "*.safetensors, tokenizer.json) or a .gguf file",
                          command, path));
  return false;
}

std::optional<CheckpointConfig> readCheckpointConfig(const std::string &path) {
  std::string error;
  std::string gguf = tpcrt::ggufPathOf(path, error);
  if (!error.empty()) {
    reportError(error);
    return std::nullopt;
  }
  CheckpointConfig config;
  std::string checkpoint; // what holds the tensors
  if (!gguf.empty()) {
    std::unique_ptr<tpcrt::GgufModel> model = tpcrt::GgufModel::open(gguf, error);
    if (!model) {
      reportError(error);
      return std::nullopt;
    }
    config.name = gguf + "'s metadata";
    config.text = model->configJson();
    checkpoint = gguf;
  } else {
    config.name = path;
    if (llvm::sys::fs::is_directory(path)) {
      llvm::SmallString<256> file(path);
      llvm::sys::path::append(file, "config.json");
      config.name = file.str().str();
    }
    std::optional<std::string> text = readFile(config.name, "the checkpoint's config");
    if (!text)
      return std::nullopt;
    config.text = std::move(*text);
    llvm::SmallString<256> dir(config.name);
    llvm::sys::path::remove_filename(dir);
    checkpoint = dir.empty() ? "." : dir.str().str();
  }
  // The types the tensors are stored in; none where there is no checkpoint beside a
  // config.json, or it cannot be read (the loader says why then).
  if (std::unique_ptr<tpcrt::Checkpoint> opened = tpcrt::Checkpoint::open(checkpoint, error))
    for (const std::string &name : opened->names())
      if (std::optional<tpcrt::DType> type = tpcrt::parseDType(opened->find(name)->dtype);
          type && *type != tpcrt::DType::F32)
        config.stored[name] = tpcrt::dtypeName(*type);
  return config;
}

std::optional<std::string> binaryFor(const RunBuild &o, const CheckpointConfig &config,
                                     std::string &scratch) {
  std::string planText;
  if (o.plan != "auto") {
    std::optional<std::string> text = readFile(o.plan, "the plan");
    if (!text)
      return std::nullopt;
    planText = *text;
  }
  if (o.noCache) {
    llvm::SmallString<128> dir;
    if (std::error_code ec = llvm::sys::fs::createUniqueDirectory("tpc-run", dir)) {
      reportError("cannot create a directory to compile into: " + ec.message());
      return std::nullopt;
    }
    scratch = dir.str().str();
    llvm::errs() << "tpc run: compiling (--no-cache)\n";
    return compileInto(o, config, scratch);
  }
  std::string key = cacheKey(o, config.text, planText, config.stored);
  std::string digest = llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(key)),
                                   /*LowerCase=*/true);
  llvm::SmallString<256> entry(cacheRoot());
  llvm::sys::path::append(entry, "run", digest.substr(0, 24));
  llvm::SmallString<256> done(entry);
  llvm::sys::path::append(done, "binary");
  // An entry is complete once its "binary" file names the binary built inside it.
  auto completed = [&]() -> std::optional<std::string> {
    auto buffer = llvm::MemoryBuffer::getFile(done);
    if (!buffer)
      return std::nullopt;
    std::string path = llvm::StringRef((*buffer)->getBuffer()).trim().str();
    return llvm::sys::fs::can_execute(path) ? std::optional<std::string>(path) : std::nullopt;
  };
  if (std::optional<std::string> binary = completed()) {
    llvm::errs() << fmt::format("tpc run: compiled before, taken from the cache ({}); nothing "
                                "to compile\n",
                                entry.str());
    return binary;
  }
  // Compiled in a directory of its own beside the entry, then renamed into place whole: two
  // processes that compile the same entry at once (servers started together, tests sharing
  // one cache) each build in their own, the first rename wins, and the other takes its
  // binary. So an entry, once there, is complete.
  llvm::SmallString<256> runs(cacheRoot()), building;
  llvm::sys::path::append(runs, "run");
  auto cannot = [&](const llvm::Twine &what, std::error_code ec) {
    reportError(fmt::format("cannot {}: {} (TPC_CACHE_DIR moves the cache; --no-cache "
                            "compiles without it)",
                            what.str(), ec.message()));
    return std::nullopt;
  };
  if (std::error_code ec = llvm::sys::fs::create_directories(runs))
    return cannot("create the cache directory " + runs.str(), ec);
  for (int attempt = 0;; ++attempt) {
    llvm::SmallString<256> model(runs);
    llvm::sys::path::append(model, digest.substr(0, 24) + ".building-%%%%%%%%");
    llvm::sys::fs::createUniquePath(model, building, /*MakeAbsolute=*/false);
    std::error_code ec = llvm::sys::fs::create_directory(building, /*IgnoreExisting=*/false);
    if (!ec)
      break;
    if (ec != std::errc::file_exists || attempt == 16)
      return cannot("create a directory to compile into under " + runs.str(), ec);
  }
  llvm::errs() << fmt::format("tpc run: compiling into the cache ({})\n", entry.str());
  llvm::SmallString<256> keyPath(building);
  llvm::sys::path::append(keyPath, "key.txt");
  std::optional<std::string> built;
  if (writeAtomically(keyPath.str().str(), key))
    built = compileInto(o, config, building.str().str());
  // The binary's path once its directory is the entry; the marker says it, last.
  std::optional<std::string> binary;
  if (built && llvm::StringRef(*built).starts_with(building)) {
    binary = (entry + llvm::StringRef(*built).drop_front(building.size())).str();
    llvm::SmallString<256> marker(building);
    llvm::sys::path::append(marker, "binary");
    if (!writeAtomically(marker.str().str(), *binary + "\n"))
      binary.reset();
  }
  if (!binary) {
    llvm::sys::fs::remove_directories(building);
    return std::nullopt;
  }
  if (std::error_code ec = llvm::sys::fs::rename(building, entry)) {
    // Another process's entry came first: use it. An entry without its marker was left by a
    // compile that stopped before this way of caching: replaced.
    if (std::optional<std::string> theirs = completed()) {
      llvm::sys::fs::remove_directories(building);
      return theirs;
    }
    llvm::sys::fs::remove_directories(entry);
    if ((ec = llvm::sys::fs::rename(building, entry))) {
      llvm::sys::fs::remove_directories(building);
      if (std::optional<std::string> theirs = completed())
        return theirs;
      return cannot("put the compiled binary in place at " + entry.str(), ec);
    }
  }
  return binary;
}

} // namespace tpc::driver

// tpc run: a checkpoint directory in, generated output out, in one command: import its
// config.json, apply the plan, compile (or take the binary from the cache), and launch the
// ranks with the checkpoint's weights, rank 0's output streamed as it comes.
#include "Commands.h"

#include "tpc/Driver/Run.h"
#include "tpc/Target/TargetInfo.h"

#include <fmt/core.h>

namespace tpc {

using namespace driver;

namespace {

struct RunOptions : driver::RunBuild {
  std::string prompt, promptFile, promptIds, system, requests, output;
  int64_t maxNewTokens = 64;
  bool chat = false, ignoreEos = false, warmup = false;
  // The sampler's flags, passed on as given (the binary checks them and fills in
  // generation_config.json's defaults).
  std::string temperature, topK, topP, minP, repetitionPenalty, presencePenalty,
      frequencyPenalty, seed, stopTokenIds;
  // The engine's limits, passed on as given (the binary checks them).
  std::string maxNumSeqs, maxBatchTokens, kvCacheTokens, maxSeqLen;
  std::vector<std::string> stop;
};

int run(const RunOptions &o) {
  int given = !o.prompt.empty() + !o.promptFile.empty() + !o.promptIds.empty() +
              !o.requests.empty();
  if (given != 1) {
    reportError(
        "tpc run: give exactly one of --prompt, --prompt-file, --prompt-ids and --requests");
    return 2;
  }
  if (o.requests.empty() != o.output.empty()) {
    reportError("tpc run: --requests IN.jsonl and --output OUT.jsonl go together");
    return 2;
  }
  if (o.tp < 1) {
    reportError(fmt::format("--tp must be at least 1, got {}", o.tp));
    return 2;
  }
  if (o.maxNewTokens < 1) {
    reportError(fmt::format("--max-new-tokens must be at least 1, got {}", o.maxNewTokens));
    return 2;
  }
  if (!o.promptIds.empty() && (o.chat || !o.system.empty())) {
    reportError("tpc run: --chat and --system render text through the chat template; "
                "--prompt-ids are tokens already");
    return 2;
  }
  if (!o.system.empty() && !o.chat) {
    reportError("tpc run: --system is the system message of a --chat conversation");
    return 2;
  }
  std::vector<std::string> command = {"--weights", o.checkpoint, "--max-new-tokens",
                                      std::to_string(o.maxNewTokens)};
  auto add = [&](const char *flag, const std::string &value) {
    if (!value.empty())
      command.insert(command.end(), {flag, value});
  };
  add("--prompt", o.prompt);
  add("--prompt-file", o.promptFile);
  add("--prompt-ids", o.promptIds);
  add("--system", o.system);
  add("--requests", o.requests);
  add("--output", o.output);
  add("--temperature", o.temperature);
  add("--top-k", o.topK);
  add("--top-p", o.topP);
  add("--min-p", o.minP);
  add("--repetition-penalty", o.repetitionPenalty);
  add("--presence-penalty", o.presencePenalty);
  add("--frequency-penalty", o.frequencyPenalty);
  add("--seed", o.seed);
  add("--stop-token-ids", o.stopTokenIds);
  add("--max-num-seqs", o.maxNumSeqs);
  add("--max-batch-tokens", o.maxBatchTokens);
  add("--kv-cache-tokens", o.kvCacheTokens);
  add("--max-seq-len", o.maxSeqLen);
  for (const std::string &stop : o.stop)
    command.insert(command.end(), {"--stop", stop});
  for (auto [flag, on] : {std::pair{"--chat", o.chat}, {"--ignore-eos", o.ignoreEos},
                          {"--warmup", o.warmup}, {"--verbose", o.verbose}})
    if (on)
      command.push_back(flag);
  driver::LaunchOptions launch;
  launch.rankZeroRaw = true;
  return launchCheckpoint("tpc run", o, launch, command);
}

} // namespace

void addCheckpointArgs(CLI::App *cmd, driver::RunBuild &o) {
  cmd->add_option("checkpoint", o.checkpoint,
                  "the checkpoint: a directory (config.json, *.safetensors, tokenizer.json), "
                  "or a .gguf file (or a directory holding one)")
      ->required();
  cmd->add_option("--tp", o.tp, "tensor-parallel size: how many local ranks (default 1)");
  cmd->add_option("--target", o.target, "cpu (default) or cuda")
      ->check(CLI::IsMember(target::targetNames()));
  cmd->add_option("--plan", o.plan,
                  "a tp_plan JSON file, or auto for transformers' own plan (default)");
  cmd->add_flag("--sequence-parallel", o.sequenceParallel,
                "split norms and residuals by tokens between the collectives");
  addWeightsDtype(cmd, o.weights);
  cmd->add_flag("--no-cache", o.noCache,
                "compile into a temporary directory, removed afterwards, instead of the "
                "cache (TPC_CACHE_DIR, else $XDG_CACHE_HOME/tpc, else ~/.cache/tpc)");
}

void addRunCommand(CLI::App &app, CommandRunner &runner) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App *cmd = app.add_subcommand(
      "run", "Import, compile (once; cached) and run a checkpoint on local ranks: a prompt "
             "in, generated text out");
  addCheckpointArgs(cmd, *opts);
  cmd->add_option("--prompt", opts->prompt, "the prompt, as text");
  cmd->add_option("--prompt-file", opts->promptFile, "a file holding the prompt text");
  cmd->add_option("--prompt-ids", opts->promptIds,
                  "the prompt as token ids, comma-separated (prints ids back)");
  cmd->add_option("--requests", opts->requests,
                  "run the requests of this JSON-lines file (id, prompt or prompt_token_ids, "
                  "max_tokens, sampling fields), several at once (--max-num-seqs)")
      ->type_name("IN.jsonl");
  cmd->add_option("--max-num-seqs", opts->maxNumSeqs,
                  "with --requests: run up to N sequences in one step (default 8)")
      ->type_name("N");
  cmd->add_option("--max-batch-tokens", opts->maxBatchTokens,
                  "the most tokens one step computes; longer prompts are prefilled in chunks "
                  "(default --max-seq-len)")
      ->type_name("N");
  cmd->add_option("--kv-cache-tokens", opts->kvCacheTokens,
                  "the KV cache's size in tokens, shared by the sequences; when full, the "
                  "newest is preempted and recomputed (default --max-num-seqs x --max-seq-len)")
      ->type_name("N");
  cmd->add_option("--max-seq-len", opts->maxSeqLen,
                  "the longest sequence, prompt and output (default 2048, or the model's "
                  "max_position_embeddings where fewer)")
      ->type_name("N");
  cmd->add_option("--output", opts->output,
                  "with --requests: one JSON line per request (text, token_ids, "
                  "finish_reason, usage, or an error naming the field)")
      ->type_name("OUT.jsonl");
  cmd->add_option("--max-new-tokens", opts->maxNewTokens,
                  "the most tokens to generate, not counting the prompt (default 64); "
                  "generation stops earlier at an end-of-sequence token, as generate does");
  cmd->add_flag("--chat", opts->chat,
                "render the prompt as a user message through the checkpoint's chat template, "
                "with the generation prompt (apply_chat_template)");
  cmd->add_option("--system", opts->system, "with --chat: a system message first");
  cmd->add_flag("--ignore-eos", opts->ignoreEos,
                "generate --max-new-tokens whatever the model says (for benchmarks)");
  cmd->add_option("--temperature", opts->temperature,
                  "sample at this temperature; 0 is greedy (the default, unless the "
                  "checkpoint's generation_config.json sets do_sample)")
      ->type_name("FLOAT");
  cmd->add_option("--top-k", opts->topK, "sample from the K most likely tokens (0 or -1: all)")
      ->type_name("INT");
  cmd->add_option("--top-p", opts->topP,
                  "sample from the most likely tokens that make up P of the probability")
      ->type_name("FLOAT");
  cmd->add_option("--min-p", opts->minP,
                  "drop tokens less likely than P times the most likely one")
      ->type_name("FLOAT");
  cmd->add_option("--repetition-penalty", opts->repetitionPenalty,
                  "divide positive logits (multiply negative ones) of the prompt's and the "
                  "output's tokens by R")
      ->type_name("FLOAT");
  cmd->add_option("--presence-penalty", opts->presencePenalty,
                  "subtract X from the logits of the tokens in the output")
      ->type_name("FLOAT");
  cmd->add_option("--frequency-penalty", opts->frequencyPenalty,
                  "subtract X per occurrence in the output from a token's logit")
      ->type_name("FLOAT");
  cmd->add_option("--seed", opts->seed,
                  "the sampler's seed: the same seed gives the same text (default: random)")
      ->type_name("INT");
  cmd->add_option("--stop", opts->stop,
                  "stop when the text contains this string, which is not printed (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--stop-token-ids", opts->stopTokenIds,
                  "stop after any of these ids (comma-separated), whatever --ignore-eos says")
      ->type_name("IDS");
  cmd->add_flag("--warmup", opts->warmup,
                "a throwaway prefill and two decode steps first, then the median of three "
                "warm prefills and the median decode step are reported (for benchmarks)");
  cmd->add_flag("-v,--verbose", opts->verbose,
                "show the compiler's stages, warnings and notes, and say how rank 0 computes: "
                "its kernels, BLAS core and weight types");
  cmd->footer("Decoding is greedy unless --temperature (or the checkpoint's "
              "generation_config.json, with do_sample) asks for sampling: vLLM's parameters, "
              "on rank 0, which sends every rank its choice. The binary compiled for a "
              "checkpoint's "
              "config, plan, tp and target is kept in the cache: the same command again "
              "compiles nothing.");
  cmd->callback([opts, &runner] { runner = [opts] { return run(*opts); }; });
}

} // namespace tpc

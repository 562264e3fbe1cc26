// The server (server.h). Threads: the connection layer's I/O thread (http.h) reads requests
// and writes answers; two reader threads check completion requests (JSON, the chat template,
// the tokenizer: work too long for the I/O thread); two compiler threads compile structured
// outputs' grammars (work that may take seconds, kept off the readers so that a slow grammar
// never delays another request's reading); rank 0's main thread runs the engine. No
// thread waits on a client: a checked request (a Job) goes to the inbox under the server's
// mutex, the engine thread submits it, steps, and writes each token's text to its exchange,
// which queues it for the I/O thread. A client that goes away (it closed its connection, or
// did not read its answer in time) queues its job for an abort, which frees its sequence's
// slot and KV blocks at the start of the next step.
//
// Admission is bounded: at most --max-num-seqs + --max-queue requests are in flight (being
// read, running or waiting); one more is refused at once with 503 and Retry-After, never
// queued without bound.
//
// Failures: a collective that fails (a rank died or hung past --timeout) ends the engine; every
// open request is told (an error event then [DONE] in a stream, 503 otherwise), /health turns
// 503, and the process exits non-zero so that a supervisor restarts the whole group.
#include "server.h"

#include "api.h"
#include "http.h"

#include "tpcrt/chat_template.h"
#include "tpcrt/gguf.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

namespace tpcrt::serve {

namespace {

using Clock = std::chrono::steady_clock;

/// A body larger than this is refused with 413 before it is read.
constexpr uint64_t kMaxBodyBytes = uint64_t(4) << 20;
/// Threads that read completion requests.
constexpr size_t kReaders = 2;
/// Threads that compile requests' grammars: one compiles (Grammars compiles one at a time)
/// while the other refuses, as busy, what has waited kCompileQueueWait behind it.
constexpr size_t kCompilers = 2;

/// SIGTERM or SIGINT on rank 0: drain and exit.
volatile std::sig_atomic_t terminateRequested = 0;
extern "C" void onTerminate(int) { terminateRequested = 1; }

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

/// A Prometheus histogram.
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts; // per bucket, not cumulative
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1) {}
  void observe(double v) {
    size_t i = 0;
    while (i < bounds.size() && v > bounds[i])
      ++i;
    ++counts[i];
    sum += v;
    ++count;
  }
};

/// Threads that run tasks in order of arrival; what is queued is bounded by the caller (here:
/// by admission).
class Workers {
public:
  explicit Workers(size_t n) {
    for (size_t i = 0; i < n; ++i)
      threads.emplace_back([this] { work(); });
  }
  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    ready.notify_all();
    for (std::thread &t : threads)
      t.join();
  }
  void post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      tasks.push_back(std::move(task));
    }
    ready.notify_one();
  }

private:
  void work() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex);
        ready.wait(lock, [&] { return stopping || !tasks.empty(); });
        if (tasks.empty())
          return;
        task = std::move(tasks.front());
        tasks.pop_front();
      }
      task();
    }
  }
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::function<void()>> tasks;
  bool stopping = false;
  std::vector<std::thread> threads;
};

/// One choice of a request (n of them): its engine request's text as it comes.
struct Choice {
  size_t handle = 0;
  std::optional<GeneratedText> text;
  std::string all; // the whole text, for a non-streamed response
  // Where log-probabilities were asked for: how many tokens' have gone in a chunk, and the
  // text offset a completion's next one starts at; at the finish, all of them for a
  // non-streamed response.
  size_t logprobsShown = 0;
  int64_t textOffset = 0;
  nlohmann::ordered_json logprobs;
  bool echoed = false;          // a completion's echo sent, or put in front
  const char *finish = nullptr; // once its engine request finished
  int64_t tokens = 0;           // generated so far, the last one at lastToken
  Clock::time_point lastToken;
  // A streamed chat answer read back into tool calls (ApiRequest::toolFormat): its reader, and
  // whether it has let a call out.
  std::optional<ToolCallStream> tools;
  bool called = false;
  bool keepSpecial = false; // its text keeps special tokens (a model's own tool format)
  nlohmann::ordered_json heldLogprobs; // of tokens whose text it holds back
};

/// One API request, from the reader thread that checked it to the engine and back.
struct Job {
  std::shared_ptr<http::Exchange> exchange;
  std::string id; // X-Request-Id
  ApiRequest api;
  ResponseHead head;
  std::vector<EngineRequest> requests; // a choice's each, as submitted (a copy goes in)
  // The engine thread's alone once queued:
  std::vector<Choice> choices;
  size_t unfinished = 0;  // choices still running
  std::string error;      // a choice that failed: the request's answer
  std::vector<size_t> deferred; // choices that had nothing to compute, until choice 0 ends
  Clock::time_point arrived;
  bool submitted = false;
  Usage usage;            // completion: every choice's tokens
  // Choice 0's prompt, scored (prompt_logprobs, echo with logprobs): the other choices wait
  // for its first token (Engine::submitAfter), so it is here before any of theirs.
  std::vector<TokenLogprobs> scoredPrompt;
  nlohmann::ordered_json promptLogprobs;
  bool answered = false;
  // Under the server's mutex:
  const char *finish = nullptr;       // "stop", "length", "abort" or "error", once finished
  bool cancelled = false;
};

/// The log-probabilities of a choice's tokens that no chunk has carried yet (null where none
/// were asked for), from here on shown.
nlohmann::ordered_json unshownLogprobs(const Job &job, Choice &c, const EngineRequest &r,
                                       const Tokenizer &tokenizer) {
  if (r.logprobs < 0)
    return nullptr;
  const TokenLogprobs *all = r.outputLogprobs.data();
  size_t from = std::exchange(c.logprobsShown, r.outputLogprobs.size());
  return logprobsOf(job.api.chat, tokenizer, all + from, all + c.logprobsShown, c.textOffset);
}

/// The finish reason of an answer that calls tools and stopped: "tool_calls", as vLLM says,
/// except under a named tool_choice, where it is the engine's own (OpenAI's "stop").
const char *finishWithCalls(ToolFormat format, const char *finish) {
  return format != ToolFormat::Named && finish && std::string(finish) == "stop" ? "tool_calls"
                                                                               : finish;
}

http::Response jsonResponse(int status, std::string body, const std::string &id) {
  http::Response response;
  response.status = status;
  response.body = std::move(body);
  response.headers.emplace_back("X-Request-Id", id);
  if (status == 503)
    response.headers.emplace_back("Retry-After", "1");
  return response;
}

} // namespace

struct Server::State {
  const ModelSpec &spec;
  Args args;
  ApiContext context;
  std::unique_ptr<Grammars> grammars; // structured outputs' vocabulary and compiler
  std::unique_ptr<GgufFile> gguf; // a GGUF checkpoint's tokenizer and template live in it
  std::unique_ptr<http::Server> http;
  std::unique_ptr<Workers> readers;
  std::unique_ptr<Workers> compilers; // structured outputs' grammars (kCompilers)
  std::string address; // HOST:PORT, as bound
  int64_t created = 0; // Unix seconds, for the responses
  uint64_t nextId = 0;
  std::atomic<uint64_t> requestIds{0}; // the ids given to requests that bring none

  std::mutex mutex;
  std::condition_variable wake; // the engine thread: an inbox, a cancellation or a signal
  std::deque<std::shared_ptr<Job>> inbox;
  std::vector<std::shared_ptr<Job>> cancels;
  int64_t inFlight = 0; // admitted, not finished
  bool ready = false, draining = false;
  std::string failed;   // why the engine stopped

  // /metrics, under the mutex.
  int64_t running = 0, waiting = 0, blocksUsed = 0, blocksTotal = 0, preemptions = 0;
  int64_t blocksCached = 0, prefixQueries = 0, prefixHits = 0;
  uint64_t promptTokens = 0, generationTokens = 0;
  std::map<std::string, uint64_t> finished, rejected; // by reason
  Histogram ttft{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                  5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0}};
  Histogram itl{{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                 7.5, 10.0, 20.0, 40.0, 80.0}};
  Histogram e2e{{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}};

  State(const ModelSpec &spec, const Args &args) : spec(spec), args(args) {}

  // The I/O thread.
  void handle(const std::shared_ptr<http::Exchange> &exchange);
  /// An error answer, counted in /metrics as `rejectedAs` where given.
  void refuse(http::Exchange &exchange, const std::string &id, const ApiError &error,
              const char *rejectedAs,
              std::vector<std::pair<std::string, std::string>> headers = {});
  std::string metrics();
  void cancel(const std::shared_ptr<Job> &job);
  // A reader thread: the request read and checked, then admitted or handed to a compiler.
  void complete(const std::shared_ptr<Job> &job, bool chat);
  // A compiler thread: its grammar compiled, then admitted.
  void constrain(const std::shared_ptr<Job> &job, bool chat, Clock::time_point queued);
  // Either: a checked job goes to the engine's inbox (its stream opened first).
  void admit(const std::shared_ptr<Job> &job, bool chat);
  /// An admitted request refused before it reached the engine: its slot given back.
  void refuseAdmitted(Job &job, const ApiError &error, const char *rejectedAs);
  /// An exception while checking: logged under the request's id, a 500 naming that id.
  void internalError(Job &job, const std::exception &e);
  /// POST /tokenize or /detokenize: read, answered, and its admission's slot given back.
  void tokenize(const std::shared_ptr<http::Exchange> &exchange, const std::string &id,
                bool detokenize);

  // The engine side, on rank 0's main thread.
  void answer(Job &job, const std::string &error, int status, const char *code);
  void finishJob(Job &job, const char *reason);
  void failAll(const std::string &message);
  /// Until every answer is written (or `limit` passes).
  void waitForAnswers(std::chrono::seconds limit);
};

namespace {

std::string event(const nlohmann::ordered_json &value) { return "data: " + dump(value) + "\n\n"; }

/// What a choice's tool-call reader let out, streamed: its content in a chunk, its call deltas
/// in another (the logprobs of the tokens in them with whichever goes first).
void sendStreamed(Job &job, Choice &c, int64_t index, const StreamDelta &delta,
                  nlohmann::ordered_json logprobs) {
  // Tokens the reader held back keep their logprobs until a chunk carries their text (or the
  // last one, which carries what is left).
  appendLogprobs(c.heldLogprobs, logprobs);
  StreamDelta kept = delta;
  if (!job.api.parallelToolCalls) // one call at most: the model's first
    kept.calls.erase(std::remove_if(kept.calls.begin(), kept.calls.end(),
                                    [](const ToolCallDelta &d) { return d.index > 0; }),
                     kept.calls.end());
  if (kept.content.empty() && kept.calls.empty())
    return;
  logprobs = std::exchange(c.heldLogprobs, nullptr);
  if (!kept.content.empty())
    job.exchange->send(
        event(chunk(job.head, kept.content, nullptr, false, std::exchange(logprobs, nullptr),
                    index)));
  if (!kept.calls.empty()) {
    c.called = true;
    job.exchange->send(event(toolChunk(job.head, kept.calls, logprobs, index)));
  }
}

/// The prompt, once scored, where the request asks for it: choice 0's scores kept for every
/// choice and prompt_logprobs; a completion's echo (its text and, with logprobs, its tokens'
/// logprobs), sent as the choice's first chunk or put in front of its whole text.
void echoPrompt(Job &job, Choice &c, const EngineRequest &r, const Tokenizer &tokenizer) {
  if (std::exchange(c.echoed, true))
    return;
  if (&c == &job.choices.front()) {
    job.scoredPrompt = r.promptTokenLogprobs;
    if (job.api.promptLogprobs >= 0)
      job.promptLogprobs = promptLogprobsOf(tokenizer, job.scoredPrompt, job.api.promptLogprobs);
  }
  const RequestParams &params = job.api.params;
  if (!params.echo)
    return;
  nlohmann::ordered_json logprobs =
      params.logprobs >= 0 ? echoLogprobs(tokenizer, job.requests.front().prompt,
                                          job.scoredPrompt, params.logprobs, c.textOffset)
                           : nlohmann::ordered_json();
  if (job.api.stream) {
    job.exchange->send(event(chunk(job.head, job.api.promptText, nullptr, false, logprobs,
                                   &c - job.choices.data())));
  } else {
    c.all = job.api.promptText + c.all;
    c.logprobs = std::move(logprobs);
  }
}

/// The routes and the methods each takes; anything else is 404, or 405 with Allow.
const std::map<std::string, std::string> kRoutes = {{"/v1/completions", "POST"},
                                                    {"/v1/chat/completions", "POST"},
                                                    {"/tokenize", "POST"},
                                                    {"/detokenize", "POST"},
                                                    {"/v1/models", "GET"},
                                                    {"/health", "GET"},
                                                    {"/metrics", "GET"}};

/// Whether `given` is `secret`, in time that depends on neither's content: every byte of the
/// longer is visited whatever the first difference (a key must not leak through timing).
bool sameSecret(const std::string &given, const std::string &secret) {
  size_t n = std::max(given.size(), secret.size());
  unsigned char differ = given.size() != secret.size();
  for (size_t i = 0; i < n; ++i)
    differ |= (i < given.size() ? given[i] : 0) ^ (i < secret.size() ? secret[i] : 0);
  return differ == 0;
}

/// Whether the request carries one of `keys` as its Bearer token (every key compared).
bool authorized(const http::Request &req, const std::vector<std::string> &keys) {
  const std::string *header = req.header("Authorization");
  const std::string scheme = "Bearer ";
  bool bearer = header && header->size() > scheme.size() &&
                header->compare(0, scheme.size(), scheme) == 0;
  std::string token = bearer ? header->substr(scheme.size()) : std::string();
  bool found = false;
  for (const std::string &key : keys)
    found |= sameSecret(token, key);
  return bearer && found;
}

/// The client's X-Request-Id where it is one a log line can carry (1 to 128 of
/// [A-Za-z0-9._:-]), else a new one.
std::string requestIdOf(const http::Request &req, std::atomic<uint64_t> &counter) {
  const std::string *given = req.header("X-Request-Id");
  bool usable = given && !given->empty() && given->size() <= 128 &&
                std::all_of(given->begin(), given->end(), [](char c) {
                  return std::isalnum((unsigned char)c) || c == '.' || c == '_' || c == ':' ||
                         c == '-';
                });
  return usable ? *given : "tpc-" + std::to_string(++counter);
}

/// Whether `host` is this machine's loopback alone.
bool loopback(const std::string &host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

} // namespace

void Server::State::refuse(http::Exchange &exchange, const std::string &id,
                           const ApiError &error, const char *rejectedAs,
                           std::vector<std::pair<std::string, std::string>> headers) {
  http::Response response = jsonResponse(error.status, errorBody(error), id);
  response.headers.insert(response.headers.end(), headers.begin(), headers.end());
  if (rejectedAs) {
    std::lock_guard<std::mutex> lock(mutex);
    ++rejected[rejectedAs];
  }
  exchange.describe(id, "");
  exchange.respond(std::move(response));
}

void Server::State::cancel(const std::shared_ptr<Job> &job) {
  std::lock_guard<std::mutex> lock(mutex);
  if (job->finish || job->cancelled)
    return;
  job->cancelled = true;
  cancels.push_back(job);
  wake.notify_one();
}

void Server::State::handle(const std::shared_ptr<http::Exchange> &exchange) {
  const http::Request &req = exchange->request();
  std::string id = requestIdOf(req, requestIds);
  auto route = kRoutes.find(req.path);
  if (route == kRoutes.end()) {
    refuse(*exchange, id, {404, "no route " + req.method + " " + req.path + " (routes: POST "
                           "/v1/completions, POST /v1/chat/completions, POST /tokenize, POST "
                           "/detokenize, GET /v1/models, GET /health, GET /metrics)", "",
                           "not_found"}, "not_found");
    return;
  }
  std::vector<std::string> keys;
  bool metricsPublic;
  {
    std::lock_guard<std::mutex> lock(mutex); // run() sets the arguments
    keys = args.apiKeys;
    metricsPublic = args.metricsPublic;
  }
  // /health stays open (a load balancer's probe); /metrics too where --metrics-public.
  bool guarded = req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" ||
                 req.path == "/detokenize" || (req.path == "/metrics" && !metricsPublic);
  if (!keys.empty() && guarded && !authorized(req, keys)) {
    refuse(*exchange, id, {401, req.header("Authorization")
                                    ? "the API key given is not one this server takes"
                                    : "this server needs an API key: send 'Authorization: "
                                      "Bearer KEY'", "", "invalid_api_key"}, "unauthorized",
           {{"WWW-Authenticate", "Bearer"}});
    return;
  }
  bool get = route->second == "GET";
  if (req.method != route->second && !(get && req.method == "HEAD")) {
    refuse(*exchange, id, {405, req.method + " " + req.path + " is not allowed; use " +
                                    route->second, "", "method_not_allowed"},
           "method_not_allowed", {{"Allow", get ? "GET, HEAD" : "POST"}});
    return;
  }
  if (req.path == "/health") {
    std::string why;
    {
      std::lock_guard<std::mutex> lock(mutex);
      why = !failed.empty() ? "a rank was lost: " + failed
            : draining      ? std::string("shutting down")
            : !ready        ? std::string("loading: the ranks have not all met and loaded "
                                          "their weights yet")
                            : "";
    }
    exchange->describe(id, "");
    exchange->respond(jsonResponse(why.empty() ? 200 : 503,
                                   why.empty() ? "{\"status\":\"ok\"}" : errorBody({503, why}),
                                   id));
    return;
  }
  if (req.path == "/v1/models") {
    std::string body;
    {
      std::lock_guard<std::mutex> lock(mutex); // run() sets the arguments it reads
      body = dump(modelList(context, created));
    }
    exchange->describe(id, "");
    exchange->respond(jsonResponse(200, std::move(body), id));
    return;
  }
  if (req.path == "/metrics") {
    http::Response response = jsonResponse(200, metrics(), id);
    response.contentType = "text/plain; version=0.0.4";
    exchange->describe(id, "");
    exchange->respond(std::move(response));
    return;
  }
  // A completion, or the tokenizer's: admitted here (a slot while it is read), read on a
  // reader thread.
  ApiError refusal{503, ""};
  const char *as = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    refusal.message = !failed.empty() ? "a rank was lost: " + failed
                      : draining      ? std::string("the server is shutting down")
                      : !ready        ? std::string("the server is still loading")
                                      : "";
    as = ready ? "unavailable" : "loading";
    if (refusal.message.empty() && inFlight >= args.maxNumSeqs + args.maxQueue) {
      refusal = {503, "the server is at capacity: " + std::to_string(inFlight) +
                          " requests in flight (--max-num-seqs " +
                          std::to_string(args.maxNumSeqs) + " running, --max-queue " +
                          std::to_string(args.maxQueue) + " waiting)", "", "queue_full"};
      as = "queue_full";
    }
    if (refusal.message.empty())
      ++inFlight;
  }
  if (!refusal.message.empty()) {
    refuse(*exchange, id, refusal, as);
    return;
  }
  if (req.path == "/tokenize" || req.path == "/detokenize") {
    bool detokenize = req.path == "/detokenize";
    readers->post([this, exchange, id, detokenize] { tokenize(exchange, id, detokenize); });
    return;
  }
  auto job = std::make_shared<Job>();
  job->exchange = exchange;
  job->id = id;
  job->arrived = Clock::now();
  bool chat = req.path == "/v1/chat/completions";
  readers->post([this, job, chat] { complete(job, chat); });
}

void Server::State::tokenize(const std::shared_ptr<http::Exchange> &exchange,
                             const std::string &id, bool detokenize) {
  std::optional<ApiError> bad;
  std::string body;
  try {
    const std::string &request = exchange->request().body;
    if (detokenize) {
      std::string text;
      bad = readDetokenize(request, context, text);
      if (!bad)
        body = dump({{"prompt", text}});
    } else {
      std::vector<int64_t> ids;
      bool strings = false;
      bad = readTokenize(request, context, ids, strings);
      if (!bad)
        body = dump(tokenizeResponse(ids, context, strings));
    }
  } catch (const std::exception &e) { // as complete() does: the log has it, not the client
    std::fprintf(stderr, "tpc serve: request %s: internal error: %s\n", id.c_str(), e.what());
    bad = ApiError{500, "internal error; the server's log has it under request id " + id};
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    --inFlight;
  }
  if (bad) {
    refuse(*exchange, id, *bad,
           bad->status == 404 ? "not_found" : bad->status >= 500 ? "internal" : "invalid");
    return;
  }
  exchange->describe(id, "");
  exchange->respond(jsonResponse(200, std::move(body), id));
}

void Server::State::complete(const std::shared_ptr<Job> &job, bool chat) {
  try {
    if (std::optional<ApiError> bad =
            readRequest(job->exchange->request().body, chat, context, job->api)) {
      refuseAdmitted(*job, *bad, bad->status == 404 ? "not_found" : "invalid");
      return;
    }
    // (run() set the arguments before `ready`, which admission read under the mutex: they
    // no longer change, as readRequest's context.defaults assumes too)
    // One engine request a choice: with a seed, choice i samples with seed + i (vLLM's), so
    // that the choices differ and each is reproducible; choice 0 alone scores the prompt,
    // which the others find in the cache.
    EngineRequest request = engineRequest(spec, args, job->api.params);
    job->choices.resize(size_t(job->api.n));
    for (int64_t i = 0; i < job->api.n; ++i) {
      EngineRequest &choice = job->requests.emplace_back(request);
      if (request.sampling.seed)
        choice.sampling.seed = *request.sampling.seed + uint64_t(i);
      if (i > 0)
        choice.promptLogprobs = -1;
      // A model's own tool format may mark its calls with a special token (Mistral's
      // [TOOL_CALLS], Llama 3's <|python_tag|>): kept in the text the reader reads, as vLLM's
      // tool parsers keep them.
      std::optional<ToolFormat> format = job->api.toolFormat;
      bool keepSpecial = format && *format != ToolFormat::JsonList && *format != ToolFormat::Named;
      job->choices[size_t(i)].text.emplace(*context.tokenizer, job->api.params.stop,
                                           /*incremental=*/true,
                                           job->api.params.sampling.minTokens, !keepSpecial);
      job->choices[size_t(i)].keepSpecial = keepSpecial;
      if (job->api.stream && job->api.toolFormat)
        job->choices[size_t(i)].tools.emplace(*job->api.toolFormat, job->api.namedTool);
    }
  } catch (const std::exception &e) {
    internalError(*job, e);
    return;
  }
  // Structured outputs: the grammar compiles on a compiler thread, so that a slow one never
  // holds a reader (and every request queued behind it).
  if (job->api.structured.kind != StructuredSpec::None) {
    compilers->post([this, job, chat, queued = Clock::now()] { constrain(job, chat, queued); });
    return;
  }
  admit(job, chat);
}

void Server::State::constrain(const std::shared_ptr<Job> &job, bool chat,
                              Clock::time_point queued) {
  try {
    // One grammar compiled, a matcher a choice.
    std::string error;
    bool busy = false;
    std::vector<std::shared_ptr<TokenConstraint>> constraints =
        grammars->make(job->api.structured, job->api.n, error, &busy, queued);
    if (constraints.empty() && busy) { // another request's grammar: no fault of this one
      refuseAdmitted(*job, {503, error, "", "grammar_compiler_busy"}, "grammar_busy");
      return;
    }
    if (constraints.empty()) {
      refuseAdmitted(*job,
                     {400, "field '" + job->api.structured.field + "' cannot be compiled: " + error,
                      job->api.structured.field, ""},
                     "invalid");
      return;
    }
    for (size_t i = 0; i < constraints.size(); ++i)
      job->requests[i].constraint = std::move(constraints[i]);
  } catch (const std::exception &e) {
    internalError(*job, e);
    return;
  }
  admit(job, chat);
}

void Server::State::refuseAdmitted(Job &job, const ApiError &error, const char *rejectedAs) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    --inFlight;
  }
  refuse(*job.exchange, job.id, error, rejectedAs);
}

void Server::State::internalError(Job &job, const std::exception &e) {
  // What went wrong inside is the server's log's, under the request's id; the client learns
  // that id, not the server's internals (paths, exception texts).
  std::fprintf(stderr, "tpc serve: request %s: internal error: %s\n", job.id.c_str(), e.what());
  refuseAdmitted(job, {500, "internal error; the server's log has it under request id " + job.id},
                 "internal");
}

void Server::State::admit(const std::shared_ptr<Job> &job, bool chat) {
  http::Exchange &exchange = *job->exchange;
  job->usage.prompt = int64_t(job->requests.front().prompt.size());
  if (job->api.stream) {
    http::Response head = jsonResponse(200, "", job->id);
    head.contentType = "text/event-stream";
    head.headers.emplace_back("Cache-Control", "no-cache");
    exchange.open(std::move(head));
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    job->head = {std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(created) + "-" +
                     std::to_string(nextId++),
                 created, context.modelName, chat};
  }
  if (job->api.stream && chat) // the role first, as OpenAI's and vLLM's streams begin
    for (int64_t i = 0; i < job->api.n; ++i)
      exchange.send(event(chunk(job->head, "", nullptr, /*role=*/true, nullptr, i)));
  // (before the job is queued: where the client has gone already, this cancels it at once)
  std::weak_ptr<Job> weak = job;
  exchange.onGone([this, weak] {
    if (std::shared_ptr<Job> gone = weak.lock())
      cancel(gone);
  });
  std::lock_guard<std::mutex> lock(mutex);
  inbox.push_back(job);
  wake.notify_one();
}

void Server::State::answer(Job &job, const std::string &error, int status, const char *code) {
  if (job.answered)
    return;
  job.answered = true;
  http::Exchange &exchange = *job.exchange;
  exchange.describe(job.id, error.empty() || job.usage.completion > 0
                                ? "prompt_tokens=" + std::to_string(job.usage.prompt) +
                                      " completion_tokens=" +
                                      std::to_string(job.usage.completion)
                                : "");
  if (!job.api.stream) {
    std::vector<ChoiceResult> choices;
    for (Choice &c : job.choices) {
      ChoiceResult &result = choices.emplace_back(
          ChoiceResult{std::move(c.all), c.finish, std::move(c.logprobs), {}});
      if (!job.api.toolFormat)
        continue;
      // Read back into calls; output that does not parse stays the content, as it came.
      ParsedOutput parsed = parseToolCalls(*job.api.toolFormat, result.text, job.api.namedTool);
      if (!parsed.error.empty())
        continue;
      if (!job.api.parallelToolCalls && parsed.calls.size() > 1)
        parsed.calls.resize(1);
      result.text = std::move(parsed.content);
      result.toolCalls = std::move(parsed.calls);
      if (!result.toolCalls.empty())
        result.finishReason = finishWithCalls(*job.api.toolFormat, result.finishReason);
    }
    exchange.respond(
        error.empty()
            ? jsonResponse(200, dump(response(job.head, choices, job.usage, job.promptLogprobs)),
                           job.id)
            : jsonResponse(status, errorBody({status, error, "", code}), job.id));
    return;
  }
  // In-band, then the end: a stream's client sees why. (Each choice's last chunk went when
  // it finished.)
  if (!error.empty()) {
    exchange.send("data: " + errorBody({status, error, "", code}) + "\n\ndata: [DONE]\n\n");
  } else {
    std::string out;
    if (job.api.includeUsage)
      out += event(usageChunk(job.head, job.usage));
    exchange.send(out + "data: [DONE]\n\n");
  }
  exchange.end();
}

std::string Server::State::metrics() {
  std::lock_guard<std::mutex> lock(mutex);
  std::string out, model = "model_name=\"" + context.modelName + "\"";
  auto metric = [&](const char *name, const char *type, const char *help) {
    out += std::string("# HELP tpc:") + name + " " + help + "\n# TYPE tpc:" + name + " " + type +
           "\n";
  };
  auto sample = [&](const std::string &name, const std::string &labels, double value) {
    char number[64];
    std::snprintf(number, sizeof number, "%.17g", value);
    out += "tpc:" + name + "{" + labels + "} " + number + "\n";
  };
  metric("num_requests_running", "gauge", "Requests in the engine's running batch.");
  sample("num_requests_running", model, double(running));
  metric("num_requests_waiting", "gauge", "Requests admitted and waiting to run.");
  sample("num_requests_waiting", model, double(waiting));
  metric("kv_cache_blocks_used", "gauge", "Blocks of the paged KV cache held by sequences.");
  sample("kv_cache_blocks_used", model, double(blocksUsed));
  metric("kv_cache_blocks_total", "gauge", "Blocks of the paged KV cache.");
  sample("kv_cache_blocks_total", model, double(blocksTotal));
  metric("kv_cache_blocks_cached", "gauge",
         "Blocks held by no sequence that keep a cached prefix (evicted when needed).");
  sample("kv_cache_blocks_cached", model, double(blocksCached));
  metric("prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache (each admission of a sequence).");
  sample("prefix_cache_queries_total", model, double(prefixQueries));
  metric("prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.");
  sample("prefix_cache_hits_total", model, double(prefixHits));
  metric("num_preemptions_total", "counter",
         "Sequences preempted (their KV blocks taken back) to be recomputed.");
  sample("num_preemptions_total", model, double(preemptions));
  metric("prompt_tokens_total", "counter", "Prompt tokens of the requests run.");
  sample("prompt_tokens_total", model, double(promptTokens));
  metric("generation_tokens_total", "counter", "Tokens generated.");
  sample("generation_tokens_total", model, double(generationTokens));
  metric("request_success_total", "counter", "Requests finished, by finish reason.");
  for (const char *reason : {"stop", "length", "abort", "error"})
    sample("request_success_total", model + ",finished_reason=\"" + reason + "\"",
           double(finished[reason]));
  metric("requests_rejected_total", "counter", "Requests refused, by reason.");
  // (the connection layer refuses a body over the limit before any route sees it)
  rejected["body_too_large"] = http ? http->stats().bodiesTooLarge : 0;
  for (const char *reason : {"invalid", "not_found", "method_not_allowed", "body_too_large",
                             "queue_full", "loading", "unavailable", "internal", "unauthorized",
                             "grammar_busy"})
    sample("requests_rejected_total", model + ",reason=\"" + reason + "\"",
           double(rejected[reason]));
  if (http) {
    http::Stats c = http->stats();
    metric("http_connections_open", "gauge", "Client connections open.");
    sample("http_connections_open", model, double(c.open));
    metric("http_connections_max", "gauge", "Client connections that may be open at once.");
    sample("http_connections_max", model, double(http->maxConnections()));
    metric("http_connections_refused_total", "counter",
           "Connections refused (503, closed) past --max-connections.");
    sample("http_connections_refused_total", model, double(c.refused));
    metric("http_connections_closed_total", "counter",
           "Connections the server closed, by reason: a deadline passed (a request's head or "
           "body, an idle connection, an answer's write) or the bytes were not HTTP it reads.");
    for (auto [reason, count] : {std::pair<const char *, uint64_t>{"header_timeout",
                                                                   c.headerTimeouts},
                                 {"body_timeout", c.bodyTimeouts},
                                 {"idle", c.idleClosed},
                                 {"write_timeout", c.writeTimeouts},
                                 {"bad_request", c.badRequests}})
      sample("http_connections_closed_total", model + ",reason=\"" + reason + "\"",
             double(count));
  }
  auto histogram = [&](const char *name, const char *help, const Histogram &h) {
    metric(name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      char le[32];
      if (i < h.bounds.size())
        std::snprintf(le, sizeof le, "%g", h.bounds[i]);
      sample(std::string(name) + "_bucket",
             model + ",le=\"" + (i < h.bounds.size() ? le : "+Inf") + "\"", double(cumulative));
    }
    sample(std::string(name) + "_sum", model, h.sum);
    sample(std::string(name) + "_count", model, double(h.count));
  };
  histogram("time_to_first_token_seconds", "Seconds from arrival to the first token.", ttft);
  histogram("inter_token_latency_seconds", "Seconds between a request's tokens.", itl);
  histogram("e2e_request_latency_seconds", "Seconds from arrival to the last token.", e2e);
  return out;
}

void Server::State::finishJob(Job &job, const char *reason) {
  // Under the mutex.
  job.finish = reason;
  --inFlight;
  ++finished[reason];
  e2e.observe(secondsSince(job.arrived));
}

void Server::State::failAll(const std::string &message) {
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard<std::mutex> lock(mutex);
    failed = message;
    left.swap(inbox);
  }
  // Every job not started is told.
  for (auto &job : left)
    answer(*job, message, 503, "engine_failed");
  wake.notify_all();
}

void Server::State::waitForAnswers(std::chrono::seconds limit) {
  auto until = Clock::now() + limit;
  while (http && http->stats().exchanges > 0 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

std::unique_ptr<Server> Server::start(const ModelSpec &spec, const Args &args,
                                      std::string &error) {
  size_t colon = args.serve.rfind(':');
  int port = -1;
  if (colon != std::string::npos) {
    char *end = nullptr;
    long p = std::strtol(args.serve.c_str() + colon + 1, &end, 10);
    if (end && *end == '\0' && end != args.serve.c_str() + colon + 1 && p >= 0 && p <= 65535)
      port = int(p);
  }
  if (port < 0 || colon == 0) {
    error = "--serve " + args.serve + " is not HOST:PORT (a port from 0 to 65535)";
    return nullptr;
  }
  std::string host = args.serve.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') // [::1]
    host = host.substr(1, host.size() - 2);
  std::unique_ptr<Server> server(new Server());
  server->state = std::make_unique<State>(spec, args);
  State &s = *server->state;
  s.created = int64_t(std::time(nullptr));
  s.context.spec = &spec;
  s.context.defaults = &s.args;
  s.context.modelName = args.servedModelName;
  if (s.context.modelName.empty()) { // the checkpoint directory's (or file's) name
    std::string path = args.weights;
    while (path.size() > 1 && path.back() == '/')
      path.pop_back();
    s.context.modelName = path.substr(path.rfind('/') == std::string::npos ? 0
                                                                            : path.rfind('/') + 1);
    if (s.context.modelName.empty())
      s.context.modelName = spec.name;
  }
  http::Limits limits;
  limits.maxConnections = args.maxConnections;
  limits.header = std::chrono::seconds(args.headerTimeout);
  limits.body = std::chrono::seconds(args.bodyTimeout);
  limits.keepAlive = std::chrono::seconds(args.keepAliveTimeout);
  limits.write = std::chrono::seconds(args.writeTimeout);
  limits.maxBodyBytes = kMaxBodyBytes;
  std::string why;
  s.http = http::Server::bind(
      host, port, limits, "tpc serve",
      [](int status, const std::string &message) { return errorBody({status, message}); }, why);
  if (!s.http) {
    error = "--serve " + args.serve + ": cannot listen there (" + why + ")";
    return nullptr;
  }
  std::signal(SIGPIPE, SIG_IGN); // a client gone: the write fails instead
  std::signal(SIGTERM, onTerminate);
  std::signal(SIGINT, onTerminate);
  s.readers = std::make_unique<Workers>(kReaders);
  s.compilers = std::make_unique<Workers>(kCompilers);
  s.address = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
              std::to_string(s.http->port());
  s.http->start([&s](std::shared_ptr<http::Exchange> exchange) { s.handle(exchange); });
  std::printf("listening on %s\n", s.address.c_str());
  std::fflush(stdout);
  if (args.apiKeys.empty() && !loopback(host))
    std::fprintf(stderr, "tpc serve: warning: %s is reachable beyond this machine and has no "
                         "--api-key: anyone who reaches it can use it\n",
                 s.address.c_str());
  return server;
}

Server::~Server() {
  if (!state)
    return;
  state->http.reset(); // no handler runs after this
  state->readers.reset();
  state->compilers.reset(); // (after the readers, which hand it jobs)
}

int Server::run(const Args &finalArgs, Backend &backend, const RankInfo &rank, const Group &group,
                const Fault &fault) {
  State &s = *state;
  const ModelSpec &spec = s.spec;
  {
    std::lock_guard<std::mutex> lock(s.mutex); // the HTTP threads read it (the defaults)
    s.args = finalArgs;
  }
  const Args &args = s.args;

  Engine engine(spec, backend, rank, engineLimits(spec, args));
  // The tokenizer, the chat template and the grammars take seconds to read under a sanitizer,
  // longer than a short --timeout: rank 0 reads them beside idle steps.
  std::string error;
  bool prepared = false;
  try {
    prepared = engine.idleWhile([&] {
      slowFault(fault);
      s.context.tokenizer = loadTokenizer(args.weights, spec.vocab, s.gguf, error);
      if (!s.context.tokenizer)
        return false;
      s.context.chatTemplate =
          s.gguf ? loadChatTemplateGguf(*s.gguf, s.context.chatTemplateError)
                 : loadChatTemplate(checkpointDir(args.weights), s.context.chatTemplateError);
      // The grammars end where the model's end-of-sequence ids may come (a request's own
      // stop ids still end it anywhere).
      s.grammars = std::make_unique<Grammars>(*s.context.tokenizer, spec.vocab,
                                              engineRequest(spec, args, {}).stopIds);
      return true;
    });
  } catch (const std::exception &e) {
    std::string message = describeFailure(e, group.peers(), group.comm->lostPeers(), spec.name,
                                          "starting to serve");
    s.failAll(message);
    return group.stop(message);
  }
  if (!prepared) {
    std::string message = "tpc serve needs the checkpoint's tokenizer: " + error;
    engine.stop(); // the peers leave
    s.failAll(message);
    return group.stop(message);
  }

  // By engine handle: the job and which of its choices.
  struct Running {
    std::shared_ptr<Job> job;
    size_t choice;
  };
  std::unordered_map<size_t, Running> running;
  std::vector<size_t> done;
  EngineHooks hooks;
  hooks.beforeStep = [&](int64_t n) { strikeFault(fault, 0, backend, n); };
  hooks.onToken = [&](size_t handle, int64_t id) {
    const Running &at = running.at(handle);
    Job &job = *at.job;
    Choice &c = job.choices[at.choice];
    const EngineRequest &r = engine.request(handle);
    echoPrompt(job, c, r, *s.context.tokenizer);
    // A special stop id (the end of sequence) ends the text without its own, as vLLM's.
    bool hidden = c.keepSpecial &&
                  std::find(r.stopIds.begin(), r.stopIds.end(), id) != r.stopIds.end() &&
                  s.context.tokenizer->decode({id}, /*skipSpecial=*/true).empty();
    std::string piece = hidden ? std::string() : c.text->push(id);
    auto now = Clock::now();
    ++job.usage.completion;
    ++c.tokens;
    if (job.api.stream && !piece.empty() && c.tools) // content and calls, as they come
      sendStreamed(job, c, int64_t(at.choice), c.tools->feed(piece),
                   unshownLogprobs(job, c, r, *s.context.tokenizer));
    else if (job.api.stream && !piece.empty()) // queued for the I/O thread: never a wait here
      job.exchange->send(event(chunk(job.head, piece, nullptr, false,
                                     unshownLogprobs(job, c, r, *s.context.tokenizer),
                                     int64_t(at.choice))));
    c.all += piece;
    std::lock_guard<std::mutex> lock(s.mutex);
    ++s.generationTokens;
    if (job.usage.completion == 1) // the request's first token, of whichever choice
      s.ttft.observe(std::chrono::duration<double>(now - job.arrived).count());
    else if (c.tokens > 1) // between a choice's own tokens
      s.itl.observe(std::chrono::duration<double>(now - c.lastToken).count());
    c.lastToken = now;
    return c.text->stopped();
  };
  // A choice's end: the rest of its text and logprobs, its last chunk. Where it failed (its
  // logits not finite), that is the request's answer: the choices still running are aborted.
  auto finishChoice = [&](size_t handle) {
    const Running &at = running.at(handle);
    Job &job = *at.job;
    Choice &c = job.choices[at.choice];
    if (c.finish) // (aborted with a sibling that failed)
      return;
    std::string tail = c.text->finish();
    c.all += tail;
    const EngineRequest &r = engine.request(handle);
    c.finish = r.finishReason;
    if (at.choice == 0)
      job.usage.cached = r.cachedTokens;
    if (r.error.empty())
      echoPrompt(job, c, r, *s.context.tokenizer);
    else if (job.error.empty())
      job.error = r.error;
    nlohmann::ordered_json rest = unshownLogprobs(job, c, r, *s.context.tokenizer);
    if (!job.api.stream)
      appendLogprobs(c.logprobs, rest); // after the echoed prompt's, where there are
    else if (r.error.empty() && c.tools) { // what the reader held back, then the end
      StreamDelta last = c.tools->feed(tail);
      StreamDelta end = c.tools->finish();
      last.content += end.content;
      last.calls.insert(last.calls.end(), end.calls.begin(), end.calls.end());
      sendStreamed(job, c, int64_t(at.choice), last, std::move(rest));
      // Calls already sent cannot be taken back where the output then turned out malformed:
      // its finish reason is the engine's, as a whole answer's (which has no calls) is.
      const char *finish = c.called && c.tools->error().empty()
                               ? finishWithCalls(*job.api.toolFormat, c.finish)
                               : c.finish;
      job.exchange->send(event(chunk(job.head, "", finish, false,
                                     std::exchange(c.heldLogprobs, nullptr),
                                     int64_t(at.choice))));
    } else if (r.error.empty()) // the choice's last chunk
      job.exchange->send(event(chunk(job.head, tail, c.finish, false, rest, int64_t(at.choice))));
    done.push_back(handle);
    --job.unfinished;
    if (job.error.empty())
      return;
    for (Choice &other : job.choices) {
      auto it = running.find(other.handle);
      if (other.finish || it == running.end() || it->second.job.get() != &job)
        continue;
      engine.abort(other.handle);
      other.finish = "abort";
      done.push_back(other.handle);
      --job.unfinished;
    }
  };
  hooks.onFinish = [&](size_t handle) {
    std::shared_ptr<Job> job = running.at(handle).job;
    bool first = running.at(handle).choice == 0;
    finishChoice(handle);
    if (first) // choices with nothing to compute (max_tokens 0) waited for its scored prompt
      for (size_t waiting : std::exchange(job->deferred, {}))
        finishChoice(waiting);
    if (job->unfinished > 0)
      return;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.finishJob(*job, job->error.empty() ? job->choices.front().finish : "error");
    }
    s.answer(*job, job->error, 500, "request_failed");
  };
  auto forgetDone = [&] {
    for (size_t handle : done) {
      engine.forget(handle);
      running.erase(handle);
    }
    done.clear();
  };
  auto heartbeat = engine.heartbeat();
  auto lastStep = Clock::now();
  std::optional<Clock::time_point> drainUntil;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.ready = true;
    s.blocksTotal = engine.totalBlocks();
  }
  std::string mesh = spec.stages > 1 ? "pp " + std::to_string(spec.stages) + " x " : "";
  std::fprintf(stderr, "tpc serve: ready on %s (model '%s', %stp %lld)\n", s.address.c_str(),
               s.context.modelName.c_str(), mesh.c_str(), (long long)spec.tp);
  try {
    for (;;) {
      std::deque<std::shared_ptr<Job>> fresh;
      std::vector<std::shared_ptr<Job>> cancelled;
      {
        std::lock_guard<std::mutex> lock(s.mutex);
        fresh.swap(s.inbox);
        cancelled.swap(s.cancels);
        if (terminateRequested && !s.draining) {
          s.draining = true;
          drainUntil = Clock::now() + std::chrono::seconds(args.drainSeconds);
          std::fprintf(stderr, "tpc serve: draining: %lld requests in flight, up to %lld s\n",
                       (long long)s.inFlight, (long long)args.drainSeconds);
        }
      }
      for (auto &job : fresh) {
        {
          std::lock_guard<std::mutex> lock(s.mutex);
          if (job->cancelled) { // gone before it started
            s.finishJob(*job, "abort");
            continue;
          }
          s.promptTokens += uint64_t(job->usage.prompt);
        }
        // Choice 0 first; the others once its prompt is computed, to find it in the cache.
        job->submitted = true;
        job->unfinished = job->choices.size();
        for (size_t i = 0; i < job->choices.size(); ++i) {
          size_t handle = i == 0 ? engine.submit(job->requests[i])
                                 : engine.submitAfter(job->requests[i], job->choices[0].handle);
          job->choices[i].handle = handle;
          running[handle] = {job, i};
          const EngineRequest &r = engine.request(handle);
          if (r.finishReason && !r.error.empty()) {
            // Refused at submit (what readRequest lets through cannot be: a guard); choice 0,
            // since every choice is the same request, else those before it are taken back.
            for (size_t j = 0; j < i; ++j) {
              engine.abort(job->choices[j].handle);
              engine.forget(job->choices[j].handle);
              running.erase(job->choices[j].handle);
            }
            {
              std::lock_guard<std::mutex> lock(s.mutex);
              s.finishJob(*job, r.finishReason);
            }
            s.answer(*job, r.error, 400, "invalid_request");
            engine.forget(handle);
            running.erase(handle);
            job->unfinished = 0;
            break;
          }
          if (r.finishReason && i > 0 && !job->choices[0].finish)
            job->deferred.push_back(handle); // an echo of nothing: shown with choice 0's prompt
          else if (r.finishReason) // nothing to compute (an echo of max_tokens 0): done
            hooks.onFinish(handle);
        }
      }
      forgetDone();
      auto abortJob = [&](const std::shared_ptr<Job> &job, const std::string &why) {
        if (!job->submitted || job->unfinished == 0)
          return; // finished already
        job->unfinished = 0;
        for (Choice &c : job->choices) {
          auto it = running.find(c.handle);
          if (it == running.end() || it->second.job != job)
            continue; // (finished)
          engine.abort(c.handle);
          engine.forget(c.handle);
          running.erase(it);
        }
        {
          std::lock_guard<std::mutex> lock(s.mutex);
          s.finishJob(*job, "abort");
        }
        if (!why.empty()) // (a client that cancelled is gone: nobody to tell)
          s.answer(*job, why, 503, "engine_failed");
      };
      for (auto &job : cancelled)
        abortJob(job, "");
      if (drainUntil && Clock::now() > *drainUntil) {
        std::vector<std::shared_ptr<Job>> left;
        for (auto &[handle, at] : running)
          left.push_back(at.job);
        for (auto &job : left)
          abortJob(job, "the server is shutting down: --drain-seconds ran out");
      }
      if (engine.busy()) {
        engine.step(hooks);
        lastStep = Clock::now();
        forgetDone();
      } else if (s.draining) {
        break;
      } else {
        std::unique_lock<std::mutex> lock(s.mutex);
        s.wake.wait_for(lock, std::chrono::milliseconds(100), [&] {
          return !s.inbox.empty() || !s.cancels.empty() || terminateRequested;
        });
        lock.unlock();
        if (Clock::now() - lastStep >= heartbeat) {
          engine.idle();
          lastStep = Clock::now();
        }
      }
      std::lock_guard<std::mutex> lock(s.mutex);
      s.running = engine.runningCount();
      s.waiting = engine.waitingCount() + int64_t(s.inbox.size());
      s.blocksUsed = engine.totalBlocks() - engine.freeBlocks();
      s.blocksCached = engine.cachedBlocks();
      s.prefixQueries = engine.prefixQueries();
      s.prefixHits = engine.prefixHits();
      s.preemptions = engine.preemptions();
    }
  } catch (const std::exception &e) {
    std::string message = describeFailure(e, group.peers(), group.comm->lostPeers(), spec.name,
                                          "serving");
    // /health turns 503 before any client hears of the failure, so a client that checks it
    // on the error event sees the rank lost.
    s.failAll(message);
    for (auto &[handle, at] : running)
      s.answer(*at.job, message, 503, "engine_failed");
    // The open requests are answered before the process goes (a few seconds at most), and
    // /health says 503 a moment longer, for whoever checks it.
    s.waitForAnswers(std::chrono::seconds(3));
    std::this_thread::sleep_for(std::chrono::seconds(2));
    return group.stop(message);
  }
  engine.stop();
  s.waitForAnswers(std::chrono::seconds(3));
  std::fprintf(stderr, "tpc serve: stopped; %llu prompt and %llu generated tokens served\n",
               (unsigned long long)s.promptTokens, (unsigned long long)s.generationTokens);
  return 0;
}

int follow(const ModelSpec &spec, const Args &args, Backend &backend, const RankInfo &rank,
           const Group &group, const Fault &fault) {
  std::signal(SIGTERM, SIG_IGN);
  std::signal(SIGINT, SIG_IGN);
  Engine engine(spec, backend, rank, engineLimits(spec, args));
  EngineHooks hooks;
  hooks.beforeStep = [&](int64_t n) { strikeFault(fault, rank.worldRank(), backend, n); };
  try {
    engine.follow(hooks);
  } catch (const std::exception &e) {
    return group.stop(describeFailure(e, group.peers(), group.comm->lostPeers(), spec.name,
                                      "serving"));
  }
  return 0;
}

} // namespace tpcrt::serve

// The server (server.h). Threads: cpp-httplib's pool answers HTTP; rank 0's main thread runs
// the engine. They share one mutex: the HTTP side queues a checked request (a Job) in the
// inbox and waits on the job for text; the engine side submits what the inbox holds, steps,
// and appends each token's text to its job. A client that goes away (a streamed response whose
// write fails) queues its job for an abort, which frees its sequence's slot and KV blocks at
// the start of the next step.
//
// Admission is bounded: at most --max-num-seqs + --max-queue requests are in flight (running
// or waiting); one more is refused at once with 503 and Retry-After, never queued without
// bound.
//
// Failures: a collective that fails (a rank died or hung past --timeout) ends the engine; every
// open request is told (an error event then [DONE] in a stream, 503 otherwise), /health turns
// 503, and the process exits non-zero so that a supervisor restarts the whole group.
#include "server.h"

#include "api.h"

#include "tpcrt/chat_template.h"
#include "tpcrt/gguf.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace tpcrt::serve {

namespace {

using Clock = std::chrono::steady_clock;

/// A body larger than this is refused with 413 before it is read.
constexpr size_t kMaxBodyBytes = size_t(4) << 20;
/// HTTP worker threads: each open stream holds one while it runs.
constexpr size_t kHttpThreads = 64;

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

/// One API request, from the HTTP thread that read it to the engine and back.
struct Job {
  ApiRequest api;
  ResponseHead head;
  EngineRequest request;              // moved into the engine when submitted
  std::optional<GeneratedText> text;  // the engine thread's alone
  Clock::time_point arrived, lastToken;
  size_t handle = 0;
  bool submitted = false;
  // Under the server's mutex:
  std::string pending;                // text not yet handed to the client
  std::string all;                    // the whole text, for a non-streamed response
  Usage usage;
  const char *finish = nullptr;       // "stop", "length" or "abort", once finished
  std::string error;                  // the server failed under it, or it failed alone:
  int errorStatus = 503;              // 500 for the latter (its logits not finite)
  const char *errorCode = "engine_failed";
  bool cancelled = false;
  std::condition_variable changed;
};

} // namespace

struct Server::State {
  const ModelSpec &spec;
  Args args;
  ApiContext context;
  std::unique_ptr<GgufFile> gguf; // a GGUF checkpoint's tokenizer and template live in it
  httplib::Server http;
  std::thread listener;
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
  int64_t openHandlers = 0; // HTTP handlers (and streams) not done yet
  std::condition_variable handlersDone;

  // /metrics, under the mutex.
  int64_t running = 0, waiting = 0, blocksUsed = 0, blocksTotal = 0, preemptions = 0;
  uint64_t promptTokens = 0, generationTokens = 0;
  std::map<std::string, uint64_t> finished, rejected; // by reason
  Histogram ttft{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                  5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0}};
  Histogram itl{{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                 7.5, 10.0, 20.0, 40.0, 80.0}};
  Histogram e2e{{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}};

  State(const ModelSpec &spec, const Args &args) : spec(spec), args(args) {}

  // The HTTP side.
  void routes();
  void complete(const httplib::Request &req, httplib::Response &res, bool chat);
  void reply(httplib::Response &res, const ApiError &error, const char *rejectedAs);
  std::string metrics();
  void cancel(const std::shared_ptr<Job> &job);
  void handlerDone();

  // The engine side, on rank 0's main thread.
  void finishJob(Job &job, const char *reason);
  void failAll(const std::string &message);
};

namespace {

/// Until the listener thread accepts (at most a second): cpp-httplib's stop() does nothing
/// before then, and the listener would run on.
void waitUntilListening(const httplib::Server &http) {
  for (int i = 0; i < 1000 && !http.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

std::string event(const nlohmann::ordered_json &value) { return "data: " + dump(value) + "\n\n"; }

/// The routes and the methods each takes; anything else is 404, or 405 with Allow.
const std::map<std::string, std::string> kRoutes = {{"/v1/completions", "POST"},
                                                    {"/v1/chat/completions", "POST"},
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
bool authorized(const httplib::Request &req, const std::vector<std::string> &keys) {
  const std::string header = req.get_header_value("Authorization");
  const std::string scheme = "Bearer ";
  bool bearer = header.size() > scheme.size() && header.compare(0, scheme.size(), scheme) == 0;
  std::string token = bearer ? header.substr(scheme.size()) : std::string();
  bool found = false;
  for (const std::string &key : keys)
    found |= sameSecret(token, key);
  return bearer && found;
}

/// What the access log says of the request this connection's thread is answering: cpp-httplib
/// runs one request, from routing to its logger (after a stream's last chunk), on one thread.
struct AccessRecord {
  std::string id;
  Clock::time_point start;
  int64_t prompt = -1, completion = -1; // the usage, where a completion ran
};
thread_local AccessRecord access;

/// The client's X-Request-Id where it is one a log line can carry (1 to 128 of
/// [A-Za-z0-9._:-]), else a new one.
std::string requestIdOf(const httplib::Request &req, std::atomic<uint64_t> &counter) {
  std::string given = req.get_header_value("X-Request-Id");
  bool usable = !given.empty() && given.size() <= 128 &&
                std::all_of(given.begin(), given.end(), [](char c) {
                  return std::isalnum((unsigned char)c) || c == '.' || c == '_' || c == ':' ||
                         c == '-';
                });
  return usable ? given : "tpc-" + std::to_string(++counter);
}

/// Whether `host` is this machine's loopback alone.
bool loopback(const std::string &host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

} // namespace

void Server::State::reply(httplib::Response &res, const ApiError &error,
                          const char *rejectedAs) {
  res.status = error.status;
  if (error.status == 503)
    res.set_header("Retry-After", "1");
  res.set_content(errorBody(error), "application/json");
  if (rejectedAs) {
    std::lock_guard<std::mutex> lock(mutex);
    ++rejected[rejectedAs];
  }
}

void Server::State::handlerDone() {
  std::lock_guard<std::mutex> lock(mutex);
  if (--openHandlers == 0)
    handlersDone.notify_all();
}

void Server::State::cancel(const std::shared_ptr<Job> &job) {
  std::lock_guard<std::mutex> lock(mutex);
  if (job->finish || job->cancelled)
    return;
  job->cancelled = true;
  cancels.push_back(job);
  wake.notify_one();
}

void Server::State::routes() {
  http.set_pre_routing_handler([this](const httplib::Request &req, httplib::Response &res) {
    access = {requestIdOf(req, requestIds), Clock::now()};
    res.set_header("X-Request-Id", access.id);
    auto route = kRoutes.find(req.path);
    if (route == kRoutes.end()) {
      reply(res, {404, "no route " + req.method + " " + req.path + " (routes: POST "
                  "/v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health, "
                  "GET /metrics)", "", "not_found"}, "not_found");
      return httplib::Server::HandlerResponse::Handled;
    }
    // /health stays open (a load balancer's probe); /metrics too where --metrics-public.
    bool guarded = req.path.rfind("/v1/", 0) == 0 || (req.path == "/metrics" && !args.metricsPublic);
    if (!args.apiKeys.empty() && guarded && !authorized(req, args.apiKeys)) {
      res.set_header("WWW-Authenticate", "Bearer");
      reply(res, {401, req.has_header("Authorization")
                           ? "the API key given is not one this server takes"
                           : "this server needs an API key: send 'Authorization: Bearer KEY'",
                  "", "invalid_api_key"},
            "unauthorized");
      return httplib::Server::HandlerResponse::Handled;
    }
    bool get = route->second == "GET";
    if (req.method != route->second && !(get && req.method == "HEAD")) {
      res.set_header("Allow", get ? "GET, HEAD" : "POST");
      reply(res, {405, req.method + " " + req.path + " is not allowed; use " + route->second,
                  "", "method_not_allowed"}, "method_not_allowed");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.has_header("Content-Length") &&
        req.get_header_value<uint64_t>("Content-Length") > kMaxBodyBytes) {
      res.set_header("Connection", "close");
      reply(res, {413, "the body has " + req.get_header_value("Content-Length") +
                  " bytes, more than the limit of " + std::to_string(kMaxBodyBytes), "",
                  "body_too_large"}, "body_too_large");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // What the library answers by itself (a chunked body over the limit: 413; a request it
  // cannot parse: 400) gets an error body too.
  http.set_error_handler([](const httplib::Request &, httplib::Response &res) {
    if (res.body.empty())
      res.set_content(errorBody({res.status, res.status == 413
                                                 ? "the body is larger than the limit of " +
                                                       std::to_string(kMaxBodyBytes) + " bytes"
                                                 : "the request is not one HTTP/1.1 can carry "
                                                   "(status " + std::to_string(res.status) + ")"}),
                      "application/json");
  });
  // What went wrong inside is the server's log's, under the request's id; the client learns
  // that id, not the server's internals (paths, exception texts).
  http.set_exception_handler(
      [this](const httplib::Request &, httplib::Response &res, std::exception_ptr e) {
        std::string what = "an exception of no known type";
        try {
          std::rethrow_exception(e);
        } catch (const std::exception &ex) {
          what = ex.what();
        } catch (...) {
        }
        std::fprintf(stderr, "tpc serve: request %s: internal error: %s\n", access.id.c_str(),
                     what.c_str());
        reply(res, {500, "internal error; the server's log has it under request id " +
                             access.id},
              "internal");
      });
  // One line a request, once it is answered (a stream: after its last chunk).
  http.set_logger([](const httplib::Request &req, const httplib::Response &res) {
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - access.start).count();
    std::string usage = access.prompt < 0 ? ""
                                          : " prompt_tokens=" + std::to_string(access.prompt) +
                                                " completion_tokens=" +
                                                std::to_string(access.completion);
    std::fprintf(stderr, "tpc serve: request %s: %s %s %d%s %.1f ms\n", access.id.c_str(),
                 req.method.c_str(), req.path.c_str(), res.status, usage.c_str(), ms);
  });
  http.Get("/health", [this](const httplib::Request &, httplib::Response &res) {
    std::lock_guard<std::mutex> lock(mutex);
    std::string why = !failed.empty() ? "a rank was lost: " + failed
                      : draining      ? std::string("shutting down")
                      : !ready        ? std::string("loading: the ranks have not all met and "
                                                    "loaded their weights yet")
                                      : "";
    if (why.empty())
      res.set_content("{\"status\":\"ok\"}", "application/json");
    else {
      res.status = 503;
      res.set_content(errorBody({503, why}), "application/json");
    }
  });
  http.Get("/v1/models", [this](const httplib::Request &, httplib::Response &res) {
    std::lock_guard<std::mutex> lock(mutex); // run() sets the arguments it reads
    res.set_content(dump(modelList(context, created)), "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request &, httplib::Response &res) {
    res.set_content(metrics(), "text/plain; version=0.0.4");
  });
  http.Post("/v1/completions", [this](const httplib::Request &req, httplib::Response &res) {
    complete(req, res, /*chat=*/false);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request &req, httplib::Response &res) {
    complete(req, res, /*chat=*/true);
  });
}

void Server::State::complete(const httplib::Request &req, httplib::Response &res, bool chat) {
  auto job = std::make_shared<Job>();
  {
    std::lock_guard<std::mutex> lock(mutex);
    std::string why = !failed.empty() ? "a rank was lost: " + failed
                      : draining      ? std::string("the server is shutting down")
                      : !ready        ? std::string("the server is still loading")
                                      : "";
    if (!why.empty()) {
      ++rejected[ready ? "unavailable" : "loading"];
      res.status = 503;
      res.set_header("Retry-After", "1");
      res.set_content(errorBody({503, why}), "application/json");
      return;
    }
  }
  if (std::optional<ApiError> bad = readRequest(req.body, chat, context, job->api)) {
    reply(res, *bad, bad->status == 404 ? "not_found" : "invalid");
    return;
  }
  job->request = engineRequest(spec, args, job->api.params);
  job->text.emplace(*context.tokenizer, job->api.params.stop, /*incremental=*/true);
  job->usage.prompt = int64_t(job->request.prompt.size());
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (inFlight >= args.maxNumSeqs + args.maxQueue) {
      ++rejected["queue_full"];
      res.status = 503;
      res.set_header("Retry-After", "1");
      res.set_content(errorBody({503, "the server is at capacity: " +
                                          std::to_string(inFlight) + " requests in flight "
                                          "(--max-num-seqs " + std::to_string(args.maxNumSeqs) +
                                          " running, --max-queue " +
                                          std::to_string(args.maxQueue) + " waiting)",
                                 "", "queue_full"}),
                      "application/json");
      return;
    }
    ++inFlight;
    ++openHandlers;
    job->head = {std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(created) + "-" +
                     std::to_string(nextId++),
                 created, context.modelName, chat};
    job->arrived = Clock::now();
    inbox.push_back(job);
    wake.notify_one();
  }
  if (!job->api.stream) {
    std::unique_lock<std::mutex> lock(mutex);
    job->changed.wait(lock, [&] { return job->finish || !job->error.empty(); });
    if (!job->error.empty()) {
      res.status = job->errorStatus;
      res.set_content(errorBody({job->errorStatus, job->error, "", job->errorCode}),
                      "application/json");
    } else {
      res.set_content(dump(response(job->head, job->all, job->finish, job->usage)),
                      "application/json");
    }
    access.prompt = job->usage.prompt;
    access.completion = job->usage.completion;
    if (--openHandlers == 0)
      handlersDone.notify_all();
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job, first = true](size_t, httplib::DataSink &sink) mutable {
        std::string out;
        if (first && job->head.chat) // the role first, as OpenAI's and vLLM's streams begin
          out += event(chunk(job->head, "", nullptr, /*role=*/true));
        first = false;
        std::string text, error;
        const char *finish = nullptr;
        Usage usage;
        {
          std::unique_lock<std::mutex> lock(mutex);
          job->changed.wait_for(lock, std::chrono::milliseconds(200), [&] {
            return !job->pending.empty() || job->finish || !job->error.empty();
          });
          text.swap(job->pending);
          finish = job->finish;
          error = job->error;
          usage = job->usage;
        }
        if (!error.empty()) { // in-band, then the end: the client sees why
          out += "data: " + errorBody({job->errorStatus, error, "", job->errorCode}) +
                 "\n\ndata: [DONE]\n\n";
          sink.write(out.data(), out.size());
          sink.done();
          return true;
        }
        if (!text.empty() || finish)
          out += event(chunk(job->head, text, finish));
        if (finish) {
          if (job->api.includeUsage)
            out += event(usageChunk(job->head, usage));
          out += "data: [DONE]\n\n";
          access.prompt = usage.prompt;
          access.completion = usage.completion;
        }
        if (!out.empty() && !sink.write(out.data(), out.size()))
          return false; // the client is gone: the releaser aborts the request
        if (finish)
          sink.done();
        return true;
      },
      [this, job](bool success) {
        if (!success)
          cancel(job);
        handlerDone();
      });
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
  metric("num_preemptions_total", "counter",
         "Sequences preempted (their KV blocks taken back) to be recomputed.");
  sample("num_preemptions_total", model, double(preemptions));
  metric("prompt_tokens_total", "counter", "Prompt tokens of the requests run.");
  sample("prompt_tokens_total", model, double(promptTokens));
  metric("generation_tokens_total", "counter", "Tokens generated.");
  sample("generation_tokens_total", model, double(generationTokens));
  metric("request_success_total", "counter", "Requests finished, by finish reason.");
  for (const char *reason : {"stop", "length", "abort"})
    sample("request_success_total", model + ",finished_reason=\"" + reason + "\"",
           double(finished[reason]));
  metric("requests_rejected_total", "counter", "Requests refused, by reason.");
  for (const char *reason : {"invalid", "not_found", "method_not_allowed", "body_too_large",
                             "queue_full", "loading", "unavailable", "internal", "unauthorized"})
    sample("requests_rejected_total", model + ",reason=\"" + reason + "\"",
           double(rejected[reason]));
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
  job.changed.notify_all();
}

void Server::State::failAll(const std::string &message) {
  std::unique_lock<std::mutex> lock(mutex);
  failed = message;
  // Every job not finished is told; the handlers answer and return.
  for (auto &job : inbox) {
    job->error = message;
    job->changed.notify_all();
  }
  inbox.clear();
  wake.notify_all();
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
  s.http.new_task_queue = [] { return new httplib::ThreadPool(kHttpThreads); };
  s.http.set_payload_max_length(kMaxBodyBytes);
  s.http.set_read_timeout(30);
  s.http.set_write_timeout(30);
  s.http.set_keep_alive_timeout(5); // bounds how long a stop waits on idle connections
  s.http.set_keep_alive_max_count(1000);
  s.routes();
  std::signal(SIGPIPE, SIG_IGN); // a client gone: the write fails instead
  std::signal(SIGTERM, onTerminate);
  std::signal(SIGINT, onTerminate);
  if (port == 0) {
    port = s.http.bind_to_any_port(host);
    if (port < 0)
      port = 0;
  } else if (!s.http.bind_to_port(host, port)) {
    port = 0;
  }
  if (port == 0) {
    error = "--serve " + args.serve + ": cannot listen there (the address is not this "
            "machine's, or the port is taken)";
    return nullptr;
  }
  s.address = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
              std::to_string(port);
  s.listener = std::thread([&s] { s.http.listen_after_bind(); });
  waitUntilListening(s.http);
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
  waitUntilListening(state->http); // a stop() before the listener runs would not stop it
  state->http.stop();
  if (state->listener.joinable())
    state->listener.join();
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
  std::string error;
  s.context.tokenizer = loadTokenizer(args.weights, spec.vocab, s.gguf, error);
  if (!s.context.tokenizer) {
    std::string message = "tpc serve needs the checkpoint's tokenizer: " + error;
    engine.stop(); // the peers leave
    s.failAll(message);
    return group.stop(message);
  }
  s.context.chatTemplate =
      s.gguf ? loadChatTemplateGguf(*s.gguf, s.context.chatTemplateError)
             : loadChatTemplate(checkpointDir(args.weights), s.context.chatTemplateError);

  std::unordered_map<size_t, std::shared_ptr<Job>> running; // by engine handle
  std::vector<size_t> done;
  EngineHooks hooks;
  hooks.beforeStep = [&](int64_t n) { strikeFault(fault, 0, backend, n); };
  hooks.onToken = [&](size_t handle, int64_t id) {
    Job &job = *running.at(handle);
    std::string piece = job.text->push(id);
    auto now = Clock::now();
    std::lock_guard<std::mutex> lock(s.mutex);
    ++job.usage.completion;
    ++s.generationTokens;
    if (job.usage.completion == 1)
      s.ttft.observe(std::chrono::duration<double>(now - job.arrived).count());
    else
      s.itl.observe(std::chrono::duration<double>(now - job.lastToken).count());
    job.lastToken = now;
    job.pending += piece;
    job.all += piece;
    if (!piece.empty())
      job.changed.notify_all();
    return job.text->stopped();
  };
  hooks.onFinish = [&](size_t handle) {
    Job &job = *running.at(handle);
    std::string piece = job.text->finish();
    std::lock_guard<std::mutex> lock(s.mutex);
    job.pending += piece;
    job.all += piece;
    const EngineRequest &r = engine.request(handle);
    if (!r.error.empty()) { // this request alone failed; the others run on
      job.error = r.error;
      job.errorStatus = 500;
      job.errorCode = "request_failed";
    }
    s.finishJob(job, r.finishReason);
    done.push_back(handle);
  };
  // Idle steps keep the peers, waiting under --timeout, sure that rank 0 lives.
  auto heartbeat = std::chrono::milliseconds(std::min<int64_t>(1000, args.timeoutSeconds * 300));
  auto lastStep = Clock::now();
  std::optional<Clock::time_point> drainUntil;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.ready = true;
    s.blocksTotal = engine.totalBlocks();
  }
  std::fprintf(stderr, "tpc serve: ready on %s (model '%s', tp %lld)\n", s.address.c_str(),
               s.context.modelName.c_str(), (long long)spec.tp);
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
        std::lock_guard<std::mutex> lock(s.mutex);
        if (job->cancelled) { // gone before it started
          s.finishJob(*job, "abort");
          continue;
        }
        s.promptTokens += uint64_t(job->usage.prompt);
        job->handle = engine.submit(std::move(job->request));
        job->submitted = true;
        if (const EngineRequest &r = engine.request(job->handle); r.finishReason) {
          // Refused at submit (what readRequest lets through cannot be: a guard).
          job->error = r.error.empty() ? "the request asked for no tokens" : r.error;
          job->errorStatus = 400;
          job->errorCode = "invalid_request";
          s.finishJob(*job, r.finishReason);
          engine.forget(job->handle);
          continue;
        }
        running[job->handle] = job;
      }
      auto abortJob = [&](const std::shared_ptr<Job> &job, const std::string &why) {
        auto it = running.find(job->handle);
        if (!job->submitted || it == running.end() || it->second != job)
          return; // finished already
        engine.abort(job->handle);
        engine.forget(job->handle);
        running.erase(it);
        std::lock_guard<std::mutex> lock(s.mutex);
        job->error = why;
        s.finishJob(*job, "abort");
      };
      for (auto &job : cancelled)
        abortJob(job, "");
      if (drainUntil && Clock::now() > *drainUntil) {
        std::vector<std::shared_ptr<Job>> left;
        for (auto &[handle, job] : running)
          left.push_back(job);
        for (auto &job : left)
          abortJob(job, "the server is shutting down: --drain-seconds ran out");
      }
      if (engine.busy()) {
        engine.step(hooks);
        lastStep = Clock::now();
        for (size_t handle : done) {
          engine.forget(handle);
          running.erase(handle);
        }
        done.clear();
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
      s.preemptions = engine.preemptions();
    }
  } catch (const std::exception &e) {
    std::string message = describeFailure(e, group.peers(), group.comm->lostPeers(), spec.name,
                                          "serving");
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      for (auto &[handle, job] : running)
        job->error = message;
      for (auto &[handle, job] : running)
        job->changed.notify_all();
    }
    s.failAll(message);
    {
      // The open requests are answered before the process goes (a few seconds at most), and
      // /health says 503 a moment longer, for whoever checks it.
      std::unique_lock<std::mutex> lock(s.mutex);
      s.handlersDone.wait_for(lock, std::chrono::seconds(3), [&] { return s.openHandlers == 0; });
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));
    return group.stop(message);
  }
  engine.stop();
  {
    std::unique_lock<std::mutex> lock(s.mutex);
    s.handlersDone.wait_for(lock, std::chrono::seconds(3), [&] { return s.openHandlers == 0; });
  }
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
  hooks.beforeStep = [&](int64_t n) { strikeFault(fault, rank.rank, backend, n); };
  try {
    engine.follow(hooks);
  } catch (const std::exception &e) {
    return group.stop(describeFailure(e, group.peers(), group.comm->lostPeers(), spec.name,
                                      "serving"));
  }
  return 0;
}

} // namespace tpcrt::serve

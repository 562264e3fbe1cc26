"""Starts `tpc serve` and checks one side of it over loopback, with the standard library only.

    serve_check.py SCENARIO CHECKPOINT [tpc serve flags...]

The tpc binary is $TPC_BIN/tpc where TPC_BIN is set (the tests' %tpc_bin), else tpc on PATH.

Scenarios (each prints lines for FileCheck, and exits non-zero on what it cannot check):
  errors      every bad-input row gets its status and an OpenAI error body, never a 500
  template    (a checkpoint whose chat template raises for assistant messages first) the
              template's failure is a 400 naming it; a conversation it takes is answered
  stream      a stream's raw bytes: the role first, text pieces, finish_reason on the last
              content chunk, the usage chunk, [DONE]; a stop string met across chunks is
              never sent; the non-streamed answer is the streamed one; log-probabilities'
              shapes, streamed and not
  adjust      logit_bias and min_tokens change greedy answers as they say (run at tp 2)
  cache       the same chats (a shared system prompt, two turns each, greedy and seeded)
              with prefix caching and with --no-prefix-caching: the same answers, logprobs
              within 5e-5; cached_tokens the block-rounded shared prefix; /metrics' counters
              and gauges, idle: no block held
  churn       1,000 requests, 8 at a time, sharing beginnings: then, idle, no block held
  overload    (--max-num-seqs 1 --max-queue 1) three long requests at once: two 200 and one
              503 with Retry-After; healthy after, and the next is served
  disconnect  a client that reads three chunks of a long stream and closes: the running
              requests and KV blocks in /metrics are back at their baseline within a second
  fault       (TPC_FAULT kills a rank mid-stream) the stream ends with an error event and
              [DONE], /health answers 503, the server exits non-zero within --timeout, and
              none of its processes is left
  sigterm     (--timeout 2) idle for 3 s, still healthy; then SIGTERM with two streams in
              flight: both finish, new requests are refused, the server exits 0
  auth        (--api-key alpha, and TPC_API_KEY=beta,gamma in the environment) /v1/*,
              /tokenize, /detokenize and /metrics need one of the keys as a Bearer token,
              /health does not; no process's
              command line holds a key; then a server with --metrics-public as well
  hostile     (short deadlines: --header-timeout 2 --body-timeout 2 --keep-alive-timeout 2)
              what a hostile client sends, with a valid request between: max_tokens' overflowing
              relatives; idle, slow-header, slow-body and idle keep-alive sockets (/health stays
              fast, a completion is answered, the server closes each by its deadline); an
              oversized head; 10,000-deep JSON; invalid UTF-8; duplicate keys; a chunked body;
              pipelined requests; a client that stops reading a stream; a storm of cancels;
              then the KV blocks are back at their baseline and the server still answers
  beyond      (as root) in a network namespace made here, whose loopback also holds
              10.231.0.1: a server on that address without a key warns that anyone who
              reaches it can use it; one with --api-key does not; one on 127.0.0.1 does not.
              The namespace is removed at the end, whatever happened

The server is started here, with --port 0, and always stopped: every wait is bounded.
"""
import http.client
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

TIMEOUT = 120  # seconds any scenario may take, start-up included


def fail(message):
    print("FAILED: " + message)
    sys.exit(1)


class Server:
    def __init__(self, checkpoint, flags, env=None, prefix=(), host="127.0.0.1"):
        self.proc = subprocess.Popen(
            list(prefix) + [os.path.join(os.environ.get("TPC_BIN", ""), "tpc"), "serve", checkpoint, "--port", "0"] + flags, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.lines = []
        self.port = None
        ready = threading.Event()

        def read():
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                self.lines.append(line)
                m = re.search(r"listening on %s:(\d+)" % re.escape(host), line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(TIMEOUT) or self.port is None:
            self.stop()
            fail("no 'listening on' line:\n" + "\n".join(self.lines[-20:]))
        self.host = host
        if prefix:  # not reachable from here: its log says when it is ready
            deadline = time.time() + TIMEOUT
            while not any("tpc serve: ready on" in l for l in self.lines):
                if time.time() > deadline or self.proc.poll() is not None:
                    self.stop()
                    fail("never ready:\n" + "\n".join(self.lines[-20:]))
                time.sleep(0.1)
            return
        deadline = time.time() + TIMEOUT
        while self.get("/health")[0] != 200:
            if time.time() > deadline or self.proc.poll() is not None:
                self.stop()
                fail("never healthy:\n" + "\n".join(self.lines[-20:]))
            time.sleep(0.1)

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            c.request(method, path, body=data, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read().decode(errors="replace"), dict(r.getheaders())
        except OSError as e:
            return None, str(e), {}
        finally:
            c.close()

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body, timeout=60):
        return self.request("POST", path, body, {"Content-Type": "application/json"}, timeout)

    def metric(self, name, label=""):
        """The value of tpc:NAME (the sample whose labels hold `label`)."""
        status, text, _ = self.get("/metrics")
        if status != 200:
            fail("/metrics answered %s" % status)
        for labels, value in re.findall(r"^tpc:%s\{([^}]*)\} (\S+)$" % name, text, re.M):
            if label in labels:
                return float(value)
        fail("no metric %s{%s}" % (name, label))

    def wait(self, seconds):
        try:
            return self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if self.wait(30) is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def stream_events(port, path, body, on_event=None):
    """POSTs a streamed request on a raw socket; returns (status line, [event payloads])."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    data = json.dumps(body).encode()
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(data), data))
    f = s.makefile("rb")
    status = f.readline().decode().strip()
    headers = {}
    while True:
        line = f.readline().decode().strip()
        if not line:
            break
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    events, raw = [], b""
    if headers.get("transfer-encoding") != "chunked":
        s.close()
        return status, headers, events, raw
    buffer = b""
    while True:
        size = int(f.readline().strip(), 16)
        if size == 0:
            break
        piece = f.read(size)
        f.readline()
        raw += piece
        buffer += piece
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            events.append(event.decode())
            if on_event and on_event(events, s):
                return status, headers, events, raw
    s.close()
    return status, headers, events, raw


def payloads(events):
    out = []
    for e in events:
        if not e.startswith("data: "):
            fail("an event that is not 'data: ...': %r" % e)
        out.append(e[len("data: "):])
    return out


def errors(server):
    long_prompt = "word " * 600
    rows = [
        ("malformed JSON", "/v1/completions", b"{\"prompt\": "),
        ("not an object", "/v1/completions", [1, 2]),
        ("no prompt", "/v1/completions", {"max_tokens": 4}),
        ("prompt wrongly typed", "/v1/completions", {"prompt": 42}),
        ("token id out of range", "/v1/completions", {"prompt": [1, 99999999]}),
        ("max_tokens negative", "/v1/completions", {"prompt": "x", "max_tokens": -1}),
        ("max_tokens wrongly typed", "/v1/completions", {"prompt": "x", "max_tokens": "many"}),
        # The integers a client can send past int64 arithmetic: refused, never wrapped.
        ("max_tokens 2^63-1", "/v1/completions",
         {"prompt": "hello", "max_tokens": 2**63 - 1, "ignore_eos": True}),
        ("max_tokens 2^64", "/v1/completions", {"prompt": "hello", "max_tokens": 2**64}),
        ("max_tokens a float", "/v1/completions", {"prompt": "hello", "max_tokens": 1.5}),
        ("max_tokens one past the context", "/v1/completions",
         {"prompt": "hello", "max_tokens": 512}),
        ("seed negative", "/v1/completions", {"prompt": "x", "seed": -1}),
        ("temperature negative", "/v1/completions", {"prompt": "x", "temperature": -1}),
        ("top_p out of range", "/v1/completions", {"prompt": "x", "top_p": 1.5}),
        ("stream wrongly typed", "/v1/completions", {"prompt": "x", "stream": "yes"}),
        ("usage without stream", "/v1/completions",
         {"prompt": "x", "stream_options": {"include_usage": True}}),
        ("n past 16", "/v1/completions", {"prompt": "x", "n": 17}),
        ("n of 0", "/v1/completions", {"prompt": "x", "n": 0}),
        ("best_of", "/v1/completions", {"prompt": "x", "best_of": 2}),
        ("tools empty", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "tools": []}),
        ("tool_choice without tools", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}),
        ("tool_choice naming no tool", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "tool_choice": {
             "type": "function", "function": {"name": "g"}},
          "tools": [{"type": "function", "function": {"name": "f"}}]}),
        ("tool result without its call's id", "/v1/chat/completions",
         {"messages": [{"role": "tool", "content": "x"}]}),
        ("response_format", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json"}}),
        ("chat logprobs wrongly typed", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "logprobs": 3}),
        ("top_logprobs without logprobs", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 5}),
        ("top_logprobs past 20", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21}),
        ("completion logprobs negative", "/v1/completions", {"prompt": "x", "logprobs": -1}),
        ("completion logprobs a flag", "/v1/completions", {"prompt": "x", "logprobs": True}),
        ("top_logprobs on completions", "/v1/completions", {"prompt": "x", "top_logprobs": 2}),
        ("echo on chat", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "echo": True}),
        ("echo wrongly typed", "/v1/completions", {"prompt": "x", "echo": "yes"}),
        ("max_tokens 0 without scoring", "/v1/completions", {"prompt": "x", "max_tokens": 0}),
        ("prompt_logprobs past 20", "/v1/completions", {"prompt": "x", "prompt_logprobs": 21}),
        ("prompt_logprobs streamed", "/v1/completions",
         {"prompt": "x", "prompt_logprobs": 1, "stream": True}),
        ("logit_bias wrongly typed", "/v1/completions", {"prompt": "x", "logit_bias": [1, 5]}),
        ("logit_bias key not an id", "/v1/completions", {"prompt": "x", "logit_bias": {"a": 5}}),
        ("logit_bias id past the vocabulary", "/v1/completions",
         {"prompt": "x", "logit_bias": {"49152": 5}}),
        ("logit_bias out of range", "/v1/completions",
         {"prompt": "x", "logit_bias": {"1": 101}}),
        ("logit_bias not a number", "/v1/completions",
         {"prompt": "x", "logit_bias": {"1": "up"}}),
        ("min_tokens negative", "/v1/completions", {"prompt": "x", "min_tokens": -1}),
        ("min_tokens past max_tokens", "/v1/completions",
         {"prompt": "x", "min_tokens": 9, "max_tokens": 8}),
        ("logit_bias token twice", "/v1/completions",
         {"prompt": "x", "logit_bias": {"1": 100, "01": 100}}),
        ("stop_token_ids past the vocabulary", "/v1/completions",
         {"prompt": "x", "stop_token_ids": [2, 49152]}),
        ("cache_salt empty", "/v1/completions", {"prompt": "x", "cache_salt": ""}),
        ("cache_salt wrongly typed", "/v1/completions", {"prompt": "x", "cache_salt": 7}),
        ("cache_salt too long", "/v1/completions", {"prompt": "x", "cache_salt": "s" * 1025}),
        ("batch of prompts", "/v1/completions", {"prompt": ["a", "b"]}),
        ("empty messages", "/v1/chat/completions", {"messages": []}),
        ("messages wrongly typed", "/v1/chat/completions", {"messages": "hello"}),
        ("unknown role", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}),
        ("content missing", "/v1/chat/completions", {"messages": [{"role": "user"}]}),
        ("image content", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]}),
        ("prompt longer than the context", "/v1/completions", {"prompt": long_prompt}),
        ("prompt and max_tokens past the context", "/v1/completions",
         {"prompt": "hello", "max_tokens": 100000}),
        ("unknown model", "/v1/completions", {"prompt": "x", "model": "gpt-4"}),
        ("tokenize: malformed JSON", "/tokenize", b"{\"prompt\": "),
        ("tokenize: neither", "/tokenize", {"add_special_tokens": True}),
        ("tokenize: both", "/tokenize",
         {"prompt": "x", "messages": [{"role": "user", "content": "x"}]}),
        ("tokenize: prompt wrongly typed", "/tokenize", {"prompt": [1, 2]}),
        ("tokenize: flag wrongly typed", "/tokenize", {"prompt": "x", "add_special_tokens": 1}),
        ("tokenize: token strings flag wrongly typed", "/tokenize",
         {"prompt": "x", "return_token_strs": "yes"}),
        ("tokenize: unknown role", "/tokenize", {"messages": [{"role": "wizard", "content": "x"}]}),
        ("tokenize: unknown model", "/tokenize", {"prompt": "x", "model": "gpt-4"}),
        ("detokenize: no tokens", "/detokenize", {"prompt": "x"}),
        ("detokenize: id out of range", "/detokenize", {"tokens": [1, 2**40]}),
        ("detokenize: id wrongly typed", "/detokenize", {"tokens": ["a"]}),
    ]
    for name, path, body in rows:
        status, text, _ = server.post(path, body)
        if status is None or status >= 500:
            fail("%s: %s %s" % (name, status, text))
        try:
            e = json.loads(text)["error"]
            assert set(e) == {"message", "type", "param", "code"}, e
        except Exception as ex:
            fail("%s: %s %r is not an error body (%s)" % (name, status, text, ex))
        print("%s: %s %s param=%s code=%s: %s" % (name, status, e["type"], e["param"], e["code"],
                                                    e["message"]))
    for name, method, path, body in [("unknown route", "GET", "/v2/anything", None),
                                     ("wrong method", "GET", "/v1/completions", None),
                                     ("wrong method", "POST", "/health", b"{}"),
                                     ("body over the limit", "POST", "/v1/completions",
                                      b"x" * (5 << 20))]:
        status, text, headers = server.request(method, path, body)
        e = json.loads(text)["error"]
        allow = " allow=" + headers["Allow"] if "Allow" in headers else ""
        print("%s: %s %s%s: %s" % (name, status, e["type"], allow, e["message"]))
    # An unknown harmless field is ignored; the server is healthy after all of the above.
    status, text, headers = server.request(
        "POST", "/v1/completions",
        {"prompt": "The capital of France is", "max_tokens": 3, "store": False,
         "temperature": 0},
        {"Content-Type": "application/json", "X-Request-Id": "client-42"})
    print("harmless unknown field: %s %s" % (status, json.loads(text)["usage"]))
    # The tokenizer's endpoints count what the completions count, and give the text back.
    status, text, _ = server.post("/tokenize", {"prompt": "The capital of France is"})
    tokenized = json.loads(text)
    print("tokenize: %s count %d, max_model_len %d, token_strs %s" % (
        status, tokenized["count"], tokenized["max_model_len"], tokenized["token_strs"]))
    status, text, _ = server.post("/tokenize", {"prompt": "The capital of France is",
                                                "return_token_strs": True})
    strings = json.loads(text)["token_strs"]
    print("tokenize with token strings: %s, one a token: %s, byte-level spaces make the "
          "prompt: %s" % (status, len(strings) == tokenized["count"],
                          "".join(strings).replace("\u0120", " ") == "The capital of France is"))
    status, text, _ = server.post("/detokenize", {"tokens": tokenized["tokens"]})
    print("detokenize: %s, the prompt again: %s" % (
        status, json.loads(text)["prompt"] == "The capital of France is"))
    chat = [{"role": "user", "content": "Name a colour."}]
    _, text, _ = server.post("/v1/chat/completions", {"messages": chat, "max_tokens": 1})
    used = json.loads(text)["usage"]["prompt_tokens"]
    _, text, _ = server.post("/tokenize", {"messages": chat})
    print("tokenize messages: the chat's prompt tokens: %s" % (json.loads(text)["count"] == used))
    _, text, _ = server.post("/tokenize", {"messages": chat, "add_generation_prompt": False})
    print("without the generation prompt, fewer: %s" % (json.loads(text)["count"] < used))
    # The client's request id comes back, and names the request's line in the access log; a
    # request without one (or with one no log line can carry) gets the server's.
    print("request id echoed: %s" % headers.get("X-Request-Id"))
    _, _, headers = server.request("GET", "/health", None, {"X-Request-Id": "bad id\u00e9"})
    print("request id made: %s" % headers.get("X-Request-Id"))
    made = "request %s:" % headers.get("X-Request-Id")
    deadline = time.time() + 10  # the log line follows the answer, through the launcher
    while time.time() < deadline and not any(made in line for line in server.lines):
        time.sleep(0.05)
    for line in list(server.lines):
        if "request client-42:" in line or made in line:
            print("access log: " + line)
    print("health after: %s" % server.get("/health")[0])
    for reason in ("invalid", "not_found", "method_not_allowed", "body_too_large"):
        print("rejected as %s: %d" % (reason, server.metric("requests_rejected_total",
                                                             'reason="%s"' % reason)))


def template(server):
    bad = {"messages": [{"role": "assistant", "content": "Hello"}], "max_tokens": 2}
    status, text, _ = server.post("/v1/chat/completions", bad)
    e = json.loads(text)["error"]
    print("template fails: %s param=%s: %s" % (status, e["param"], e["message"]))
    good = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2}
    print("template takes: %s" % server.post("/v1/chat/completions", good)[0])


def stream(server):
    body = {"messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 24, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    status, headers, events, raw = stream_events(server.port, "/v1/chat/completions", body)
    print("status: %s; content-type: %s" % (status, headers.get("content-type")))
    data = payloads(events)
    print("last: %s" % data[-1])
    if data[-1] != "[DONE]":
        fail("no [DONE] at the end")
    chunks = [json.loads(d) for d in data[:-1]]
    print("first delta: %s" % json.dumps(chunks[0]["choices"][0]["delta"]))
    usage = chunks[-1]
    print("usage chunk: choices=%s usage=%s" % (usage["choices"], usage["usage"]))
    content = chunks[1:-1]
    finishes = [c["choices"][0]["finish_reason"] for c in content]
    print("finish reasons: %s then %s" % (set(finishes[:-1]), finishes[-1]))
    text = "".join(c["choices"][0]["delta"]["content"] for c in content)
    print("content chunks: %d" % len(content))
    print("streamed: %r" % text)
    whole = json.loads(server.post("/v1/chat/completions", dict(body, stream=False,
                                                                stream_options=None))[1])
    print("same as not streamed: %s" % (whole["choices"][0]["message"]["content"] == text))
    # A stop string that spans two chunks (the end of one and the start of the next) is
    # withheld: the text ends before it, and no byte of it is sent.
    ids = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0,
           "stream": True}
    _, _, events, _ = stream_events(server.port, "/v1/completions", ids)
    pieces = [json.loads(d)["choices"][0]["text"] for d in payloads(events)[:-1]]
    at = next(i for i in range(1, len(pieces) - 1) if len(pieces[i]) >= 2 and pieces[i + 1])
    stop = pieces[at][-2:] + pieces[at + 1][:1]
    full = "".join(pieces)
    status, _, events, raw = stream_events(server.port, "/v1/completions", dict(ids, stop=[stop]))
    data = payloads(events)
    got = "".join(json.loads(d)["choices"][0]["text"] for d in data[:-1])
    print("stop across chunks: text before it %s, finish %s, any of it sent: %s" % (
        got == full[:full.index(stop)], json.loads(data[-2])["choices"][0]["finish_reason"],
        stop in raw.decode()))
    logprobs(server)
    # Characters cut only at UTF-8 boundaries: every event is valid UTF-8 JSON (checked by
    # decode above); a prompt of token ids works too.
    status, text, _ = server.post("/v1/completions", {"prompt": [504, 3458, 282], "max_tokens": 2})
    print("token id prompt: %s %s" % (status, json.loads(text)["usage"]))


def logprobs(server):
    """Log-probabilities in both APIs, streamed and not: one entry a token, whose texts make
    the answer's text; in a stream each chunk carries its own tokens' and together they are
    the response's; the top ones are log-probabilities of a distribution, most likely first;
    greedy chooses the first of them. (conformance/serve.test holds the values to
    transformers'.)"""
    chat = {"messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 12, "temperature": 0, "logprobs": True, "top_logprobs": 3}
    whole = json.loads(server.post("/v1/chat/completions", chat)[1])["choices"][0]
    content = whole["logprobs"]["content"]
    text = whole["message"]["content"]
    _, _, events, _ = stream_events(server.port, "/v1/chat/completions", dict(chat, stream=True))
    chunks = [json.loads(d)["choices"][0] for d in payloads(events)[:-1]]
    streamed = [e for c in chunks if c["logprobs"] for e in c["logprobs"]["content"]]
    carried = all(bool(c["logprobs"]) == bool(c["delta"].get("content")) or c["finish_reason"]
                  for c in chunks[1:])

    def distribution(entry, top):
        ranked = [t["logprob"] for t in entry["top_logprobs"]]
        return (len(ranked) == top and ranked == sorted(ranked, reverse=True) and
                all(p <= 0 for p in ranked) and sum(math.exp(p) for p in ranked) <= 1 + 1e-6)

    print("chat logprobs: %d tokens (%s), texts make the text: %s, bytes their UTF-8: %s" % (
        len(content), whole["finish_reason"],
        # the end-of-sequence token (a stop) has an entry, and no text in the message
        "".join(e["token"] for e in content) ==
        text + (content[-1]["token"] if whole["finish_reason"] == "stop" else ""),
        all(bytes(e["bytes"]) == e["token"].encode() for e in content)))
    print("chat top 3: a distribution: %s, greedy took the first: %s" % (
        all(distribution(e, 3) for e in content),
        all(e["top_logprobs"][0]["token"] == e["token"] and
            e["top_logprobs"][0]["logprob"] == e["logprob"] for e in content)))
    print("chat streamed: the same entries: %s, each in its text's chunk: %s" % (
        streamed == content, carried))
    completion = {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0,
                  "logprobs": 2}
    choice = json.loads(server.post("/v1/completions", completion)[1])["choices"][0]
    lp = choice["logprobs"]
    offsets = [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]
    print("completion logprobs: %d tokens, offsets: %s, texts make the text: %s, "
          "top 2 and the chosen: %s" % (
              len(lp["tokens"]), lp["text_offset"] == offsets,
              "".join(lp["tokens"]) == choice["text"],
              all(len(top) == 2 and lp["tokens"][i] in top and
                  top[lp["tokens"][i]] == lp["token_logprobs"][i] == max(top.values())
                  for i, top in enumerate(lp["top_logprobs"]))))
    _, _, events, _ = stream_events(server.port, "/v1/completions", dict(completion, stream=True))
    parts = [json.loads(d)["choices"][0]["logprobs"] for d in payloads(events)[:-1]]
    joined = {k: [v for p in parts if p for v in p[k]] for k in lp}
    print("completion streamed: the same: %s" % (joined == lp))
    none = json.loads(server.post("/v1/completions", dict(completion, logprobs=None))[1])
    print("not asked: %s" % none["choices"][0]["logprobs"])


def adjust(server):
    """logit_bias and min_tokens change greedy choices as they say, also at tp > 1, where a
    greedy step's argmax would otherwise be found on the ranks from the raw logits."""
    ask = {"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}

    def answer(path, body):  # no logprobs asked: those steps would gather the logits anyway
        status, text, _ = server.post(path, body)
        if status != 200:
            fail("%s: %s" % (status, text))
        reply = json.loads(text)
        return reply["choices"][0], reply["usage"]["completion_tokens"]

    plain, _ = answer("/v1/completions", ask)
    status, text, _ = server.post("/v1/completions", dict(ask, logprobs=0))
    first = json.loads(text)["choices"][0]["logprobs"]["tokens"][0]
    first_id = json.loads(server.post("/tokenize", {"prompt": first})[1])["tokens"][-1]
    avoided, _ = answer("/v1/completions", dict(ask, logit_bias={str(first_id): -100}))
    print("bias -100 on the first choice %r: avoided: %s" % (
        first, not avoided["text"].startswith(first)))
    banana = json.loads(server.post("/tokenize", {"prompt": " banana"})[1])["tokens"][-1]
    forced, _ = answer("/v1/completions", dict(ask, logit_bias={str(banana): 100}))
    print("bias +100 on ' banana': %r" % forced["text"])
    small, _ = answer("/v1/completions", dict(ask, logit_bias={str(banana): 0.001}))
    print("a bias too small to matter changes nothing: %s" % (small["text"] == plain["text"]))
    chat = {"messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 12, "temperature": 0}
    short, n = answer("/v1/chat/completions", chat)
    held, m = answer("/v1/chat/completions", dict(chat, min_tokens=12))
    print("chat: %d tokens, %s; with min_tokens 12: %d tokens, %s; the same start: %s" % (
        n, short["finish_reason"], m, held["finish_reason"],
        held["message"]["content"].startswith(short["message"]["content"])))
    met, _ = answer("/v1/chat/completions", dict(chat, min_tokens=3))
    print("min_tokens 3, met before the end: the answer as without it: %s" % (
        met["message"] == short["message"]))
    # Stop strings count only from token min_tokens + 1 on (vLLM's): the answer is cut at the
    # first "e" that ends past the first min_tokens tokens' text, worked out here from the
    # plain answer's tokens.
    long_ask = dict(ask, max_tokens=12, ignore_eos=True)
    status, text, _ = server.post("/v1/completions", dict(long_ask, logprobs=0))
    pieces = json.loads(text)["choices"][0]["logprobs"]["tokens"]
    full = "".join(pieces)
    first = next(i for i, piece in enumerate(pieces) if "e" in piece)  # the first "e"'s token
    texts = []
    for k in (0, first + 1):
        shown = len("".join(pieces[:k]))
        cut = next((i for i, ch in enumerate(full) if ch == "e" and i + 1 > shown), len(full))
        got, _ = answer("/v1/completions", dict(long_ask, stop=["e"], min_tokens=k))
        texts.append(got["text"])
        print("stop 'e' with min_tokens %s: as worked out: %s" % (
            "past its first 'e'" if k else 0, got["text"] == full[:cut]))
    print("the two differ: %s" % (texts[0] != texts[1]))


def choices(server):
    """n > 1: n choices of one prompt, choice i as a request of seed + i alone (vLLM's rule,
    an oracle that shares no code with the choices' path); the same again; the prompt's full
    blocks computed once (the prefix cache's counters: each later choice finds them); streamed,
    each choice's chunks make its text and it finishes once; chat too; echo with n. Prints a
    digest of the texts for the test to compare across tp sizes."""
    import hashlib

    def post(body, path="/v1/completions"):
        status, text, _ = server.post(path, body)
        if status != 200:
            fail("%s: %s" % (status, text))
        return json.loads(text)

    prompt = ("A lighthouse keeper kept a logbook of every ship that passed the rocks, and "
              "on the night of the storm he wrote")
    ask = {"prompt": prompt, "max_tokens": 10, "temperature": 1.0, "seed": 41, "n": 4,
           "ignore_eos": True}
    hits, queries = server.metric("prefix_cache_hits_total"), \
        server.metric("prefix_cache_queries_total")
    reply = post(ask)
    hits = server.metric("prefix_cache_hits_total") - hits
    queries = server.metric("prefix_cache_queries_total") - queries
    texts = [c["text"] for c in reply["choices"]]
    tokens = reply["usage"]["prompt_tokens"]
    full = (tokens - 1) // BLOCK * BLOCK  # the full blocks before the last token
    print("n 4: indexes %s, distinct: %d, completion tokens %d, cached %d" % (
        [c["index"] for c in reply["choices"]], len(set(texts)),
        reply["usage"]["completion_tokens"], reply["usage"]["prompt_tokens_details"]
        ["cached_tokens"]))
    alone = [post(dict(ask, n=1, seed=41 + i))["choices"][0]["text"] for i in range(4)]
    print("choice i is the request of seed 41 + i alone: %s" % (alone == texts))
    print("prompt of %d tokens: looked up %d, found %d: computed once, its %d full-block "
          "tokens found by each other choice: %s" % (
              tokens, queries, hits, full, queries == 4 * tokens and hits == 3 * full))
    again = [c["text"] for c in post(ask)["choices"]]
    print("the same again: %s" % (again == texts))
    print("digest: %s" % hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:16])
    status, headers, events, raw = stream_events(server.port, "/v1/completions", dict(
        ask, stream=True, stream_options={"include_usage": True}))
    joined, finishes, usage = ["", "", "", ""], [0, 0, 0, 0], None
    for p in payloads(events):
        if p == "[DONE]":
            continue
        chunk = json.loads(p)
        usage = chunk.get("usage") or usage
        for c in chunk["choices"]:
            joined[c["index"]] += c["text"]
            finishes[c["index"]] += c["finish_reason"] is not None
    print("streamed: each choice's text: %s, finished once each: %s, usage %d tokens" % (
        joined == texts, finishes == [1, 1, 1, 1], usage["completion_tokens"]))
    chat = post({"messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 6,
                 "n": 3, "seed": 5, "temperature": 1.0}, "/v1/chat/completions")
    print("chat n 3: indexes %s, each a message: %s" % (
        [c["index"] for c in chat["choices"]],
        all(c["message"]["role"] == "assistant" for c in chat["choices"])))
    echo = post({"prompt": prompt, "max_tokens": 3, "n": 2, "seed": 1, "temperature": 1.0,
                 "echo": True, "logprobs": 0})
    print("echo with n 2: each text begins with the prompt: %s, the prompt's logprobs alike: %s"
          % (all(c["text"].startswith(prompt) for c in echo["choices"]),
             echo["choices"][0]["logprobs"]["token_logprobs"][:tokens] ==
             echo["choices"][1]["logprobs"]["token_logprobs"][:tokens]))
    scored = post({"prompt": prompt, "max_tokens": 0, "n": 3, "echo": True, "logprobs": 1})
    lists = [c["logprobs"]["token_logprobs"] for c in scored["choices"]]
    print("echo of max_tokens 0 with n 3: the prompt's %d entries in each: %s" % (
        tokens, all(len(l) == tokens and l == lists[0] for l in lists) and lists[0][0] is None))


def failing(server):
    """Under TPC_FAULT=nan at the first step: choice 0 of an n = 3 request gets logits that are
    not finite at its first token, which fails the whole request at once; its other choices,
    queued behind it, are aborted rather than run (no token is generated); /metrics counts it
    an error; the server runs on and, idle, holds no block."""
    status, text, _ = server.post("/v1/completions", {
        "prompt": "Once upon a time", "max_tokens": 50, "n": 3, "seed": 1, "temperature": 0.8,
        "ignore_eos": True})
    print("n 3, choice 0's logits NaN: %s %s" % (status, json.loads(text)["error"]["message"]))
    print("tokens generated: %d, counted as: %s" % (
        server.metric("generation_tokens_total"),
        [r for r in ("error", "length", "stop")
         if server.metric("request_success_total", 'finished_reason="%s"' % r)]))
    status, text, _ = server.post("/v1/completions", {"prompt": "Once upon a time",
                                                      "max_tokens": 4, "n": 2})
    print("then: %s, %d choices" % (status, len(json.loads(text)["choices"])))
    time.sleep(0.5)
    print("idle: blocks used %d, requests running %d" % (
        server.metric("kv_cache_blocks_used"), server.metric("num_requests_running")))


def valid(value, schema):
    """Whether `value` fits `schema`, for the keywords the tests use (written here, not the
    server's or the grammar engine's)."""
    kind = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    if kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            return False
    elif kind == "number":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
    elif kind and not isinstance(value, types[kind]):
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if "minimum" in schema and value < schema["minimum"]:
        return False
    if "maximum" in schema and value > schema["maximum"]:
        return False
    if isinstance(value, str) and not (schema.get("minLength", 0) <= len(value) <=
                                       schema.get("maxLength", 1 << 30)):
        return False
    if isinstance(value, list):
        if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", 1 << 30):
            return False
        return all(valid(v, schema.get("items", {})) for v in value)
    if isinstance(value, dict):
        props = schema.get("properties", {})
        if any(k not in value for k in schema.get("required", [])):
            return False
        if schema.get("additionalProperties") is False and any(k not in props for k in value):
            return False
        return all(valid(v, props[k]) for k, v in value.items() if k in props)
    return True


PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 24},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3}},
    "required": ["name", "age", "pets"], "additionalProperties": False}


def structured(server):
    """Structured outputs on the real model (at tp 2: the masked rows are gathered, never an
    argmax of the ranks): a JSON schema's answers parse and fit it (checked by a validator
    written here), where the same questions without it do not parse; json_object, choices, a
    regex; two choices of one schema; streamed as not; and each bad field's 400."""
    def chat(content, **extra):
        body = dict({"messages": [{"role": "user", "content": content}], "max_tokens": 80,
                     "temperature": 0}, **extra)
        status, text, _ = server.post("/v1/chat/completions", body)
        if status != 200:
            fail("%s: %s" % (status, text))
        return json.loads(text)

    def parses(text):
        try:
            return json.loads(text)
        except ValueError:
            return None

    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON,
                                                  "strict": True}}
    questions = ["Describe a person named Ann.", "Who is the oldest person you know?",
                 "Tell me about a fisherman and his pets."]
    fits, plain = 0, 0
    for q in questions:
        got = chat(q, response_format=fmt)["choices"][0]
        value = parses(got["message"]["content"])
        fits += got["finish_reason"] == "stop" and value is not None and valid(value, PERSON)
        plain += parses(chat(q)["choices"][0]["message"]["content"]) is not None
    print("json_schema: %d of %d answers fit the schema; without it, %d parse as JSON" % (
        fits, len(questions), plain))
    keys = list(parses(chat(questions[0], response_format=fmt)["choices"][0]["message"]
                       ["content"]))
    print("properties in the schema's order: %s" % (keys == ["name", "age", "pets"]))
    two = chat(questions[1], response_format=fmt, n=2, seed=3, temperature=1.0)["choices"]
    print("n 2, sampled: both fit: %s" % all(valid(parses(c["message"]["content"]) or 0, PERSON)
                                             for c in two))
    status, headers, events, raw = stream_events(server.port, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": questions[0]}], "max_tokens": 80,
        "temperature": 0, "stream": True, "response_format": fmt})
    streamed = "".join(json.loads(p)["choices"][0]["delta"].get("content") or ""
                       for p in payloads(events) if p != "[DONE]" and json.loads(p)["choices"])
    print("streamed: the same answer: %s" % (
        streamed == chat(questions[0], response_format=fmt)["choices"][0]["message"]["content"]))
    obj = parses(chat("Say hello.", response_format={"type": "json_object"})["choices"][0]
                 ["message"]["content"])
    print("json_object: an object: %s" % isinstance(obj, dict))
    pick = chat("Is the sky blue?", structured_outputs={"choice": ["yes", "no"]})
    print("choice: %r" % pick["choices"][0]["message"]["content"])
    status, text, _ = server.post("/v1/completions", {
        "prompt": "My phone number is", "max_tokens": 20,
        "structured_outputs": {"regex": " [0-9]{3}-[0-9]{4}"}})
    print("regex: matches: %s" % bool(re.fullmatch(r" [0-9]{3}-[0-9]{4}",
                                                  json.loads(text)["choices"][0]["text"])))
    for name, body in [
            ("unknown keyword", {"response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "string", "format": "email"}}}}),
            ("unknown type", {"response_format": {"type": "xml"}}),
            ("no schema", {"response_format": {"type": "json_schema", "json_schema": {}}}),
            ("both fields", {"response_format": {"type": "json_object"},
                             "structured_outputs": {"regex": "a"}}),
            ("two kinds", {"structured_outputs": {"regex": "a", "choice": ["b"]}}),
            ("not compiled", {"structured_outputs": {"regex": "([0-9]"}}),
            ("ignore_eos", {"response_format": {"type": "json_object"}, "ignore_eos": True})]:
        status, text, _ = server.post("/v1/chat/completions", dict(
            {"messages": [{"role": "user", "content": "x"}]}, **body))
        e = json.loads(text)["error"]
        print("%s: %s param=%s: %s" % (name, status, e["param"], e["message"]))
    compiling(server)


def compiling(server):
    """A grammar that takes the compiler seconds (a regex of repeated classes) holds neither
    reader: while it compiles, a second such grammar waits its second and is refused as busy
    (503, to send again), and tokenize requests (a prompt, a chat through the template) sent
    after that one are answered before it is refused, that is, not behind it on a reader
    (where they were, before the compiler had threads of its own); a completion is served."""
    answers = {}

    def slow(name, letters):  # about 5 s with SmolLM2's vocabulary here, alone
        started = time.time()
        status, text, _ = server.post("/v1/completions", {
            "prompt": "x", "max_tokens": 1, "structured_outputs": {
                "regex": "".join("[^%s]{1000}" % letter for letter in letters)}}, timeout=120)
        answers[name] = (status, text, time.time() - started, time.time())

    first = threading.Thread(target=slow, args=("first", "abcdef"))
    first.start()
    time.sleep(0.5)  # the first compiling
    second = threading.Thread(target=slow, args=("second", "ghijkl"))
    second.start()
    time.sleep(0.2)  # the second waiting for the compiler
    # Requests a reader answers alone (a reader held behind the second would answer them only
    # after its refusal, a second after it was sent), then a completion, which must be
    # admitted too (its answer, which takes the engine's steps, may come later).
    others = []
    for path, body in [("/tokenize", {"prompt": "Hello world"}),
                       ("/tokenize", {"messages": [{"role": "user", "content": "Hi"}]}),
                       ("/tokenize", {"prompt": "Goodbye"})]:
        status, text, _ = server.post(path, body)
        if status != 200:
            fail("%s while a grammar compiles: %s %s" % (path, status, text))
        others.append(time.time())
    status, text, _ = server.post("/v1/completions", {"prompt": "Hello", "max_tokens": 2})
    if status != 200:
        fail("a completion while a grammar compiles: %s %s" % (status, text))
    second.join()
    first.join()
    status, text, _, _ = answers["second"]
    code = json.loads(text)["error"].get("code") if status != 200 else None
    print("second slow grammar meanwhile: %s %s" % (status, code))
    print("other requests answered before it: %s" % all(t < answers["second"][3] for t in others))
    status, text, seconds, _ = answers["first"]
    # Within the compile limit it is answered; past it (a slow machine), refused by that limit.
    print("first slow grammar: %s" % (
        "answered" if status == 200 or "took more than" in text else "%s %s" % (status, text)))
    if answers["first"][2] < 1.5:
        fail("the slow grammar compiled in %.1f s: too fast to hold the compiler" % seconds)


def masked(server):
    """A greedy request, then another under a regex, one at a time (each step holds one
    sequence), for a server run with --trace: the test holds the trace to analyze's steps, the
    first request's found on the ranks (an argmax), the second's with its logits gathered for
    rank 0's mask every step."""
    def complete(prompt, **extra):
        status, text, _ = server.post("/v1/completions", dict(
            {"prompt": prompt, "max_tokens": 6, "temperature": 0}, **extra))
        if status != 200:
            fail("%s: %s" % (status, text))
        return json.loads(text)

    plain = complete([3, 1, 4, 1, 5, 9, 2, 6], ignore_eos=True)
    print("greedy: %d tokens" % plain["usage"]["completion_tokens"])
    regex = complete([2, 7, 1, 8, 2, 8, 1, 8], structured_outputs={"regex": "[a-z]{6}"})
    print("regex: %d tokens, matches: %s" % (
        regex["usage"]["completion_tokens"],
        bool(re.fullmatch("[a-z]{6}", regex["choices"][0]["text"]))))


SYSTEM = ("You are a careful assistant for a small museum of clocks. Answer visitors in one "
          "or two sentences, name the room where a clock can be seen, and never invent a "
          "clock the museum does not have. The rooms are the Hall, the Tower and the "
          "Workshop; the pendulum clocks are in the Hall, the turret clock in the Tower. ") * 3
QUESTIONS = [["Where is the turret clock?", "And how old is it?"],
             ["Which room has pendulum clocks?", "Can I touch them?"],
             ["What is in the Workshop?", "Is it open on Sundays?"]]
BLOCK = 16  # the CPU program's KV block (spec.kvBlockSize)


def conversations(server):
    """Three users' two-turn chats after one system prompt, one request at a time, greedy for
    the first user and seeded sampling for the others, with log-probabilities: [(text,
    [logprob, top...] per token, cached tokens, prompt ids)] in order."""
    out = []
    for user, questions in enumerate(QUESTIONS):
        messages = [{"role": "system", "content": SYSTEM}]
        for question in questions:
            messages.append({"role": "user", "content": question})
            body = {"messages": messages, "max_tokens": 12, "logprobs": True, "top_logprobs": 2,
                    "temperature": 0 if user == 0 else 0.8, "seed": 7 + user}
            status, text, _ = server.post("/v1/chat/completions", body)
            if status != 200:
                fail("chat: %s %s" % (status, text))
            reply = json.loads(text)
            choice = reply["choices"][0]
            ids = json.loads(server.post("/tokenize", {"messages": messages})[1])["tokens"]
            values = [[e["logprob"]] + [t["logprob"] for t in e["top_logprobs"]]
                      for e in choice["logprobs"]["content"]]
            out.append((choice["message"]["content"], values,
                        reply["usage"]["prompt_tokens_details"]["cached_tokens"], ids))
            messages.append({"role": "assistant", "content": choice["message"]["content"]})
    return out


def cache(server, checkpoint, flags):
    """Prefix caching changes no answer and pays where prompts begin alike: the same chats on
    this server (caching on) and on one with --no-prefix-caching give the same text and
    log-probabilities within 5e-5 (a prompt's rows computed in a step of a few rows, after a
    hit, or in one of the whole prompt go through other kernels: the batched matrix-vector
    ones or sgemm, a decode step's attention or a prefill's; after SmolLM2's 30 layers their
    roundings differ by up to 1.3e-5 here); each first turn finds the system prompt's full blocks, each
    second turn at least its first turn's prompt; /metrics counts the lookups, and once idle
    no block is held (the cached ones are counted apart)."""
    used = server.metric("kv_cache_blocks_used")
    on = conversations(server)
    plain = Server(checkpoint, flags + ["--no-prefix-caching"])
    try:
        off = conversations(plain)
        print("without the cache: hits %d" % plain.metric("prefix_cache_hits_total"))
    finally:
        plain.stop()
    same = all(a[0] == b[0] for a, b in zip(on, off))
    largest = max(abs(x - y) for a, b in zip(on, off) for r, q in zip(a[1], b[1])
                  for x, y in zip(r, q))
    print("same answers: %s; logprobs within 5e-5: %s" % (same, largest <= 5e-5))

    def lcp(a, b):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    first_turns = on[0::2]
    shared = lcp(first_turns[0][3], first_turns[1][3])
    rounded = min(shared, len(first_turns[1][3]) - 1) // BLOCK * BLOCK
    print("shared system prompt: %d tokens; first turns found %s, the block-rounded prefix "
          "after the first: %s" % (shared, [t[2] for t in first_turns],
                                   [t[2] == rounded for t in first_turns[1:]]))
    print("second turns found at least their first turn's prompt: %s" % all(
        second[2] >= (len(first[3]) // BLOCK) * BLOCK and second[2] < len(second[3])
        for first, second in zip(on[0::2], on[1::2])))
    hits, queries = server.metric("prefix_cache_hits_total"), server.metric(
        "prefix_cache_queries_total")
    print("metrics: hits %s the cached tokens' sum, queries the prompts' sum: %s" % (
        "equal" if hits == sum(t[2] for t in on) else "unlike",
        queries == sum(len(t[3]) for t in on)))
    print("idle: blocks used back at the baseline: %s, cached blocks kept: %s" % (
        server.metric("kv_cache_blocks_used") == used,
        server.metric("kv_cache_blocks_cached") > 0))
    # A salted request finds only its salt's blocks: none of the unsalted chats', then the
    # first salted one's; another salt none.
    found = []
    for salt in ("tenant-a", "tenant-a", "tenant-b"):
        body = {"messages": [{"role": "system", "content": SYSTEM},
                             {"role": "user", "content": "Hello from " + salt}],
                "max_tokens": 2, "cache_salt": salt}
        found.append(json.loads(server.post("/v1/chat/completions", body)[1])
                     ["usage"]["prompt_tokens_details"]["cached_tokens"])
    print("cache_salt: found %s" % ["none" if n == 0 else "the shared prefix"
                                    if n == rounded else n for n in found])


def churn(server):
    """1,000 requests, 8 at a time, prompts that share beginnings of several lengths and
    lengths of output: afterwards, idle, no block is held (each is free or cached and
    evictable), and every request was answered."""
    base = server.metric("kv_cache_blocks_used")
    words = "one two three four five six seven eight nine ten".split()
    failures = []

    def worker(w):
        for i in range(w, 1000, 8):
            prompt = " ".join(words[: 1 + i % 10] * (1 + i % 3)) + " " + str(i % 13)
            status, text, _ = server.post("/v1/completions", {
                "prompt": prompt, "max_tokens": 1 + i % 4, "temperature": 0.5 * (i % 2),
                "seed": i})
            if status != 200:
                failures.append((i, status, text))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    deadline = time.time() + 10
    while time.time() < deadline and server.metric("kv_cache_blocks_used") != base:
        time.sleep(0.1)
    print("1000 requests: %d failed; hits %s; blocks used back at the baseline: %s; cached "
          "and evictable: %s" % (
              len(failures), server.metric("prefix_cache_hits_total") > 0,
              server.metric("kv_cache_blocks_used") == base,
              server.metric("kv_cache_blocks_cached") > 0))


def overload(server):
    body = {"prompt": "Once upon a time", "max_tokens": 48, "ignore_eos": True}
    results = [None] * 3

    def send(i):
        results[i] = server.post("/v1/completions", body, timeout=90)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(90)
    statuses = sorted(r[0] for r in results)
    print("statuses: %s" % statuses)
    refused = [r for r in results if r[0] == 503]
    if refused:
        print("503 has Retry-After: %s; %s" % ("Retry-After" in refused[0][2],
                                              json.loads(refused[0][1])["error"]["code"]))
    print("health after: %s" % server.get("/health")[0])
    status, text, _ = server.post("/v1/completions", dict(body, max_tokens=2))
    print("next: %s" % status)


def disconnect(server):
    base_running = server.metric("num_requests_running")
    base_used = server.metric("kv_cache_blocks_used")
    print("baseline: running %d, blocks used %d of %d" % (
        base_running, base_used, server.metric("kv_cache_blocks_total")))
    body = {"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True, "stream": True}
    stream_events(server.port, "/v1/completions", body,
                  on_event=lambda events, s: len(events) >= 3 and (s.close() or True))
    closed = time.time()
    print("during: running %d" % server.metric("num_requests_running"))
    while time.time() - closed < 1.0:
        if (server.metric("num_requests_running") == base_running and
                server.metric("kv_cache_blocks_used") == base_used):
            break
        time.sleep(0.05)
    print("after closing: running %d, blocks used %d, within a second: %s" % (
        server.metric("num_requests_running"), server.metric("kv_cache_blocks_used"),
        time.time() - closed < 1.0))
    print("aborted: %d" % server.metric("request_success_total", 'finished_reason="abort"'))


def fault(server, timeout):
    body = {"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": True, "stream": True}
    start = time.time()
    status, _, events, _ = stream_events(server.port, "/v1/completions", body)
    data = payloads(events)
    print("stream: %s; %d events; last two: %s | %s" % (status, len(data),
                                                       json.loads(data[-2]).get("error", {}).get("code"),
                                                       data[-1]))
    health = server.get("/health")[0]
    print("health: %s" % health)
    code = server.wait(timeout + 15)
    print("exit: %s within --timeout: %s" % ("non-zero" if code else code,
                                             code is not None and time.time() - start < timeout + 15))
    time.sleep(0.5)
    # The ranks run the binary compiled into this test's cache: none of them is left.
    pattern = os.path.join(os.environ.get("TPC_CACHE_DIR", ""), "run", ".*--serve")
    left = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True,
                          text=True).stdout.split()
    print("processes left: %d" % len(left))


def sigterm(server):
    # Idle past --timeout first: rank 0's idle steps keep its peers from giving up on it.
    time.sleep(3)
    print("after 3 s idle: health %s" % server.get("/health")[0])
    body = {"prompt": "Once upon a time", "max_tokens": 40, "ignore_eos": True, "stream": True}
    results = [None] * 2
    started = threading.Semaphore(0)

    def send(i):
        def first(events, s):
            if len(events) == 1:
                started.release()
            return False
        results[i] = stream_events(server.port, "/v1/completions", body, on_event=first)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for _ in threads:
        started.acquire(timeout=60)
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    status, text, _ = server.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
    print("a new request while draining: %s" % status)
    for t in threads:
        t.join(60)
    for status, _, events, _ in results:
        data = payloads(events)
        print("in flight: %s, finish %s, %s" % (status, json.loads(data[-2])["choices"][0]["finish_reason"],
                                                data[-1]))
    print("exit: %s" % server.wait(60))


def auth(server, checkpoint, flags, env):
    body = {"prompt": "hello", "max_tokens": 2}
    json_headers = {"Content-Type": "application/json"}
    rows = [
        ("no key", "POST", "/v1/completions", {}),
        ("a wrong key", "POST", "/v1/completions", {"Authorization": "Bearer delta"}),
        ("a key's prefix", "POST", "/v1/completions", {"Authorization": "Bearer alph"}),
        ("not Bearer", "POST", "/v1/completions", {"Authorization": "Basic alpha"}),
        ("the flag's key", "POST", "/v1/completions", {"Authorization": "Bearer alpha"}),
        ("the environment's second key", "POST", "/v1/completions",
         {"Authorization": "Bearer gamma"}),
        ("models, no key", "GET", "/v1/models", {}),
        ("tokenize, no key", "POST", "/tokenize", {}),
        ("detokenize, no key", "POST", "/detokenize", {}),
        ("health, no key", "GET", "/health", {}),
        ("metrics, no key", "GET", "/metrics", {}),
    ]
    for name, method, path, headers in rows:
        status, text, answer_headers = server.request(
            method, path, body if method == "POST" else None, dict(json_headers, **headers))
        line = "%s: %s" % (name, status)
        if status == 401:
            error = json.loads(text)["error"]
            line += " %s %s www-authenticate=%s: %s" % (
                error["type"], error["code"], answer_headers.get("WWW-Authenticate"),
                error["message"])
        print(line)
    status, text, _ = server.request("GET", "/metrics", None, {"Authorization": "Bearer beta"})
    unauthorized = re.search(r'requests_rejected_total\{[^}]*reason="unauthorized"\} (\S+)', text)
    print("metrics with a key: %s, unauthorized %s" % (status, unauthorized and unauthorized.group(1)))
    # No key on any of the server's command lines (ps shows them to every user).
    leaked = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        # The ranks: the binary's command line names --serve (tpc serve's and this script's
        # hold the flag's key, as they were given it).
        if b"--serve\0" in cmdline and any(k in cmdline for k in (b"alpha", b"beta", b"gamma")):
            leaked.append(pid)
    print("keys on command lines: %d" % len(leaked))
    server.stop()
    public = Server(checkpoint, flags + ["--metrics-public"], env)
    try:
        print("public metrics, no key: %s" % public.get("/metrics")[0])
        print("public, completions without a key: %s" %
              public.post("/v1/completions", body)[0])
    finally:
        public.stop()


def exchange(port, data, timeout=10.0, keep=False):
    """Sends raw bytes on a new connection; reads until the server closes it or `timeout`
    passes (or, with `keep`, returns the open socket and nothing read)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if data:
        s.sendall(data)
    if keep:
        return s
    out = b""
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            piece = s.recv(65536)
            if not piece:
                break
            out += piece
    except OSError:
        pass
    s.close()
    return out


def responses(raw):
    """HTTP/1.1 responses out of a connection's bytes: [(status, headers, body)], decoding
    Content-Length and chunked bodies (written here, independent of the server's code)."""
    out = []
    while raw:
        head, sep, raw = raw.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        if status == 100:
            continue
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size_line, _, raw = raw.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                body += raw[:size]
                raw = raw[size + 2:]
                if size == 0:
                    break
        else:
            n = int(headers.get("content-length", "0"))
            body, raw = raw[:n], raw[n:]
        out.append((status, headers, body.decode(errors="replace")))
    return out


def post_bytes(path, body, extra=b""):
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s"
            b"Content-Length: %d\r\n\r\n%s" % (path.encode(), extra, len(body), body))


def closed_by_server(sock, until):
    """Whether the server closes `sock` before `until` (a time)."""
    try:
        while time.time() < until:
            sock.settimeout(max(0.05, until - time.time()))
            if not sock.recv(65536):
                return True
    except socket.timeout:
        return False
    except OSError:
        return True  # reset: closed too
    return False


def hostile(server):
    port = server.port
    ask = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
    status, text, _ = server.post("/v1/completions", ask)
    reference = json.loads(text)["choices"][0]["text"]
    print("reference: %s %r" % (status, reference))
    base_used = server.metric("kv_cache_blocks_used")

    def same(reply):
        status, text, _ = reply
        return status == 200 and json.loads(text)["choices"][0]["text"] == reference

    # max_tokens and its overflowing relatives: each a 400, none admitted.
    statuses = []
    for value in [-1, 2**63 - 1, 2**64, 1.5, "many", 512]:
        statuses.append(server.post("/v1/completions", {"prompt": [504], "max_tokens": value})[0])
    print("max_tokens relatives: %s" % statuses)

    # Idle, slow-header, slow-body and idle keep-alive sockets, all open at once.
    idle = [exchange(port, b"", keep=True) for _ in range(40)]
    slow_head = [exchange(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n", keep=True)
                 for _ in range(10)]
    slow_body = [exchange(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: 100\r\n\r\n{", keep=True) for _ in range(10)]
    kept = [exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", keep=True)
            for _ in range(10)]
    for s in kept:
        s.recv(65536)  # the answer; the connection stays open, idle
    opened = time.time()
    stop_dripping = threading.Event()

    def drip():  # one byte of a header every half second
        while not stop_dripping.wait(0.5):
            for s in slow_head:
                try:
                    s.send(b"X")
                except OSError:
                    pass

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    worst = 0.0
    for _ in range(10):
        t = time.time()
        if server.get("/health")[0] != 200:
            fail("/health failed with hostile sockets open")
        worst = max(worst, time.time() - t)
    print("during: /health under 0.5 s: %s; completion answered alike: %s" % (
        worst < 0.5, same(server.post("/v1/completions", ask))))
    until = opened + 6
    counts = [sum(closed_by_server(s, until) for s in group)
              for group in (idle, slow_head, slow_body, kept)]
    stop_dripping.set()
    print("closed by the server: idle %d/40, slow headers %d/10, slow bodies %d/10, "
          "keep-alive %d/10" % tuple(counts))
    for s in idle + slow_head + slow_body + kept:
        s.close()
    print("closed by reason: header_timeout %d, body_timeout %d, idle at least 50: %s" % (
        server.metric("http_connections_closed_total", 'reason="header_timeout"'),
        server.metric("http_connections_closed_total", 'reason="body_timeout"'),
        server.metric("http_connections_closed_total", 'reason="idle"') >= 50))

    # Bytes no parser should choke on.
    big = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n"
    print("oversized head: %s" % [r[0] for r in responses(exchange(port, big))])
    deep = b'{"prompt": ' + b"[" * 10000 + b"]" * 10000 + b"}"
    print("10,000-deep JSON: %s" % server.post("/v1/completions", deep)[0])
    bad_utf8 = b'{"prompt": "caf\xc3\x28 \xff", "max_tokens": 2}'
    print("invalid UTF-8: %s" % server.post("/v1/completions", bad_utf8)[0])
    twice = json.dumps(ask)[:-1].encode() + b', "max_tokens": 8, "prompt": "The capital of France is"}'
    status, text, _ = server.post("/v1/completions", twice)
    print("duplicate keys: %s %s" % (status, json.loads(text)["error"]["message"]))
    body = json.dumps(ask).encode()
    chunked = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    for piece in (body[:7], body[7:30], body[30:]):
        chunked += b"%x\r\n%s\r\n" % (len(piece), piece)
    chunked += b"0\r\n\r\n"
    got = responses(exchange(port, chunked))
    print("chunked body: %s, answered alike: %s" % (
        [r[0] for r in got], bool(got) and json.loads(got[0][2])["choices"][0]["text"] == reference))
    pipelined = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" +
                 post_bytes("/v1/completions", body) +
                 b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    got = responses(exchange(port, pipelined))
    print("pipelined: %s, the completion answered alike: %s" % (
        [r[0] for r in got],
        len(got) == 3 and json.loads(got[1][2])["choices"][0]["text"] == reference))

    # A client that stops reading its stream: the others are served meanwhile.
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(("127.0.0.1", port))
    stalled.sendall(post_bytes("/v1/completions", json.dumps(
        {"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": True,
         "stream": True}).encode()))
    time.sleep(0.5)
    t = time.time()
    answered = same(server.post("/v1/completions", ask))
    print("a stalled reader open: completion answered alike: %s, health: %s" % (
        answered, server.get("/health")[0]))
    stalled.close()

    # A storm of cancels: streams and plain requests closed at once or after a first event.
    def cancel(i):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(post_bytes("/v1/completions", json.dumps(
                {"prompt": "Once upon a time", "max_tokens": 64, "ignore_eos": True,
                 "stream": i % 2 == 0}).encode()))
            if i % 3 == 0:
                s.recv(1)
            s.close()
        except OSError:
            pass

    storm = [threading.Thread(target=cancel, args=(i,)) for i in range(40)]
    for th in storm:
        th.start()
    for th in storm:
        th.join(30)
    deadline = time.time() + 20
    while time.time() < deadline:
        if (server.metric("num_requests_running") == 0 and
                server.metric("num_requests_waiting") == 0 and
                server.metric("kv_cache_blocks_used") == base_used):
            break
        time.sleep(0.1)
    print("after the storm: running %d, waiting %d, blocks back at the baseline: %s" % (
        server.metric("num_requests_running"), server.metric("num_requests_waiting"),
        server.metric("kv_cache_blocks_used") == base_used))
    print("blocks used %d, at the start %d" % (server.metric("kv_cache_blocks_used"), base_used))
    print("aborted at least 20: %s" % (
        server.metric("request_success_total", 'finished_reason="abort"') >= 20))
    print("after all: health %s, completion answered alike: %s" % (
        server.get("/health")[0], same(server.post("/v1/completions", ask))))


def beyond(checkpoint, flags):
    ns = "tpc-serve-check-%d" % os.getpid()
    ip = lambda *a: subprocess.run(["ip", "netns", "exec", ns, "ip"] + list(a), check=True)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        ip("link", "set", "lo", "up")
        ip("addr", "add", "10.231.0.1/8", "dev", "lo")
        inside = ["ip", "netns", "exec", ns]
        for name, host, extra in [("no key, 10.231.0.1", "10.231.0.1", []),
                                  ("a key, 10.231.0.1", "10.231.0.1", ["--api-key", "k"]),
                                  ("no key, 127.0.0.1", "127.0.0.1", [])]:
            server = Server(checkpoint, flags + ["--host", host] + extra, prefix=inside,
                            host=host)
            server.stop()
            warned = [l for l in server.lines if l.startswith("tpc serve: warning")]
            print("%s: %s, exit %s" % (name, warned[0] if warned else "no warning",
                                       server.proc.returncode))
    finally:
        subprocess.run(["ip", "netns", "del", ns])
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        print("namespace left: %s" % (ns in left))


def main():
    scenario, checkpoint, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
    signal.alarm(TIMEOUT * 3)  # a hang fails the test instead of holding it
    if scenario == "beyond":
        beyond(checkpoint, flags)
        return
    env = dict(os.environ)
    if scenario == "auth":
        env["TPC_API_KEY"] = "beta,gamma"
    server = Server(checkpoint, flags, env)
    try:
        if scenario == "fault":
            fault(server, int(flags[flags.index("--timeout") + 1]))
        elif scenario == "sigterm":
            sigterm(server)
        elif scenario == "auth":
            auth(server, checkpoint, flags, env)
        elif scenario == "cache":
            cache(server, checkpoint, flags)
        else:
            {"errors": errors, "template": template, "stream": stream, "adjust": adjust,
             "churn": churn, "choices": choices, "failing": failing,
             "structured": structured, "masked": masked,
             "overload": overload,
             "disconnect": disconnect, "hostile": hostile}[scenario](server)
    finally:
        server.stop()
        sys.stdout.flush()
    if scenario not in ("fault",):
        print("server exit: %s" % server.proc.returncode)


if __name__ == "__main__":
    main()

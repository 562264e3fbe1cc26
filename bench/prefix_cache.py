"""What automatic prefix caching saves a multi-turn chat workload (issue 44), measured in one run.

    python3 bench/prefix_cache.py CKPT [--users 8] [--turns 4] [--system-tokens 1000]
        [--output-len 32] [--rounds 1] [--tpc PATH] [-- tpc serve flags...]

Starts `tpc serve CKPT` with prefix caching (the default) and with --no-prefix-caching, in
turn (--rounds times each, alternating, so that both see the same machine), and runs the same
workload on each: --users users at once, each a conversation of --turns turns after one shared
system prompt of about --system-tokens tokens; a turn is a streamed chat request (greedy,
--output-len tokens, ignore_eos) whose messages are the system prompt, the user's earlier
questions and the server's answers, and a new question. Reported per server: time to first
token (median, p90: from sending to the first chunk with text), the workload's total time,
and the answers (the same with and without the cache, as the cache must change none). With
the cache, each request's usage.prompt_tokens_details.cached_tokens against what it should
be: a first turn finds the system prompt's full blocks (the shared prefix of the rendered
prompts, rounded down to 16-token blocks) unless it was admitted in the same step as the
first one to compute them; a later turn finds at least its previous turn's prompt's full
blocks.
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

BLOCK = 16  # the CPU program's KV block (tp.kv_block_size)
TOPICS = ["the tides", "bread", "clock towers", "bees", "glass", "maps", "violins", "salt",
          "bridges", "paper", "comets", "ink"]


def system_prompt(tokens):
    """About `tokens` tokens of a museum's house rules (SmolLM2 reads ~1.3 tokens a word)."""
    sentences, i = [], 0
    while len(" ".join(sentences).split()) * 1.3 < tokens:
        topic = TOPICS[i % len(TOPICS)]
        sentences.append("Rule %d: when a visitor asks about %s, answer in two short sentences, "
                         "name the gallery where %s are shown, and suggest one more exhibit "
                         "nearby." % (i + 1, topic, topic))
        i += 1
    return "You are the guide of a small museum. " + " ".join(sentences)


def serve_arguments(parser):
    """(args, tpc serve's flags): the benchmark's own flags, then tpc serve's after "--" (an
    argparse REMAINDER would take the benchmark's options too); --tpc defaults to this tree's
    build."""
    parser.add_argument("--tpc", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                      "bin", "tpc"))
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    return parser.parse_args(argv[:cut]), argv[cut + 1:]


class Server:
    def __init__(self, tpc, ckpt, flags):
        self.proc = subprocess.Popen([tpc, "serve", ckpt, "--port", "0"] + flags,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.port = None
        for raw in self.proc.stdout:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", raw.decode(errors="replace"))
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            raise SystemExit("tpc serve did not start")
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
        deadline = time.time() + 300
        while self.request("GET", "/health")[0] != 200:
            if time.time() > deadline:
                raise SystemExit("tpc serve never healthy")
            time.sleep(0.2)

    def request(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            c.request(method, path, None if body is None else json.dumps(body),
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read().decode()
        except OSError as e:
            return None, str(e)
        finally:
            c.close()

    def stream_chat(self, body):
        """(seconds to the first text chunk, text, cached tokens)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        start = time.perf_counter()
        c.request("POST", "/v1/chat/completions", json.dumps(dict(
            body, stream=True, stream_options={"include_usage": True})),
            {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise SystemExit("chat: %s %s" % (r.status, r.read()[:300]))
        first, text, cached = None, [], None
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                cached = chunk["usage"]["prompt_tokens_details"]["cached_tokens"]
            for choice in chunk["choices"]:
                piece = choice["delta"].get("content") or ""
                if piece and first is None:
                    first = time.perf_counter() - start
                text.append(piece)
        c.close()
        return first, "".join(text), cached

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def workload(server, args, system):
    """Every user's conversation, all users at once: per request (user, turn, ttft, text,
    cached tokens, prompt ids); and the total seconds."""
    records, lock = [], threading.Lock()

    def user(u):
        messages = [{"role": "system", "content": system}]
        for turn in range(args.turns):
            messages.append({"role": "user", "content": "Question %d of visitor %d: tell me "
                             "about %s." % (turn + 1, u + 1, TOPICS[(u + 3 * turn) % len(TOPICS)])})
            ids = json.loads(server.request("POST", "/tokenize", {"messages": messages})[1])
            ttft, text, cached = server.stream_chat({
                "messages": messages, "max_tokens": args.output_len, "temperature": 0,
                "ignore_eos": True})
            with lock:
                records.append((u, turn, ttft, text, cached, ids["tokens"]))
            messages.append({"role": "assistant", "content": text})

    start = time.perf_counter()
    threads = [threading.Thread(target=user, args=(u,)) for u in range(args.users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records, time.perf_counter() - start


def lcp(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--system-tokens", type=int, default=1000)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--tpc", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                      "bin", "tpc"))
    parser.add_argument("flags", nargs="*")
    args = parser.parse_args()
    system = system_prompt(args.system_tokens)
    flags = ["--max-model-len", "2048"] + args.flags
    results = {"on": [], "off": []}
    for _ in range(args.rounds):
        for mode in ("on", "off"):
            server = Server(args.tpc, args.ckpt,
                            flags + ([] if mode == "on" else ["--no-prefix-caching"]))
            try:
                results[mode].append(workload(server, args, system))
            finally:
                server.stop()
    print("workload: %d users x %d turns after a shared system prompt; %d tokens out a turn; "
          "flags %s" % (args.users, args.turns, args.output_len, " ".join(flags)))
    summary = {}
    for mode in ("on", "off"):
        ttfts = [r[2] for records, _ in results[mode] for r in records]
        totals = [total for _, total in results[mode]]
        summary[mode] = (statistics.median(ttfts), statistics.median(totals))
        print("caching %-3s: TTFT median %.0f ms, p90 %.0f ms; total %s s" % (
            mode, 1000 * statistics.median(ttfts),
            1000 * sorted(ttfts)[int(0.9 * (len(ttfts) - 1))],
            ", ".join("%.1f" % t for t in totals)))
    print("TTFT median without / with the cache: %.2fx; total time: %.2fx" % (
        summary["off"][0] / summary["on"][0], summary["off"][1] / summary["on"][1]))
    on = {(r[0], r[1]): r for records, _ in results["on"] for r in records}
    off = {(r[0], r[1]): r for records, _ in results["off"] for r in records}
    print("the same answers with and without the cache: %s" % all(
        on[k][3] == off[k][3] for k in on))
    # cached_tokens against the block-rounded shared prefix.
    records, _ = results["on"][0]
    first = [r for r in records if r[1] == 0]
    shared = min(lcp(first[0][5], r[5]) for r in first[1:])
    rounded = min(shared, min(len(r[5]) for r in first) - 1) // BLOCK * BLOCK
    print("first turns: shared prefix %d tokens, %d in full blocks; cached_tokens %s" % (
        shared, rounded, sorted(r[4] for r in first)))
    print("first turns that found exactly the block-rounded shared prefix: %d of %d (the "
          "others, 0, were admitted beside the first to compute it)" % (
              sum(r[4] == rounded for r in first), len(first)))
    by = {(r[0], r[1]): r for r in records}
    later = [(by[(u, t - 1)], by[(u, t)]) for (u, t) in by if t > 0]
    print("later turns that found at least their previous prompt's full blocks: %d of %d" % (
        sum(now[4] >= len(before[5]) // BLOCK * BLOCK for before, now in later), len(later)))
    print("bad cached_tokens (neither 0 nor the rounded prefix, on a first turn): %d" % sum(
        r[4] not in (0, rounded) for r in first))


if __name__ == "__main__":
    main()

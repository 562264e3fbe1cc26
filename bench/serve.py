"""A serving benchmark for any OpenAI-compatible server, with vLLM's definitions (`vllm bench
serve`), standard library only.

    python3 bench/serve.py --base-url http://127.0.0.1:8000 --model NAME \\
        [--endpoint completions|chat] [--num-prompts 32] [--input-len 64] [--output-len 64]
        [--dataset prompts.jsonl] [--request-rate inf] [--max-concurrency 8] [--seed 0]
        [--label NAME] [--json OUT.json]

Requests are streamed ("stream": true, greedy, "max_tokens": --output-len, and "ignore_eos":
true unless --no-ignore-eos) so that every token's arrival is seen. Prompts are --input-len random words drawn from --seed, or the
"prompt" of each line of --dataset. Arrivals are a Poisson process of --request-rate requests
per second (inf: all at once), at most --max-concurrency in flight.

Reported, as vLLM reports them:
  TTFT  time to first token: from sending to the first chunk with text
  TPOT  time per output token, per request: (E2EL - TTFT) / (output tokens - 1)
  ITL   inter-token latency: the time between successive chunks with text, all requests
  E2EL  end-to-end latency
  output tokens/s (the usage's completion_tokens where the server sends a usage chunk, else
  chunks with text), requests/s, and failures. Latencies in ms: mean, median, p99.
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = ("the river ran past an old mill where a baker counted loaves while children argued "
         "about clouds numbers music and the best way to fold paper boats before the evening "
         "bell rang across seven quiet hills").split()


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def one(url, model, endpoint, prompt, output_len, timeout, ignore_eos=True):
    """Sends one streamed request; returns its record."""
    rec = {"ok": False, "ttft": None, "itl": [], "latency": None, "tokens": 0, "error": ""}
    body = {"model": model, "max_tokens": output_len, "stream": True, "temperature": 0,
            "stream_options": {"include_usage": True}}
    if ignore_eos:
        body["ignore_eos"] = True
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = prompt
        path = "/v1/completions"
    start = time.perf_counter()
    last = None
    chunks = 0
    try:
        c = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            rec["error"] = "HTTP %d: %s" % (r.status, r.read()[:200])
            return rec
        buffer = b""
        done = False
        while not done:
            piece = r.read1(65536)
            if not piece:
                break
            buffer += piece
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                line = event.decode(errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                j = json.loads(data)
                if "error" in j:
                    rec["error"] = str(j["error"])[:200]
                    return rec
                if j.get("usage"):
                    rec["tokens"] = j["usage"].get("completion_tokens", 0)
                for choice in j.get("choices", []):
                    text = (choice.get("delta") or {}).get("content") if endpoint == "chat" \
                        else choice.get("text")
                    if text:
                        now = time.perf_counter()
                        if rec["ttft"] is None:
                            rec["ttft"] = now - start
                        else:
                            rec["itl"].append(now - last)
                        last = now
                        chunks += 1
        c.close()
    except Exception as e:  # a failure is counted, not fatal
        rec["error"] = repr(e)[:200]
        return rec
    rec["latency"] = time.perf_counter() - start
    rec["tokens"] = rec["tokens"] or chunks
    rec["ok"] = rec["ttft"] is not None
    if not rec["ok"]:
        rec["error"] = "no text"
    return rec


def run(args):
    url = urllib.parse.urlparse(args.base_url)
    rng = random.Random(args.seed)
    if args.dataset:
        with open(args.dataset) as f:
            prompts = [json.loads(l)["prompt"] for l in f if l.strip()]
        prompts = [prompts[i % len(prompts)] for i in range(args.num_prompts)]
    else:
        prompts = [" ".join(rng.choice(WORDS) for _ in range(args.input_len)).capitalize()
                   for _ in range(args.num_prompts)]
    records = [None] * len(prompts)
    gate = threading.Semaphore(args.max_concurrency)
    threads = []

    def worker(i):
        try:
            records[i] = one(url, args.model, args.endpoint, prompts[i], args.output_len,
                             args.timeout, args.ignore_eos)
        finally:
            gate.release()

    # Warm-up: one request, not counted (first-request costs: caches, lazy loading).
    one(url, args.model, args.endpoint, prompts[0], min(4, args.output_len), args.timeout,
        args.ignore_eos)
    start = time.perf_counter()
    for i in range(len(prompts)):
        if args.request_rate != float("inf") and i > 0:
            time.sleep(rng.expovariate(args.request_rate))
        gate.acquire()
        t = threading.Thread(target=worker, args=(i,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    duration = time.perf_counter() - start
    ok = [r for r in records if r["ok"]]
    ms = lambda xs: [x * 1000 for x in xs]
    ttft = ms([r["ttft"] for r in ok])
    tpot = ms([(r["latency"] - r["ttft"]) / (r["tokens"] - 1) for r in ok if r["tokens"] > 1])
    itl = ms([x for r in ok for x in r["itl"]])
    e2el = ms([r["latency"] for r in ok])
    out_tokens = sum(r["tokens"] for r in ok)
    result = {
        "label": args.label, "max_concurrency": args.max_concurrency,
        "request_rate": args.request_rate, "completed": len(ok),
        "failed": len(records) - len(ok), "duration_s": duration,
        "output_tokens": out_tokens, "output_throughput": out_tokens / duration,
        "request_throughput": len(ok) / duration,
    }
    for name, values in [("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)]:
        result[name + "_ms"] = {"mean": statistics.fmean(values) if values else float("nan"),
                                "median": percentile(values, 50), "p99": percentile(values, 99)}
    errors = sorted({r["error"] for r in records if not r["ok"]})
    print("%-24s c=%-3d rate=%-4s %3d ok %2d failed  %7.1f out tok/s  %5.2f req/s  "
          "TTFT %7.1f/%7.1f  TPOT %6.1f/%6.1f  ITL %6.1f/%6.1f  E2EL %7.0f/%7.0f ms "
          "(median/p99)" % (
              args.label, args.max_concurrency, args.request_rate, len(ok), len(records) - len(ok),
              result["output_throughput"], result["request_throughput"],
              result["ttft_ms"]["median"], result["ttft_ms"]["p99"],
              result["tpot_ms"]["median"], result["tpot_ms"]["p99"],
              result["itl_ms"]["median"], result["itl_ms"]["p99"],
              result["e2el_ms"]["median"], result["e2el_ms"]["p99"]))
    for e in errors[:3]:
        print("  failure: %s" % e)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(result) + "\n")
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--input-len", type=int, default=64, help="words of a random prompt")
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--dataset", help="JSON lines with a 'prompt' each, instead of random ones")
    p.add_argument("--request-rate", type=float, default=float("inf"))
    p.add_argument("--max-concurrency", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="let requests end at the end-of-sequence token (for servers that refuse "
                   "vLLM's ignore_eos, such as transformers serve; greedy answers then end where "
                   "the model ends them, the same on every server)")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--label", default="server")
    p.add_argument("--json", help="append the result as a JSON line to this file")
    args = p.parse_args()
    result = run(args)
    sys.exit(1 if result["completed"] == 0 else 0)


if __name__ == "__main__":
    main()

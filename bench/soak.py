"""A bounded soak of tpc serve on loopback (standard library only).

    python3 bench/soak.py CHECKPOINT [--requests 200 | --minutes M] [--clients 16] [--seed 0]
                          [tpc serve flags]

Starts `tpc serve CHECKPOINT --port 0` (test/e2e/Inputs/serve_check.py's Server; TPC_BIN names
the directory of tpc, else PATH), then sends --requests requests from --clients concurrent
clients: completions and chats, streamed and not, of mixed prompt and output lengths, greedy;
about one in ten invalid (each must get 400), about one in ten streamed and abandoned after a
few chunks, about one in ten streamed to a client that reads slowly (256 bytes every 0.2 s;
still a valid request, answered in full). With --minutes, the clients send such requests
until the time is up instead, and the resident memory of the server's processes (tpc serve
and its ranks, summed) is sampled every 10 s: after a warm-up of a fifth of the time it must
stay within 5% of its first sample. Then checks, and prints one line each:
  - the server never stopped, and answers /health 200;
  - every valid request was answered (200, a finish_reason, the text);
  - no KV block and no running request is left in /metrics;
  - each valid answer equals the same request sent alone afterwards (greedy: batching changes
    no answer; with --minutes, 100 of them drawn at random);
  - SIGTERM stops it with exit 0.
Exits non-zero when any check fails.
"""
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "e2e", "Inputs"))
from serve_check import Server, payloads, stream_events  # noqa: E402

WORDS = ("the river ran past an old mill where a baker counted loaves while children argued "
         "about clouds numbers music and the best way to fold paper boats before the evening "
         "bell rang across seven quiet hills").split()


def make_requests(n, rng):
    out = []
    for i in range(n):
        kind = rng.random()
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 60))).capitalize()
        chat = rng.random() < 0.5
        body = {"max_tokens": rng.randint(1, 48), "temperature": 0}
        if chat:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        r = {"i": i, "path": "/v1/chat/completions" if chat else "/v1/completions",
             "body": body, "stream": rng.random() < 0.5, "kind": "valid"}
        if kind < 0.1:
            r["kind"] = "invalid"
            bad = rng.choice([("temperature", -1), ("top_p", 2), ("max_tokens", 0),
                              ("n", 3), ("tools", []), ("max_tokens", 10 ** 6)])
            body[bad[0]] = bad[1]
        elif kind < 0.2:
            r["kind"] = "cancelled"
            r["stream"] = True
            body["max_tokens"] = 200
            body["ignore_eos"] = True
        elif kind < 0.3:
            r["slow"] = True
            r["stream"] = True
        out.append(r)
    return out


def send(server, r):
    body = dict(r["body"], stream=r["stream"])
    chat = "messages" in body
    if not r["stream"]:
        status, text, _ = server.post(r["path"], body, timeout=300)
        if status != 200:
            return status, None, None
        j = json.loads(text)
        c = j["choices"][0]
        return status, (c["message"]["content"] if chat else c["text"]), c["finish_reason"]
    if r.get("slow"):
        return slow_stream(server.port, r["path"], body, chat)
    if r["kind"] == "cancelled":
        stream_events(server.port, r["path"], body,
                      on_event=lambda events, s: len(events) >= 3 and (s.close() or True))
        return "cancelled", None, None
    status, _, events, _ = stream_events(server.port, r["path"], body)
    code = int(status.split()[1])
    if code != 200:
        return code, None, None
    data = payloads(events)
    text, finish = "", None
    for d in data[:-1]:
        j = json.loads(d)
        for c in j["choices"]:
            text += (c["delta"].get("content") or "") if chat else c["text"]
            finish = c["finish_reason"] or finish
    return (code if data[-1] == "[DONE]" else "no [DONE]"), text, finish


def slow_stream(port, path, body, chat):
    """A stream read 256 bytes at a time, 0.2 s apart; decoded here, chunked framing and all."""
    s = socket.create_connection(("127.0.0.1", port), timeout=300)
    data = json.dumps(body).encode()
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (path.encode(), len(data), data))
    raw = b""
    while True:
        piece = s.recv(256)
        if not piece:
            break
        raw += piece
        time.sleep(0.2)
    s.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    code = int(head.split(b" ")[1])
    if code != 200:
        return code, None, None
    stream = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        stream += rest[:size]
        rest = rest[size + 2:]
    events = [e for e in stream.decode().split("\n\n") if e]
    text, finish = "", None
    for e in events[:-1]:
        j = json.loads(e[len("data: "):])
        for c in j["choices"]:
            text += (c["delta"].get("content") or "") if chat else c["text"]
            finish = c["finish_reason"] or finish
    return (code if events and events[-1] == "data: [DONE]" else "no [DONE]"), text, finish


def resident_kib(group):
    """The resident memory of every process in process group `group`, in KiB."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != group:
                continue
            with open("/proc/%s/status" % pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total


def main():
    args = sys.argv[1:]
    checkpoint = args.pop(0)
    opts = {"--requests": 200, "--clients": 16, "--seed": 0, "--minutes": 0}
    for k in list(opts):
        if k in args:
            at = args.index(k)
            opts[k] = int(args[at + 1])
            del args[at:at + 2]
    rng = random.Random(opts["--seed"])
    timed = opts["--minutes"] > 0
    requests = [] if timed else make_requests(opts["--requests"], rng)
    server = Server(checkpoint, args)
    failures = []
    samples = []  # (seconds from the start, KiB resident)
    try:
        results = [None] * len(requests)
        pending = list(range(len(requests)))
        lock = threading.Lock()
        start = time.time()
        until = start + 60 * opts["--minutes"]

        def client(k):
            own = random.Random(opts["--seed"] * 1000 + k)
            while True:
                with lock:
                    if timed:
                        if time.time() >= until:
                            return
                        r = make_requests(1, own)[0]
                        r["i"] = i = len(requests)
                        requests.append(r)
                        results.append(None)
                    else:
                        if not pending:
                            return
                        i = pending.pop(0)
                        r = requests[i]
                try:
                    results[i] = send(server, r)
                except Exception as e:  # counted as a failure below
                    results[i] = ("exception %r" % e, None, None)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(opts["--clients"])]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            samples.append((time.time() - start, resident_kib(server.proc.pid)))
            for t in threads:
                t.join(10.0 / len(threads))
        took = time.time() - start
        counts = {}
        for r, (status, text, finish) in zip(requests, results):
            counts[r["kind"]] = counts.get(r["kind"], 0) + 1
            if r["kind"] == "invalid" and status != 400:
                failures.append("request %d (invalid) answered %s" % (r["i"], status))
            if r["kind"] == "valid" and (status != 200 or finish not in ("stop", "length")):
                failures.append("request %d answered %s, finish %s" % (r["i"], status, finish))
        print("soak: %d requests (%s) from %d clients in %.1f s" % (
            len(requests), ", ".join("%d %s" % (v, k) for k, v in sorted(counts.items())),
            opts["--clients"], took))
        alive = server.proc.poll() is None and server.get("/health")[0] == 200
        print("server alive and healthy: %s" % alive)
        if not alive:
            failures.append("the server is not healthy")
        time.sleep(0.5)
        left = (server.metric("num_requests_running"), server.metric("kv_cache_blocks_used"))
        print("left running: %d, KV blocks used: %d" % left)
        if left != (0, 0):
            failures.append("left running %d, blocks %d" % left)
        print("preemptions during the soak: %d" % server.metric("num_preemptions_total"))
        if timed:
            settled = [kib for t, kib in samples if t >= took / 5]
            if settled:
                growth = max(settled) / settled[0] - 1
                print("resident memory after the warm-up (%d samples): first %.1f MiB, min %.1f "
                      "MiB, max %.1f MiB, last %.1f MiB; growth over the first %.1f%%" % (
                          len(settled), settled[0] / 1024, min(settled) / 1024,
                          max(settled) / 1024, settled[-1] / 1024, 100 * growth))
                if growth > 0.05:
                    failures.append("resident memory grew %.1f%%" % (100 * growth))
        checked = [i for i, r in enumerate(requests)
                   if r["kind"] == "valid" and results[i][0] == 200]
        if timed and len(checked) > 100:
            checked = sorted(random.Random(opts["--seed"]).sample(checked, 100))
        same = differ = 0
        for i in checked:
            r, (status, text, finish) = requests[i], results[i]
            solo = send(server, dict(r, stream=False, slow=False))
            if solo[1] == text:
                same += 1
            else:
                differ += 1
                failures.append("request %d: %r batched, %r alone" % (r["i"], text, solo[1]))
        print("answers equal to their solo runs: %d of %d" % (same, same + differ))
    finally:
        server.stop()
    print("exit after SIGTERM: %s" % server.proc.returncode)
    if server.proc.returncode != 0:
        failures.append("exit %s" % server.proc.returncode)
    for f in failures[:10]:
        print("FAILED: " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

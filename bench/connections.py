"""tpc serve under idle and slowloris connections, on loopback (standard library only).

    python3 bench/connections.py CHECKPOINT [--idle 512] [--slow 64] [tpc serve flags]

Starts `tpc serve CHECKPOINT --port 0` (test/e2e/Inputs/serve_check.py's Server; TPC_BIN names
the directory of tpc, else PATH) and measures, in one run:
  1. quiet: GET /health's latency (200 requests, one at a time, each on a new connection) and
     a short completion's time (max_tokens 16, greedy; 5 in turn before the load and 5 after
     it: the median of the 10);
  2. loaded: the same while --idle connections sit open sending nothing and --slow
     connections send one byte of a request head every 2 s (slowloris); whichever of them the
     server closes by its deadline is opened again at once, so the counts hold all through;
  3. the limit: with the server started again at --max-connections M (the idle and slow ones'
     count), M connections open, the time a new connection takes to be refused (connect to
     the 503's last byte and the close; 20 tries), and then a /health once one is let go.
Prints one line per figure; the ratio of loaded to quiet completion time is the headline.
"""
import os
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "e2e", "Inputs"))
from serve_check import Server, exchange  # noqa: E402


def option(args, name, default):
    if name in args:
        i = args.index(name)
        value = int(args[i + 1])
        del args[i:i + 2]
        return value
    return default


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def health_times(port, n):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        data = exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        if not data.startswith(b"HTTP/1.1 200"):
            raise SystemExit("/health answered %r" % data[:40])
        times.append(time.perf_counter() - t)
    return times


def completion_times(server, n):
    body = {"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0,
            "ignore_eos": True}
    times = []
    for _ in range(n):
        t = time.perf_counter()
        status, _, _ = server.post("/v1/completions", body)
        if status != 200:
            raise SystemExit("a completion answered %s" % status)
        times.append(time.perf_counter() - t)
    return times


class Crowd:
    """Idle and slowloris connections, reopened whenever the server closes one."""

    def __init__(self, port, idle, slow):
        self.port, self.stop, self.reopened = port, threading.Event(), 0
        self.idle = [self.connect(b"") for _ in range(idle)]
        self.slow = [self.connect(b"GET /health HTTP/1.1\r\n") for _ in range(slow)]
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def connect(self, first):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.setblocking(False)
        if first:
            s.send(first)
        return s

    def alive(self, s):
        try:
            return s.recv(1) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    def run(self):
        while not self.stop.wait(2.0):
            for group, first in ((self.idle, b""), (self.slow, b"GET /health HTTP/1.1\r\n")):
                for i, s in enumerate(group):
                    if group is self.slow:
                        try:
                            s.send(b"X")
                        except OSError:
                            pass
                    if not self.alive(s):
                        s.close()
                        group[i] = self.connect(first)
                        self.reopened += 1

    def close(self):
        self.stop.set()
        self.thread.join()
        for s in self.idle + self.slow:
            s.close()


def refusal_times(port, n):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        data = exchange(port, b"")  # (a reset after the 503 ends it too)
        if not data.startswith(b"HTTP/1.1 503"):
            raise SystemExit("a connection past the limit got %r" % data[:40])
        times.append(time.perf_counter() - t)
    return times


def main():
    args = sys.argv[1:]
    idle, slow = option(args, "--idle", 512), option(args, "--slow", 64)
    checkpoint, flags = args[0], args[1:]
    server = Server(checkpoint, flags)
    try:
        completion_times(server, 1)  # warm
        quiet_health = health_times(server.port, 200)
        quiet = completion_times(server, 5)
        crowd = Crowd(server.port, idle, slow)
        time.sleep(3)
        loaded_health = health_times(server.port, 200)
        loaded = completion_times(server, 10)
        open_now = server.metric("http_connections_open")
        crowd.close()
        time.sleep(1)
        quiet += completion_times(server, 5)  # before and after: a drift of the machine's
    finally:
        server.stop()
    print("connections: %d idle and %d slowloris (one byte every 2 s) held open, %d reopened "
          "after the server closed them; %d open at the server while measured" % (
              idle, slow, crowd.reopened, open_now))
    for name, times in (("quiet", quiet_health), ("loaded", loaded_health)):
        print("/health %s: p50 %.2f ms, p99 %.2f ms, max %.2f ms" % (
            name, 1000 * percentile(times, 50), 1000 * percentile(times, 99),
            1000 * max(times)))
    q, l = statistics.median(quiet), statistics.median(loaded)
    print("completion (16 tokens) median: quiet %.3f s, loaded %.3f s, ratio %.2f" % (q, l, l / q))

    limit = idle + slow
    server = Server(checkpoint, flags + ["--max-connections", str(limit)])
    try:
        held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(limit)]
        for s in held:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # a head in progress: held
        time.sleep(0.5)
        refused = refusal_times(server.port, 20)
        for s in held[:1]:
            s.close()
        time.sleep(0.2)
        after = health_times(server.port, 1)
        for s in held[1:]:
            s.close()
        time.sleep(0.2)
        counted = server.metric("http_connections_refused_total")
    finally:
        server.stop()
    print("past --max-connections %d: refused (503, closed) in p50 %.2f ms, p99 %.2f ms, max "
          "%.2f ms; counted %d; /health after one closed: %.2f ms" % (
              limit, 1000 * percentile(refused, 50), 1000 * percentile(refused, 99),
              1000 * max(refused), counted, 1000 * after[0]))


if __name__ == "__main__":
    main()

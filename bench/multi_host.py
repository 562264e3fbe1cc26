#!/usr/bin/env python3
"""tpc's ranks on several hosts, measured on one machine (standard library only).

    python3 bench/multi_host.py [same] [serve] [measure]     (as root; no section: all three)

The hosts are network namespaces made by scripts/netns-cluster.sh (each with its own /tmp and
/dev/shm, joined by veth pairs to a bridge; --rate puts tbf on both ends of every link), as
test/e2e/Inputs/hosts_check.py uses them. Every cluster has a --ttl and is taken down in a
`finally`. Scratch files (compiled models, logs, logits) go to $HX_BENCH_DIR, default
/work/hx-bench: never under /tmp, which each host has its own of.

  same     the same answer on two hosts as on one: SmolLM2-135M-Instruct at tp 2 (1 + 1 ranks)
           and tp 3 (2 + 1), and a random Qwen3-MoE at tp 2 (1 + 1), through tpc launch
           --nnodes, torchrun --nnodes and mpirun --host, against tpc launch -n on one host:
           the tokens and the largest difference of the dumped logits.
  serve    tpc serve --nnodes 2 on hosts 0 and 1, the official openai client on host 2: a chat
           completion and a streamed one against one-host tpc serve, then host 1 killed
           mid-stream: what the client saw, /health, host 0's exit and its last words.
  measure  all_reduce (tpc-comm-latency) and decode ms per token (SmolLM2, a ~1B Llama shape)
           on one host and on 2 hosts at unlimited, 10gbit, 1gbit and 100mbit links, the
           hierarchy (2 hosts x 2 ranks) against Gloo's flat mesh, each next to tpc analyze
           --hosts's prediction.

Prints as it goes; bench/results/multi-host.txt is its output. Uses build/bin as built.
"""
import contextlib
import json
import shutil
import os
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELF = os.path.abspath(__file__)
TPC = os.path.join(ROOT, "build", "bin", "tpc")
LATENCY = os.path.join(ROOT, "build", "bin", "tpc-comm-latency")
TOKENIZE = os.path.join(ROOT, "build", "bin", "tpc-tokenize")
CLUSTER = os.path.join(ROOT, "scripts", "netns-cluster.sh")
WORK = os.environ.get("HX_BENCH_DIR", "/work/hx-bench")
VENV = "/root/.cache/tpc-venv/bin"
CKPT = "/root/.cache/tpc-smollm2/ckpt"
MOE_CONFIG = os.path.join(ROOT, "test", "Import", "Inputs", "qwen3_moe.json")
NAME = "hxb"               # the cluster's name: namespaces hxb-h0, hxb-h1, ...
MASTER = "10.232.0.1"      # host 0's address (netns-cluster.sh addr 0)
SUBNET = "10.232.0.0/24"
# The ~1B Llama shape (random weights): 16 layers of hidden 2048, 32 heads, 8 KV heads.
LLAMA_1B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152,
            "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
            "num_attention_heads": 32, "num_key_value_heads": 8,
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "tie_word_embeddings": False, "torch_dtype": "float32", "bos_token_id": 1,
            "eos_token_id": 2}
TEXT = ("Once upon a time, in a small village by the sea, there lived an old fisherman who "
        "every morning would walk down to the harbor and look at the boats.")
_port = [29500]


def say(*lines):
    for line in lines:
        print(line, flush=True)


def next_port():
    """A fresh rendezvous port for each run (no TIME_WAIT from the run before)."""
    _port[0] += 10
    return _port[0]


def run(cmd, timeout=300, check=True, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=check, **kw)


def tail(path, n=6):
    lines = open(path, errors="replace").read().splitlines() if os.path.exists(path) else []
    return ["    | " + line for line in lines[-n:]]


# ---- the cluster -------------------------------------------------------------------------

@contextlib.contextmanager
def cluster(hosts, rate=None, ttl=900):
    """netns-cluster.sh up HOSTS [--rate RATE], always taken down after."""
    args = ["up", str(hosts), "--ttl", str(ttl)] + (["--rate", rate] if rate else [])
    run([CLUSTER, *args, "--name", NAME], timeout=120)
    try:
        yield
    finally:
        run([CLUSTER, "down", "--name", NAME], timeout=120, check=False)


def left_running():
    return run([CLUSTER, "pids", "--name", NAME], check=False).stdout.split()


def on_host(k, cmd, log, env=None):
    """Starts cmd on host k (None: this machine, no namespace), its output into log."""
    if k is not None:
        cmd = [CLUSTER, "exec", str(k), "--name", NAME, "--", *cmd]
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})}, start_new_session=True)


def finish(procs, limit):
    """Each process's exit status; one still running after `limit` s is killed (None)."""
    end = time.time() + limit
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, end - time.time())))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # its session: the processes this script started
            p.wait()
            codes.append(None)
    return codes


def tokens_of(log):
    found = re.search(r"tokens:([ 0-9]*)", open(log).read()) if os.path.exists(log) else None
    return found.group(1).split() if found else None


def decode_ms(log):
    found = re.search(r"decode: ([0-9.]+) ms per token", open(log).read())
    return float(found.group(1)) if found else None


def logit_diff(ref, got):
    """The largest |difference| of two --dump-logits files, or why there is none."""
    a = open(ref, "rb").read()
    b = open(got, "rb").read() if os.path.exists(got) else b""
    if len(a) != len(b) or not a:
        return None, "no logits (%d bytes against %d)" % (len(b), len(a))
    x, y = struct.unpack("%df" % (len(a) // 4), a), struct.unpack("%df" % (len(b) // 4), b)
    return max(abs(p - q) for p, q in zip(x, y)), ""


def trace_paths(trace):
    try:
        return " ".join(sorted({c["path"] for c in json.load(open(trace))["collectives"]}))
    except (OSError, ValueError, KeyError):
        return "-"


# ---- the models --------------------------------------------------------------------------

def models():
    """Imports and compiles what the sections run into WORK/models, each run afresh: a binary
    holds the runtime it was linked with."""
    d = os.path.join(WORK, "models")
    os.makedirs(os.path.join(d, "l1b"), exist_ok=True)
    with open(os.path.join(d, "l1b", "config.json"), "w") as f:
        json.dump(LLAMA_1B, f)
    sources = {"smol": os.path.join(CKPT, "config.json"), "moe": MOE_CONFIG,
               "l1b": os.path.join(d, "l1b", "config.json")}
    for name, config in sources.items():
        mlir = os.path.join(d, name + ".mlir")
        if not os.path.exists(mlir):
            run([TPC, "import", config, "-o", mlir])
    binaries = {}
    for name, tp in [("smol", 2), ("smol", 3), ("moe", 2), ("l1b", 2)]:
        out = os.path.join(d, "%s%d" % (name, tp))
        shutil.rmtree(out, ignore_errors=True)
        run([TPC, "compile", os.path.join(d, name + ".mlir"), "--plan", "auto", "--tp",
             str(tp), "-o", out], timeout=600)
        exe = [f for f in os.listdir(out) if not f.endswith(".cpp")]
        binaries["%s%d" % (name, tp)] = os.path.join(out, exe[0])
    return d, binaries


def prompt_ids(n):
    """The first n ids of TEXT in SmolLM2's tokenizer (the 1B shape shares its vocabulary)."""
    ids = run([TOKENIZE, CKPT, "encode"], input=TEXT).stdout.split()
    assert len(ids) >= n, ids
    return ",".join(ids[:n])


# ---- 1. the same answer ------------------------------------------------------------------

def section_same():
    d, bins = models()
    out = os.path.join(WORK, "same")
    os.makedirs(out, exist_ok=True)
    smol = ["--weights", CKPT, "--prompt-ids", prompt_ids(20)]
    moe = ["--random-weights", "1", "--prompt-ids",
           ",".join(str((7 * i + 3) % 32) for i in range(20))]  # its vocabulary is 32
    common = ["--max-new-tokens", "8", "--ignore-eos", "--timeout", "30"]
    cases = [("SmolLM2-135M", "smol2", (1, 1), smol), ("SmolLM2-135M", "smol3", (2, 1), smol),
             ("qwen3_moe", "moe2", (1, 1), moe)]
    say("", "## 1. same: the same answer on two hosts as on one",
        "# prompt: 20 ids (SmolLM2: the first 20 tokens of %r...; the MoE: (7i+3) mod 32), "
        "8 new tokens, --ignore-eos, --dump-logits (rank 0's fp32 logits of every step)"
        % TEXT[:40],
        "$ tpc launch -n N BIN ARGS                                       # the reference, one host",
        "$ [host K] tpc launch --nnodes 2 --node-rank K --master-addr 10.232.0.1 "
        "--master-port P --nproc-per-node n0,n1 BIN ARGS",
        "$ [host K] torchrun --nnodes 2 --node-rank K --master-addr 10.232.0.1 --master-port P "
        "--nproc-per-node nK --no-python BIN ARGS",
        "$ [host 0, own UTS ns] mpirun --allow-run-as-root -n N --host 10.232.0.1:n0,10.232.0.2:n1 "
        "--mca plm_rsh_agent AGENT --mca {oob,btl}_tcp_if_include 10.232.0.0/24 "
        "--mca btl self,vader,tcp BIN ARGS", "")
    agent = os.path.join(out, "mpi-agent.sh")  # "agent HOST CMD...": CMD on that host,
    with open(agent, "w") as f:                # in a UTS namespace named for it
        f.write('#!/bin/sh\nhost=$1; shift\nk=$(( ${host##*.} - 1 ))\n'
                'exec %s exec $k --name %s -- unshare --uts sh -c "hostname %s-h$k; $*"\n'
                % (CLUSTER, NAME, NAME))
    os.chmod(agent, 0o755)
    header = "%-13s %-3s %-5s %-11s %-8s %-7s %-16s %-7s %s" % (
        "model", "tp", "hosts", "launcher", "exit", "tokens", "max |logit diff|", "<=1e-5",
        "path")
    rows = []
    with cluster(2):
        for model, key, per_node, args, in cases:
            binary, tp = bins[key], sum(per_node)
            tag = "%s-tp%d" % (key, tp)
            ref_bin, ref_log = os.path.join(out, tag + "-ref.bin"), os.path.join(out, tag + "-ref.txt")
            code = finish([on_host(None, [TPC, "launch", "-n", str(tp), binary, *args, *common,
                                          "--dump-logits", ref_bin], ref_log)], 180)
            ref_tokens = tokens_of(ref_log)
            say("%s tp %d, one host (tpc launch -n %d): exit %s, tokens %s"
                % (model, tp, tp, code, " ".join(ref_tokens or ["(none)"])))
            for how in ("tpc launch", "torchrun", "mpirun"):
                port = next_port()
                run_tag = "%s-%s" % (tag, how.split()[-1])
                dump, trace = os.path.join(out, run_tag + ".bin"), os.path.join(out, run_tag + ".json")
                for stale in (dump, trace + ".rank0"):
                    if os.path.exists(stale):
                        os.remove(stale)
                extra = [*args, *common, "--dump-logits", dump, "--trace", trace]
                logs = [os.path.join(out, "%s-host%d.txt" % (run_tag, k)) for k in range(2)]
                if how == "mpirun":
                    cmd = ["unshare", "--uts", "sh", "-c", 'hostname %s-h0; exec "$@"' % NAME,
                           "sh", "mpirun", "--allow-run-as-root", "-n", str(tp), "--host",
                           "10.232.0.1:%d,10.232.0.2:%d" % per_node, "--mca", "plm_rsh_agent",
                           agent, "--mca", "oob_tcp_if_include", SUBNET, "--mca",
                           "btl_tcp_if_include", SUBNET, "--mca", "btl", "self,vader,tcp",
                           binary, *extra]
                    logs = logs[:1]
                    procs = [on_host(0, cmd, logs[0])]
                else:
                    procs = []
                    for k in range(2):
                        if how == "torchrun":
                            cmd = [os.path.join(VENV, "torchrun"), "--nnodes", "2", "--node-rank",
                                   str(k), "--master-addr", MASTER, "--master-port", str(port),
                                   "--nproc-per-node", str(per_node[k]), "--no-python", binary,
                                   *extra]
                        else:
                            cmd = [TPC, "launch", "--nnodes", "2", "--node-rank", str(k),
                                   "--master-addr", MASTER, "--master-port", str(port),
                                   "--nproc-per-node", "%d,%d" % per_node, binary, *extra]
                        procs.append(on_host(k, cmd, logs[k]))
                codes = finish(procs, 180)
                worst, why = logit_diff(ref_bin, dump)
                same_tokens = tokens_of(logs[0]) == ref_tokens and ref_tokens is not None
                rows.append("%-13s %-3d %-5s %-11s %-8s %-7s %-16s %-7s %s" % (
                    model, tp, "%d+%d" % per_node, how, codes, "same" if same_tokens else "DIFFER",
                    why or "%.3g" % worst, "yes" if worst is not None and worst <= 1e-5 else "NO",
                    trace_paths(trace + ".rank0")))
                say(rows[-1])
                if any(c != 0 for c in codes) or not same_tokens:
                    for k, log in enumerate(logs):
                        say("  host %d's output:" % k, *tail(log, 10))
        say("", header, *rows)


# ---- 2. serving across hosts -------------------------------------------------------------

def client_main(mode):
    """Runs on host 2 (the venv's python): the official openai client against host 0."""
    url = "http://%s:8000" % MASTER
    if mode == "health":  # GET /health, standard library only
        import urllib.error
        import urllib.request
        try:
            with urllib.request.urlopen(url + "/health", timeout=3) as r:
                print("%d %s" % (r.status, r.read().decode()[:300]))
        except urllib.error.HTTPError as e:
            print("%d %s" % (e.code, e.read().decode()[:300]))
        except OSError as e:
            print("no answer: %s" % (getattr(e, "reason", None) or e))
        return
    if mode == "wait":  # until /health is 200 (the ranks met and loaded)
        import urllib.request
        for _ in range(300):
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        sys.exit("health never became 200")
    import openai
    client = openai.OpenAI(base_url=url + "/v1", api_key="anything", max_retries=0, timeout=60)
    if mode == "chat":
        messages = [{"role": "user", "content": "What is the capital of France? Answer in one "
                     "sentence, then name one famous building there."}]
        r = client.chat.completions.create(model="ckpt", messages=messages, max_tokens=48,
                                           temperature=0)
        text, reason = "", None
        for chunk in client.chat.completions.create(model="ckpt", messages=messages,
                                                    max_tokens=48, temperature=0, stream=True):
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                reason = chunk.choices[0].finish_reason or reason
        print(json.dumps({"text": r.choices[0].message.content,
                          "finish_reason": r.choices[0].finish_reason,
                          "stream_text": text, "stream_finish_reason": reason}))
        return
    # "long": a 200-token stream; says STREAMING once tokens flow, then what ended it
    chunks, text, reason = 0, "", None
    try:
        stream = client.chat.completions.create(
            model="ckpt", max_tokens=200, temperature=0, stream=True,
            messages=[{"role": "user", "content": "Write a long story about an old fisherman."}])
        for chunk in stream:
            chunks += 1
            if chunks == 5:
                print("STREAMING", flush=True)
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                reason = chunk.choices[0].finish_reason or reason
        print(json.dumps({"chunks": chunks, "finish_reason": reason, "error": None}))
    except Exception as e:  # what the client raised: the in-band error event, or a cut stream
        print(json.dumps({"chunks": chunks, "finish_reason": reason,
                          "error": "%s: %s" % (type(e).__name__, e)}))


def wait_for(log, text, proc, limit):
    end = time.time() + limit
    while time.time() < end and proc.poll() is None:
        if os.path.exists(log) and text in open(log, errors="replace").read():
            return True
        time.sleep(0.1)
    return False


def client(mode, log):
    code = finish([on_host(2, [os.path.join(VENV, "python"), SELF, "_client", mode], log)], 90)
    return code[0], open(log).read().strip()


def section_serve():
    out = os.path.join(WORK, "serve")
    os.makedirs(out, exist_ok=True)
    env = {"TPC_CACHE_DIR": os.path.join(WORK, "cache")}  # tpc serve's compile cache
    flags = ["--tp", "2", "--host", MASTER, "--port", "8000", "--timeout", "5",
             "--max-model-len", "512"]
    multi = lambda k: ["--nnodes", "2", "--node-rank", str(k), "--master-addr", MASTER,
                       "--master-port", str(port)]
    say("", "## 2. serve: tpc serve across two hosts, the openai client on a third",
        "$ [host 0] tpc serve %s %s        # one host" % (CKPT, " ".join(flags)),
        "$ [host K] tpc serve %s %s --nnodes 2 --node-rank K --master-addr %s --master-port P"
        % (CKPT, " ".join(flags), MASTER),
        "$ [host 2] %s/python bench/multi_host.py _client chat|long|health   "
        "# openai.OpenAI(base_url='http://%s:8000/v1'), temperature 0" % (VENV, MASTER), "")
    answers = {}
    with cluster(3):
        for label in ("one host", "two hosts"):
            port = next_port()
            hosts = [0] if label == "one host" else [0, 1]
            logs = [os.path.join(out, "%s-host%d.txt" % (label.replace(" ", "-"), k))
                    for k in hosts]
            procs = [on_host(k, [TPC, "serve", CKPT, *flags,
                                 *(multi(k) if label == "two hosts" else [])], logs[k], env)
                     for k in hosts]
            try:
                if not wait_for(logs[0], "listening on", procs[0], 240):
                    say("%s: host 0 never printed 'listening on'" % label, *tail(logs[0], 10))
                    return
                code, text = client("wait", os.path.join(out, "wait.txt"))
                code, text = client("chat", os.path.join(out, "chat-%s.txt" % label[:3]))
                if code != 0:
                    say("%s: the client failed (exit %s):" % (label, code), text[-800:])
                    return
                answers[label] = json.loads(text.splitlines()[-1])
                a = answers[label]
                say("%s: chat: %r (finish_reason %s)" % (label, a["text"], a["finish_reason"]),
                    "%s: streamed: %r (finish_reason %s)" % (
                        label, a["stream_text"], a["stream_finish_reason"]))
                if label == "one host":
                    procs[0].send_signal(signal.SIGTERM)  # tpc serve itself: it drains
                    say("one host: SIGTERM: exit %s" % finish(procs, 60))
                    continue
                same = all(answers["one host"][f] == a[f] for f in a)
                say("two hosts: the same greedy answers (text and finish_reason, both calls) as "
                    "one host: %s" % ("yes" if same else "NO"))
                # The fault: host 1's every process SIGKILLed while a stream is running.
                long_log = os.path.join(out, "long.txt")
                streamer = on_host(2, [os.path.join(VENV, "python"), SELF, "_client", "long"],
                                   long_log)
                if not wait_for(long_log, "STREAMING", streamer, 60):
                    say("the long stream never started:", *tail(long_log, 10))
                    return
                pids = run(["ip", "netns", "pids", NAME + "-h1"]).stdout.split()
                killed = time.time()
                run(["kill", "-9", *pids], check=False)
                _, health = client("health", os.path.join(out, "health.txt"))
                health_at = time.time() - killed
                codes = finish(procs, 5 + 10 + 5)
                took = time.time() - killed
                finish([streamer], 30)
                time.sleep(1)
                left = left_running()
                seen = json.loads(open(long_log).read().splitlines()[-1])
                last = [l for l in open(logs[0], errors="replace").read().splitlines()
                        if "tpc serve: request" not in l][-3:]
                say("", "fault: a 200-token stream running, every process of host 1 SIGKILLed "
                    "(%d pids) once 5 chunks had come" % len(pids),
                    "fault: the client saw: %s after %d chunks (finish_reason %s)" % (
                        seen["error"] or "no error", seen["chunks"], seen["finish_reason"]),
                    "fault: GET /health %.1f s after the kill: %s" % (health_at, health),
                    "fault: host 0's tpc serve: exit %s, %.1f s after the kill (--timeout 5 + "
                    "10 s = 15 s: %s); host 1's: %s (SIGKILLed)" % (
                        codes[0], took, "within" if took <= 15 else "LATER", codes[1]),
                    "fault: host 0's last lines:", *["    | " + l for l in last],
                    "fault: processes left in the cluster's namespaces: %s"
                    % (" ".join(left) if left else "none"))
            finally:
                finish(procs, 0.1)


# ---- 3. measured against predicted -------------------------------------------------------

def pingpong_main(role, addr, n, spin):
    """A 1-byte TCP ping-pong (TCP_NODELAY) on port 29999: the link's round trip."""
    spin = spin == "spin"

    def read(c):
        if not spin:
            return c.recv(64)
        while True:  # busy-polled: no wake-up in the time
            try:
                return c.recv(64, socket.MSG_DONTWAIT)
            except BlockingIOError:
                pass
    if role == "serve":
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, 29999))
        s.listen(1)
        s.settimeout(30)
        c, _ = s.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            b = read(c)
            if not b:
                return
            c.sendall(b)
    for _ in range(200):
        try:
            c = socket.create_connection((addr, 29999), timeout=5)
            break
        except OSError:
            time.sleep(0.05)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtt = []
    for _ in range(int(n)):
        start = time.perf_counter()
        c.sendall(b"x")
        read(c)
        rtt.append((time.perf_counter() - start) * 1e6)
    print("%.1f" % statistics.median(rtt[int(n) // 10:]))


def bulk_main(role, addr, megabytes):
    """One TCP stream of `megabytes` MiB on port 29998: the link's rate, Gbit/s."""
    if role == "serve":
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, 29998))
        s.listen(1)
        s.settimeout(30)
        c, _ = s.accept()
        while c.recv(1 << 20):
            pass
        return
    for _ in range(200):
        try:
            c = socket.create_connection((addr, 29998), timeout=5)
            break
        except OSError:
            time.sleep(0.05)
    chunk = b"x" * (1 << 20)
    start = time.perf_counter()
    for _ in range(int(megabytes)):
        c.sendall(chunk)
    c.shutdown(socket.SHUT_WR)
    c.recv(1)  # the server's close: every byte has arrived
    print("%.2f" % (int(megabytes) * (1 << 20) * 8 / (time.perf_counter() - start) / 1e9))


def link_rate():
    """Gbit/s of one TCP stream host 0 -> host 1 (the veth's rate where tbf sets none)."""
    log = os.path.join(WORK, "measure", "bulk-serve.txt")
    server = on_host(1, ["python3", SELF, "_bulk", "serve", "10.232.0.2", "0"], log)
    got = run([CLUSTER, "exec", "0", "--name", NAME, "--", "python3", SELF, "_bulk", "client",
               "10.232.0.2", "512"], timeout=120)
    finish([server], 10)
    return float(got.stdout.split()[-1])


def link_latency():
    """Half the median round trip host 0 <-> host 1: blocking, and busy-polled."""
    found = {}
    for mode in ("block", "spin"):
        log = os.path.join(WORK, "measure", "pp-serve.txt")
        server = on_host(1, ["python3", SELF, "_pingpong", "serve", "10.232.0.2", "0", mode], log)
        got = run([CLUSTER, "exec", "0", "--name", NAME, "--", "python3", SELF, "_pingpong",
                   "client", "10.232.0.2", "3000", mode], timeout=60)
        finish([server], 10)
        found[mode] = float(got.stdout.split()[-1])
    return found


def analyze(mlir, tp, hosts, gbps=None, latency=None):
    cmd = [TPC, "analyze", mlir, "--plan", "auto", "--tp", str(tp), "--hosts", str(hosts),
           "--json"]
    if hosts > 1:
        cmd += ["--link-gbps", "%g" % gbps, "--link-latency-us", "%.1f" % latency]
    return json.loads(run(cmd).stdout)


def all_reduce_us(report, phase, nbytes):
    """The predicted_us of `phase`'s first all_reduce of `nbytes`, or None."""
    for c in report[phase]["collectives"]:
        if c["kind"] == "all_reduce" and c["bytes"] == nbytes:
            return c["predicted_us"]
    return None


RUNS = 3  # each all_reduce table and each decode figure: the median of this many runs


def comm_latency(hosts, per_node, world, log, env, repeat=RUNS):
    """tpc-comm-latency WORLD 500, `repeat` times: {transport: ([median us per size], [every run's
    us per size], same bits on every rank in every run)}, from rank 0's tables."""
    runs = {}
    for r in range(repeat):
        path = "%s-run%d" % (log, r)
        if hosts:
            port = next_port()
            procs = [on_host(k, [TPC, "launch", "--nnodes", "2", "--node-rank", str(k),
                                 "--master-addr", MASTER, "--master-port", str(port),
                                 "--nproc-per-node", str(per_node), LATENCY, str(world), "500"],
                             path + "-host%d" % k, env) for k in range(2)]
            codes = finish(procs, 240)
            path += "-host0"
        else:
            codes = finish([on_host(None, [LATENCY, str(world), "500"], path, env)], 240)
        found = 0
        for line in open(path).read().splitlines():
            f = re.sub(r"^\[rank \d+\] ", "", line).split()
            if f and f[0] in ("auto", "gloo", "shm") and len(f) == 5:
                runs.setdefault(f[0], []).append(([float(v) for v in f[1:4]], f[4] == "yes"))
                found += 1
        if any(c != 0 for c in codes) or not found:
            say("  tpc-comm-latency failed: exit %s" % codes, *tail(path, 8))
    return {t: ([statistics.median(us[i] for us, _ in got) for i in range(3)],
                [us for us, _ in got], all(ok for _, ok in got)) for t, got in runs.items()}


def section_measure():
    d, bins = models()
    out = os.path.join(WORK, "measure")
    os.makedirs(out, exist_ok=True)
    sizes = [2304, 8192, 1048576]
    env = {"TPC_COMM_SIZES": ",".join(map(str, sizes))}
    mlir = {m: os.path.join(d, m + ".mlir") for m in ("smol", "l1b")}
    # Which model's report prices which size: SmolLM2's decode all_reduce (hidden 576 x 4 B),
    # the 1B shape's (2048 x 4 B), and the 1B shape's prefill all_reduce of 128 tokens (1 MiB).
    priced = {2304: ("smol", "decode"), 8192: ("l1b", "decode"), 1048576: ("l1b", "prefill")}
    weights = {"smol": ["--weights", CKPT], "l1b": ["--random-weights", "1"]}
    decode = ["--prompt-ids", prompt_ids(32), "--max-new-tokens", "32", "--ignore-eos",
              "--warmup", "--timeout", "60"]
    names = {"smol": "SmolLM2-135M", "l1b": "1B shape"}
    off, ref_tokens = [], {}
    say("", "## 3. measure: all_reduce and decode, measured against tpc analyze --hosts",
        "# load average at the start: %.2f %.2f %.2f" % os.getloadavg(),
        "# all_reduce: each run's figure is rank 0's median us of back-to-back calls (500 "
        "calls; 1 MB: 50); the table gives the median of %d runs, and for auto (shm on one "
        "host) the runs' range." % RUNS,
        "$ TPC_COMM_SIZES=2304,8192,1048576 build/bin/tpc-comm-latency 2 500            # one host",
        "$ [host K] TPC_COMM_SIZES=... tpc launch --nnodes 2 --node-rank K --master-addr 10.232.0.1 "
        "--master-port P --nproc-per-node 1 build/bin/tpc-comm-latency 2 500",
        "# decode: rank 0's median step (--warmup); %d one-host runs interleaved with %d runs "
        "on the 2 hosts, under each link setting (this machine's speed drifts by a third over "
        "minutes, see the notes); the median of each, every run's in brackets; tokens: every "
        "run's against the first one-host run's." % (RUNS, RUNS),
        "$ tpc launch -n 2 BIN ARGS                                     # one host",
        "$ [host K] tpc launch --nnodes 2 --node-rank K --master-addr 10.232.0.1 --master-port P "
        "--nproc-per-node 1 BIN ARGS",
        "#   ARGS: --weights CKPT (SmolLM2) | --random-weights 1 (1B shape), %s" % " ".join(decode),
        "# predicted all_reduce: tpc analyze M.mlir --plan auto --tp 2 --hosts H --link-gbps B "
        "--link-latency-us L --json: 2304 B and 8 KB from SmolLM2's and the 1B shape's decode "
        "all_reduce, 1 MB from the 1B shape's prefill all_reduce (128 tokens x 2048 x 4 B); "
        "the model prices tpc's own path (shm / auto), not Gloo's: no prediction for gloo.",
        "# predicted decode ms = measured one-host decode ms - decode.predicted_us(--hosts 1) "
        "+ decode.predicted_us(--hosts 2, B, L): the model prices the collectives; the "
        "compute is the one-host runs'.",
        "# B: the tbf rate; unlimited: one TCP stream's rate between the two hosts, measured "
        "(the veth has none of its own). L: half the median round trip of a 1-byte TCP ping-pong "
        "(TCP_NODELAY, 3000 trips, Python) between host 0 and host 1, measured on each "
        "cluster, busy-polled (the model's 15 us mesh-call constant holds the wake-ups); the "
        "blocking ping-pong's round trip is shown beside it.", "")

    def compare(label, measured, predicted):
        if predicted is None or measured is None:
            return "%10s %6s %6s" % ("-", "-", "")
        ratio = measured / predicted
        ok = abs(ratio - 1) <= 0.3
        if not ok:
            off.append("%s: measured %.1f, predicted %.1f (x%.2f)" % (label, measured, predicted,
                                                                     ratio))
        return "%10.1f %6.2f %6s" % (predicted, ratio, "yes" if ok else "NO")

    def comm_table(setting, rows, reports):
        mine = "auto" if "auto" in rows else "shm"
        say("%-7s %-24s %10s %10s %6s %6s" % (
            "size", "%s us (range)" % mine, "gloo us", "predicted", "ratio", "<=30%"))
        for i, n in enumerate(sizes):
            model, phase = priced[n]
            med, each, _ = rows.get(mine, (None, [], False))
            say("%-7s %-24s %10s %s" % (
                "%d B" % n if n < 4096 else "%d KB" % (n // 1024) if n < 1 << 20 else "1 MB",
                "%.1f (%.1f-%.1f)" % (med[i], min(e[i] for e in each), max(e[i] for e in each))
                if med else "-",
                "%.1f" % rows["gloo"][0][i] if "gloo" in rows else "-",
                compare("all_reduce %d B, %s" % (n, setting), med[i] if med else None,
                        all_reduce_us(reports[model], phase, n))))
        say("same bits on every rank, every run: %s"
            % ", ".join("%s %s" % (t, "yes" if r[2] else "NO") for t, r in rows.items()))

    def decode_run(m, hosts, log, extra_env=None):
        """One decode of model m, on this machine (hosts 0) or on 2 hosts: (ms, tokens)."""
        if hosts == 0:
            procs = [on_host(None, [TPC, "launch", "-n", "2", bins[m + "2"], *weights[m],
                                    *decode], log % 0)]
        else:
            port = next_port()
            procs = [on_host(k, [TPC, "launch", "--nnodes", "2", "--node-rank", str(k),
                                 "--master-addr", MASTER, "--master-port", str(port),
                                 "--nproc-per-node", "1", bins[m + "2"], *weights[m], *decode],
                             log % k, extra_env) for k in range(2)]
        codes = finish(procs, 300)
        if any(c != 0 for c in codes):
            for k in range(len(procs)):
                say("  %s: host %d's output:" % (names[m], k), *tail(log % k, 8))
        tokens = tokens_of(log % 0)
        ref_tokens.setdefault(m, tokens)
        return decode_ms(log % 0), tokens

    def decode_line(m, what, label, runs, pred):
        ms = [r[0] for r in runs if r[0] is not None]
        med = statistics.median(ms) if ms else None
        same = all(r[1] == ref_tokens[m] and r[1] for r in runs)
        say("%-22s %9s %-21s %s  %s" % (
            what, "%.2f" % med if med else "-",
            "[%s]" % " ".join("%.1f" % r[0] if r[0] else "-" for r in runs),
            compare("decode %s, %s" % (what, label), med, pred) if pred else "%24s" % "",
            "same as one host" if same else "DIFFER"))
        return med

    one = {m: analyze(mlir[m], 2, 1) for m in mlir}
    say("### one host (2 local ranks; --hosts 1)")
    comm_table("one host", comm_latency(None, 0, 2, os.path.join(out, "comm-one"), env), one)

    settings = [("unlimited", None, None), ("10gbit", "10gbit", 10.0),
                ("1gbit", "1gbit", 1.0), ("100mbit", "100mbit", 0.1)]
    for label, rate, gbps in settings:
        with cluster(2, rate):
            rtt = link_latency()
            lat = rtt["spin"] / 2
            measured = ""
            if gbps is None:  # no tbf: the veth's own rate, measured
                gbps = link_rate()
                measured = ", measured: one TCP stream of 512 MiB"
            say("", "### 2 hosts x 1 rank, %s (B = %g Gbit/s%s); L = %.1f us (round trip %.1f us "
                "busy-polled, %.1f us blocking)" % (label, gbps, measured, lat, rtt["spin"],
                                                     rtt["block"]))
            two = {m: analyze(mlir[m], 2, 2, gbps, lat) for m in mlir}
            comm_table(label, comm_latency(True, 1, 2, os.path.join(out, "comm-" + label),
                                           env), two)
            say("%-22s %9s %-21s %10s %6s %6s  %s" % (
                "decode", "ms/token", "(each run)", "predicted", "ratio", "<=30%", "tokens"))
            for m in mlir:
                runs = {0: [], 2: []}
                for r in range(RUNS):  # one host, then 2 hosts, in turn
                    for hosts in (0, 2):
                        runs[hosts].append(decode_run(m, hosts, os.path.join(
                            out, "decode-%s-%s-%dhosts-run%d-host%%d.txt" % (m, label, hosts, r))))
                base = decode_line(m, names[m] + ", one host", label, runs[0], None)
                pred = None if base is None else (base + (two[m]["decode"]["predicted_us"] -
                                                          one[m]["decode"]["predicted_us"]) / 1e3)
                decode_line(m, names[m] + ", 2 hosts", label, runs[2], pred)
                if rate is None and m == "smol":  # the same on Gloo's pairs, for scale
                    gloo = [decode_run(m, 2, os.path.join(
                        out, "decode-%s-gloo-run%d-host%%d.txt" % (m, r)),
                        {"TPC_TRANSPORT": "gloo"}) for r in range(RUNS)]
                    decode_line(m, names[m] + ", 2 hosts, Gloo", label, gloo, None)
            if rate is None:  # the hierarchy against the flat mesh, 2 hosts x 2 ranks
                say("", "### 2 hosts x 2 ranks, unlimited: the hierarchy (auto: shm inside a "
                    "host, the mesh between the hosts' first ranks) against Gloo's flat mesh "
                    "(gloo); 4 ranks on 2 cores",
                    "$ [host K] TPC_COMM_SIZES=... tpc launch --nnodes 2 --node-rank K "
                    "--master-addr 10.232.0.1 --nproc-per-node 2 build/bin/tpc-comm-latency 4 500",
                    "# predicted: the same reports at --tp 4 --hosts 2 (B and L as above)")
                four = {m: analyze(mlir[m], 4, 2, gbps, lat) for m in mlir}
                comm_table("2x2 hierarchy", comm_latency(True, 2, 4, os.path.join(
                    out, "comm-2x2"), env), four)
                local = comm_latency(None, 0, 4, os.path.join(out, "comm-one4"), env, repeat=1)
                if "shm" in local:
                    say("for scale, 4 ranks on one host (tpc-comm-latency 4 500, shm, one run): %s us"
                        % " / ".join("%.1f" % v for v in local["shm"][0]))
    say("", "# load average at the end: %.2f %.2f %.2f" % os.getloadavg(),
        "# off by more than 30%%: %d" % len(off), *["#   " + o for o in off])


# ---- the run -----------------------------------------------------------------------------

def machine_line():
    """The run's first line: when, and the machine (cores, CPU, memory, load)."""
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    return ("# %s, this machine: nproc %d, %s, %d GiB; load average %.2f %.2f %.2f at the start."
            % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(), cpu,
               os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 30,
               *os.getloadavg()))


def build_facts():
    """The commit, when build/bin/tpc was built, and the tracked files the tree changes."""
    commit = run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).stdout.strip()
    dirty = run(["git", "-C", ROOT, "status", "--short", "--untracked-files=no"]).stdout
    built = time.strftime("%Y-%m-%d %H:%M", time.gmtime(os.path.getmtime(TPC)))
    changed = ", ".join(l.split()[-1] for l in dirty.splitlines() if l.strip()) or "nothing"
    return commit, built, changed


def header(sections):
    commit, built, changed = build_facts()
    say(machine_line(),
        "# Commit %s; build/bin/tpc built %s UTC from the working tree, which changes %s."
        % (commit, built, changed),
        "# Hosts: network namespaces of scripts/netns-cluster.sh (veth pairs to a bridge; "
        "--rate: tbf on both ends), all on this one machine's 2 cores.",
        "$ python3 bench/multi_host.py %s" % " ".join(sections))


def main():
    if sys.argv[1:2] == ["_client"]:
        return client_main(sys.argv[2])
    if sys.argv[1:2] == ["_pingpong"]:
        return pingpong_main(*sys.argv[2:6])
    if sys.argv[1:2] == ["_bulk"]:
        return bulk_main(*sys.argv[2:5])
    sections = sys.argv[1:] or ["same", "serve", "measure"]
    unknown = [s for s in sections if s not in ("same", "serve", "measure")]
    if unknown:
        sys.exit("usage: multi_host.py [same] [serve] [measure]  (unknown: %s)" % unknown)
    if os.path.realpath(WORK).startswith("/tmp"):
        sys.exit("HX_BENCH_DIR must not be under /tmp: each host has its own")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the clusters' finally still runs
    os.makedirs(WORK, exist_ok=True)
    header(sections)
    started = time.time()
    for s in sections:
        t = time.time()
        {"same": section_same, "serve": section_serve, "measure": section_measure}[s]()
        say("# (%s: %.0f s)" % (s, time.time() - t))
    say("", "# total %.0f s; load average at the end %.2f %.2f %.2f"
        % (time.time() - started, *os.getloadavg()))


if __name__ == "__main__":
    main()

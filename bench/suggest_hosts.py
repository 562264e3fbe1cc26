#!/usr/bin/env python3
"""tpc suggest's ranking of meshes across two hosts, against the measured one (stdlib only).

    python3 bench/suggest_hosts.py [--runs 3] [--rates 1gbit,100mbit] [--predicted FILE]
                                                                              (as root)

The real SmolLM2-135M-Instruct (~/.cache/tpc-smollm2/ckpt), compiled with --plan auto for three
meshes of at most 2 ranks: tp 1 (one rank, on host 0 alone), tp 2 and pp 2 x tp 1 (one rank on
each of 2 hosts, tpc launch --nnodes 2). The hosts are network namespaces
(scripts/netns-cluster.sh through bench/multi_host.py's helpers), a fresh cluster for each link
rate (tbf on both ends of every link), torn down after. Under each rate, interleaved (tp 1,
tp 2, pp 2, that round --runs times: this machine's speed drifts):

  decode      rank 0's median decode step, ms per token (the binary's --warmup): a 32-token
              prompt, --max-new-tokens 32 --ignore-eos, one sequence;
  c8 tok/s    output tokens per second at concurrency 8: 16 requests of 32 random prompt ids
              (tpc bench's: mt19937_64 from seed 0, ids mod the vocabulary) and 128 new tokens
              each, ignore_eos, all arriving at the start, through the binary's --requests
              --request-metrics --max-num-seqs 8 --max-model-len 160, as tpc bench runs it;
              the figure is tpc bench's: the output tokens over the last request's finished_ms
              (from the first step's start).

Then tpc suggest CKPT --ranks 2 --hosts 2 --link-gbps B --link-latency-us L --host-mem-gbs 13.5
--concurrency 8 --json (B the tbf rate, L half the measured busy-polled round trip between the
hosts, multi_host.link_latency(); 13.5 GB/s a host since the two namespace hosts share this
machine's one memory bus, 27 GB/s as tpc suggest's default fits it: docs/plans.md), and for decode and for throughput each pair of meshes whose
measured medians differ by more than 10% (|a-b|/min(a,b)): does suggest order them the same
way? --predicted FILE takes the predictions from a JSON file of suggest's shape instead (a
debug aid, said in the output). Scratch files go to $HX_BENCH_DIR/suggest (default
/work/hx-bench/suggest; never under /tmp, which each host has its own of). Last result:
bench/results/suggest-hosts.txt.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import multi_host as mh  # noqa: E402  (the cluster, the hosts, the link's latency)

mh.NAME = "sgh"  # a cluster of its own (namespaces sgh-h0, sgh-h1): multi_host.py's stays
CKPT = mh.CKPT
TPC = mh.TPC
OUT = os.path.join(mh.WORK, "suggest")
MESHES = [("tp 1", 1, 1), ("tp 2", 1, 2), ("pp 2 x tp 1", 2, 1)]  # (suggest's name, pp, tp)
PROMPT_LEN, NEW_TOKENS, REQUESTS, CONCURRENCY, SEED = 32, 128, 16, 8, 0
DECODE_TOKENS = 32
HOST_MEM_GBS = 13.5  # half of this machine's one bus (27 GB/s, tpc suggest's default)
say = mh.say


# ---- the requests: tpc bench's (lib/Driver/Bench.cpp, writeRequests) -----------------------

class MT19937_64:
    """std::mt19937_64, as tpc bench draws its prompt ids."""
    N, M, MASK = 312, 156, (1 << 64) - 1

    def __init__(self, seed):
        self.mt = [seed & self.MASK]
        for i in range(1, self.N):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & self.MASK)
        self.i = self.N

    def __call__(self):
        if self.i >= self.N:
            mt, n, m = self.mt, self.N, self.M
            for k in range(n):
                x = (mt[k] & ~((1 << 31) - 1) & self.MASK) | (mt[(k + 1) % n] & ((1 << 31) - 1))
                mt[k] = mt[(k + m) % n] ^ (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
            self.i = 0
        y = self.mt[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & self.MASK


def write_requests(path, vocab):
    rng = MT19937_64(SEED)
    with open(path, "w") as f:
        for i in range(REQUESTS):
            ids = [rng() % vocab for _ in range(PROMPT_LEN)]
            f.write(json.dumps({"id": i, "prompt_token_ids": ids, "max_tokens": NEW_TOKENS,
                                "ignore_eos": True}, separators=(",", ":")) + "\n")


def tokens_per_second(path):
    """tpc bench's figure (readBenchResults): (output tok/s, None) or (None, why not)."""
    if not os.path.exists(path):
        return None, "no output file"
    tokens, seconds, lines = 0, 0.0, 0
    for line in open(path).read().splitlines():
        try:
            j = json.loads(line)
            done, finished = j["usage"]["completion_tokens"], j["metrics"]["finished_ms"]
        except (ValueError, KeyError, TypeError):
            return None, "a line that is no result: %s" % line[:200]
        if done != NEW_TOKENS:
            return None, "a request ended after %s tokens, not %d" % (done, NEW_TOKENS)
        lines += 1
        tokens += done
        seconds = max(seconds, finished / 1e3)
    if lines != REQUESTS:
        return None, "%d results of %d requests" % (lines, REQUESTS)
    return (tokens / seconds if seconds > 0 else None), None


# ---- the binaries --------------------------------------------------------------------------

def compile_meshes():
    """SmolLM2's model.mlir (tpc import), compiled afresh for each mesh: {mesh: binary}."""
    d = os.path.join(OUT, "models")
    os.makedirs(d, exist_ok=True)
    mlir = os.path.join(d, "smol.mlir")
    mh.run([TPC, "import", os.path.join(CKPT, "config.json"), "-o", mlir])
    binaries = {}
    for mesh, pp, tp in MESHES:
        out = os.path.join(d, "pp%d-tp%d" % (pp, tp))
        shutil.rmtree(out, ignore_errors=True)
        mh.run([TPC, "compile", mlir, "--plan", "auto", "--tp", str(tp),
                *(["--pp", str(pp)] if pp > 1 else []), "-o", out], timeout=900)
        exe = [f for f in os.listdir(out) if not f.endswith(".cpp")]
        assert len(exe) == 1, (out, os.listdir(out))
        binaries[mesh] = os.path.join(out, exe[0])
    return binaries


# ---- one run -------------------------------------------------------------------------------

def launch(binary, ranks, args, logs, limit):
    """binary with args: one rank on host 0 (tpc launch -n 1), or one on each of hosts 0 and
    1 (tpc launch --nnodes 2); each host's exit status (None: killed at `limit` s)."""
    if ranks == 1:
        return mh.finish([mh.on_host(0, [TPC, "launch", "-n", "1", binary, *args], logs[0])],
                         limit)
    port = mh.next_port()
    return mh.finish([mh.on_host(k, [TPC, "launch", "--nnodes", "2", "--node-rank", str(k),
                                     "--master-addr", mh.MASTER, "--master-port", str(port),
                                     "--nproc-per-node", "1", binary, *args], logs[k])
                      for k in range(2)], limit)


def failed(what, codes, logs, why=""):
    say("  FAILED: %s: exit %s%s" % (what, codes, ("; " + why) if why else ""))
    for k, log in enumerate(logs):
        say("  host %d's output (%s):" % (k, log), *mh.tail(log, 12))


def decode_run(mesh, binary, ranks, prompt, tag):
    logs = [os.path.join(OUT, "%s-decode-host%d.txt" % (tag, k)) for k in range(ranks)]
    args = ["--weights", CKPT, "--prompt-ids", prompt, "--max-new-tokens", str(DECODE_TOKENS),
            "--ignore-eos", "--warmup", "--timeout", "60"]
    codes = launch(binary, ranks, args, logs, 300)
    ms = mh.decode_ms(logs[0]) if os.path.exists(logs[0]) else None
    if any(c != 0 for c in codes) or ms is None:
        failed("%s decode (%s)" % (mesh, tag), codes, logs,
               "" if ms is not None else "no decode timing printed")
        return None, None
    return ms, mh.tokens_of(logs[0])


def throughput_run(mesh, binary, ranks, requests, tag):
    logs = [os.path.join(OUT, "%s-c8-host%d.txt" % (tag, k)) for k in range(ranks)]
    out = os.path.join(OUT, "%s-c8.jsonl" % tag)
    if os.path.exists(out):
        os.remove(out)
    args = ["--weights", CKPT, "--requests", requests, "--output", out, "--request-metrics",
            "--max-new-tokens", str(NEW_TOKENS), "--max-num-seqs", str(CONCURRENCY),
            "--max-model-len", str(PROMPT_LEN + NEW_TOKENS), "--timeout", "60"]
    codes = launch(binary, ranks, args, logs, 600)
    tps, why = tokens_per_second(out)
    if any(c != 0 for c in codes) or tps is None:
        failed("%s c8 (%s)" % (mesh, tag), codes, logs, why or "")
        return None
    return tps


# ---- the prediction ------------------------------------------------------------------------

def suggest(gbps, latency, predicted_file):
    """suggest's JSON (or the debug file's), the command, and an error or None."""
    cmd = [TPC, "suggest", CKPT, "--ranks", "2", "--hosts", "2", "--link-gbps", "%g" % gbps,
           "--link-latency-us", "%.1f" % latency, "--host-mem-gbs", str(HOST_MEM_GBS),
           "--concurrency", str(CONCURRENCY), "--json"]
    shown = "$ " + " ".join(["tpc", *cmd[1:]]).replace(CKPT, "CKPT")
    if predicted_file:
        return json.load(open(predicted_file)), shown + "   # NOT RUN: predictions from " \
            "--predicted %s (a debug file, not tpc suggest's)" % predicted_file, None
    try:
        got = mh.run(cmd, timeout=600, check=False)
    except subprocess.TimeoutExpired:
        return None, shown, "timed out after 600 s"
    if got.returncode != 0:
        return None, shown, "exit %d: %s" % (got.returncode, (got.stderr or got.stdout)[-1500:])
    try:
        return json.loads(got.stdout), shown, None
    except ValueError:
        return None, shown, "not JSON: %s" % got.stdout[-800:]


def predicted_of(report, mesh):
    for c in (report or {}).get("candidates", []):
        if c.get("mesh") == mesh and c.get("plan", "auto") == "auto":
            return c
    return None


# ---- the comparison ------------------------------------------------------------------------

BUILDERS = {"ninja", "cc1plus", "cc1", "clang", "clang++", "ld", "ld.lld", "ld.gold", "ccache",
            "make", "cmake"}


def builds():
    """Compilers or ninja running on this machine now (not this script's own tpc compile,
    which runs before any measurement): figures measured beside them mean little."""
    found = set()
    for pid in os.listdir("/proc"):
        try:
            name = open("/proc/%s/comm" % pid).read().strip() if pid.isdigit() else ""
        except OSError:
            continue
        if name in BUILDERS:
            found.add(name)
    return sorted(found)


class Watch:
    """Notes every builder seen while it is open (polled every 0.5 s)."""

    def __enter__(self):
        self.seen, self.stop = set(), threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)
        self.thread.start()
        return self

    def poll(self):
        while not self.stop.wait(0.5):
            self.seen.update(builds())

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join()


def wait_quiet(limit=3600):
    """Until no build has run for 20 s (at most `limit` s); the seconds waited."""
    start, quiet_since = time.time(), time.time()
    while time.time() - start < limit:
        if builds():
            quiet_since = time.time()
        elif time.time() - quiet_since >= 20:
            break
        time.sleep(1)
    return time.time() - start


def quietly(what, run, failed_value, attempts=8):
    """run() where no build runs beside it: waits for quiet first, and runs it again when a
    build ran meanwhile; after `attempts` such runs, failed_value (a figure measured beside a
    build is left out). Says so either way."""
    for attempt in range(attempts):
        if builds():
            say("# %s: a build is running (%s): waited %.0f s for quiet"
                % (what, " ".join(builds()), wait_quiet()))
        with Watch() as w:
            got = run()
        if not w.seen:
            return got
        say("# %s: a build (%s) ran during it: %s" % (
            what, " ".join(sorted(w.seen)), "run again" if attempt < attempts - 1 else
            "FAILED: %d runs, each beside a build; left out" % attempts))
    return failed_value


def median(values):
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def fmt(v, spec):
    return spec % v if v is not None else "-"


def compare(label, measured, predicted, higher_is_better):
    """Each pair whose measured figures differ by more than 10%: (agreeing, disagreeing,
    not compared for a missing measurement)."""
    agree, disagree, missing = 0, 0, 0
    names = [m for m, _, _ in MESHES]
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            a, b = names[i], names[j]
            ma, mb = measured.get(a), measured.get(b)
            if ma is None or mb is None:
                say("  %-28s not compared: a measured figure is missing (failed runs)"
                    % ("%s vs %s" % (a, b)))
                missing += 1
                continue
            gap = abs(ma - mb) / min(ma, mb)
            if gap <= 0.10:
                say("  %-28s measured %s vs %s: within 10%% (%.1f%%), not ranked"
                    % ("%s vs %s" % (a, b), fmt(ma, "%.1f"), fmt(mb, "%.1f"), 100 * gap))
                continue
            better = a if (ma > mb) == higher_is_better else b
            pa, pb = predicted.get(a), predicted.get(b)
            if pa is None or pb is None:
                say("  %-28s measured %s vs %s (%.1f%% apart: %s better); not compared: no "
                    "prediction for both" % ("%s vs %s" % (a, b), fmt(ma, "%.1f"), fmt(mb, "%.1f"),
                                             100 * gap, better))
                missing += 1
                continue
            pbetter = None if pa == pb else a if (pa > pb) == higher_is_better else b
            verdict = "agrees" if pbetter == better else "DISAGREES"
            if verdict == "agrees":
                agree += 1
            else:
                disagree += 1
            say("  %-28s measured %s vs %s (%.1f%% apart: %s better); predicted %s vs %s "
                "(%s better): %s" % (
                    "%s vs %s" % (a, b), fmt(ma, "%.1f"), fmt(mb, "%.1f"), 100 * gap, better,
                    fmt(pa, "%.1f"), fmt(pb, "%.1f"), pbetter or "neither", verdict))
    return agree, disagree, missing


# ---- one link setting ----------------------------------------------------------------------

def setting(rate, runs, binaries, prompt, requests, predicted_file):
    found = re.fullmatch(r"([0-9.]+)(k|m|g)?bit", rate.lower())
    if not found:
        sys.exit("bad rate %r (e.g. 1gbit, 100mbit)" % rate)
    gbps = float(found.group(1)) * {"k": 1e-6, "m": 1e-3, "g": 1.0, None: 1e-9}[found.group(2)]
    decode = {m: [] for m, _, _ in MESHES}
    c8 = {m: [] for m, _, _ in MESHES}
    tokens = {m: [] for m, _, _ in MESHES}
    with mh.cluster(2, rate, ttl=3 * 3600):
        rtt = mh.link_latency()
        lat = rtt["spin"] / 2
        say("", "## 2 hosts, links at %s (B = %g Gbit/s); L = %.1f us (round trip %.1f us "
            "busy-polled, %.1f us blocking)" % (rate, gbps, lat, rtt["spin"], rtt["block"]))
        report, shown, error = suggest(gbps, lat, predicted_file)
        say(shown)
        if error:
            say("# tpc suggest FAILED: %s" % error)
        for r in range(runs):
            for mesh, pp, tp in MESHES:
                tag = "%s-%s-run%d" % (rate, mesh.replace(" ", ""), r)
                ms, toks = quietly("%s decode, round %d" % (mesh, r + 1), lambda: decode_run(
                    mesh, binaries[mesh], pp * tp, prompt, tag), (None, None))
                decode[mesh].append(ms)
                tokens[mesh].append(toks)
                c8[mesh].append(quietly("%s c8, round %d" % (mesh, r + 1), lambda: throughput_run(
                    mesh, binaries[mesh], pp * tp, requests, tag), None))
            say("# round %d of %d done (load average %.2f %.2f %.2f): %s" % (
                r + 1, runs, *os.getloadavg(), "; ".join(
                    "%s %s ms, %s tok/s" % (m, fmt(decode[m][-1], "%.1f"), fmt(c8[m][-1], "%.1f"))
                    for m, _, _ in MESHES)))
        left = mh.left_running()
    ns = [n for n in mh.run(["ip", "netns", "list"]).stdout.split()
          if n.startswith(mh.NAME + "-")]
    say("# cluster down; processes left in it before: %s; its namespaces after (ip netns "
        "list): %s" % (" ".join(left) or "none", " ".join(ns) or "none"))

    ref = next((t for t in tokens["tp 1"] if t), None)
    say("", "%-12s %10s %-22s %10s %11s %-24s %11s %s" % (
        "mesh", "decode ms", "(each run)", "predicted", "c8 tok/s", "(each run)", "predicted",
        "decode tokens"))
    measured_d, measured_t, pred_d, pred_t = {}, {}, {}, {}
    for mesh, _, _ in MESHES:
        p = predicted_of(report, mesh)
        fits = p is not None and p.get("fits", True)
        measured_d[mesh], measured_t[mesh] = median(decode[mesh]), median(c8[mesh])
        pred_d[mesh] = p.get("decode_ms") if fits else None
        pred_t[mesh] = p.get("throughput_tok_s") if fits else None
        same = "same as tp 1" if all(t == ref and t for t in tokens[mesh]) else \
            "DIFFER from tp 1" if ref else "-"
        say("%-12s %10s %-22s %10s %11s %-24s %11s %s" % (
            mesh, fmt(measured_d[mesh], "%.2f"),
            "[%s]" % " ".join(fmt(v, "%.1f") for v in decode[mesh]),
            fmt(pred_d[mesh], "%.2f"), fmt(measured_t[mesh], "%.1f"),
            "[%s]" % " ".join(fmt(v, "%.1f") for v in c8[mesh]), fmt(pred_t[mesh], "%.1f"),
            same))
    if report:
        ranked = sorted((c for c in report.get("candidates", []) if c.get("rank") is not None),
                        key=lambda c: c["rank"])
        say("# suggest's ranking: %s; best: %s (%s)" % (
            ", ".join("%d. %s %s" % (c["rank"], c["mesh"], c.get("plan", "")) for c in ranked),
            (report.get("best") or {}).get("mesh", "-"), (report.get("best") or {}).get("why", "")))
        for c in report.get("candidates", []):
            if c.get("fits") is False:
                say("# suggest: %s does not fit" % c.get("mesh"))
        for c in report.get("not_ranked", []):
            say("# suggest: not ranked: %s %s: %s" % (c.get("mesh"), c.get("plan"),
                                                      c.get("error")))
    say("", "decode (lower is better), pairs whose measured medians differ by more than 10%:")
    da, dd, dm = compare("decode", measured_d, pred_d, False)
    say("throughput at concurrency 8 (higher is better), pairs whose measured medians differ "
        "by more than 10%:")
    ta, td, tm = compare("c8", measured_t, pred_t, True)
    verdict = ("suggest's ranking DOES NOT match" if dd + td else
               "INCOMPLETE: a measurement or a prediction missing" if dm + tm or error else
               "suggest's ranking matches")
    say("%s: decode %d pair(s) apart by >10%%, %d agree, %d disagree; c8 %d pair(s), %d agree, "
        "%d disagree%s: %s%s" % (
            rate, da + dd, da, dd, ta + td, ta, td,
            "; %d pair(s) not compared" % (dm + tm) if dm + tm else "", verdict,
            " (predictions from a debug file)" if predicted_file else ""))
    return verdict


# ---- the run -------------------------------------------------------------------------------

def header(argv):
    commit, built, changed = mh.build_facts()
    say(mh.machine_line(),
        "# Commit %s; tpc: a copy of build/bin/tpc (built %s UTC from the working tree, which "
        "changes %s), taken at the start and used throughout." % (commit, built, changed),
        "# Every run waits until no build (ninja, a compiler, a linker) has run for 20 s on this "
        "machine, and is run again where one ran beside it (said below where it happened).",
        "# Hosts: network namespaces of scripts/netns-cluster.sh (veth pairs to a bridge; "
        "--rate: tbf on both ends), both on this one machine's 2 cores and its one memory bus.",
        "$ python3 bench/suggest_hosts.py %s" % " ".join(argv))


def main():
    global TPC
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3, help="rounds of the three meshes (default 3)")
    p.add_argument("--rates", default="1gbit,100mbit", help="tbf rates, comma-separated")
    p.add_argument("--predicted", help="debug: predictions from this JSON file (suggest's "
                   "shape) instead of running tpc suggest")
    a = p.parse_args()
    if os.path.realpath(OUT).startswith("/tmp"):
        sys.exit("HX_BENCH_DIR must not be under /tmp: each host has its own")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the clusters' finally still runs
    os.makedirs(os.path.join(mh.WORK, "measure"), exist_ok=True)  # link_latency's logs
    os.makedirs(OUT, exist_ok=True)
    if builds():
        say("# a build is running (%s): waited %.0f s for quiet before starting"
            % (" ".join(builds()), wait_quiet()))
    # One tpc for the whole run (import, compile, launch, suggest): a snapshot of build/bin/tpc,
    # so that a rebuild meanwhile changes neither the launcher nor the predictions.
    os.makedirs(os.path.join(OUT, "bin"), exist_ok=True)
    shutil.copy2(mh.TPC, os.path.join(OUT, "bin", "tpc"))
    TPC = os.path.join(OUT, "bin", "tpc")
    header(sys.argv[1:])
    started = time.time()
    binaries = compile_meshes()
    vocab = json.load(open(os.path.join(CKPT, "config.json")))["vocab_size"]
    requests = os.path.join(OUT, "requests.jsonl")
    write_requests(requests, vocab)
    prompt = mh.prompt_ids(PROMPT_LEN)
    say("# model: SmolLM2-135M-Instruct (CKPT = %s), --plan auto, compiled at %s"
        % (CKPT, ", ".join(m for m, _, _ in MESHES)),
        "$ tpc import CKPT/config.json -o smol.mlir; tpc compile smol.mlir --plan auto --tp T "
        "[--pp 2] -o DIR",
        "# tp 1: one rank on host 0; tp 2 and pp 2 x tp 1: one rank on each host:",
        "$ [host 0] tpc launch -n 1 BIN ARGS",
        "$ [host K] tpc launch --nnodes 2 --node-rank K --master-addr %s --master-port P "
        "--nproc-per-node 1 BIN ARGS" % mh.MASTER,
        "# decode: ARGS = --weights CKPT --prompt-ids <the first %d tokens of %r...> "
        "--max-new-tokens %d --ignore-eos --warmup --timeout 60; rank 0's median step"
        % (PROMPT_LEN, mh.TEXT[:30], DECODE_TOKENS),
        "# c8: ARGS = --weights CKPT --requests requests.jsonl --output OUT.jsonl "
        "--request-metrics --max-new-tokens %d --max-num-seqs %d --max-model-len %d --timeout 60;"
        " %d requests of %d random ids (tpc bench --seed %d's) and %d new tokens, ignore_eos; "
        "output tok/s = the output tokens / the last finished_ms (tpc bench's figure)"
        % (NEW_TOKENS, CONCURRENCY, PROMPT_LEN + NEW_TOKENS, REQUESTS, PROMPT_LEN, SEED,
           NEW_TOKENS),
        "# Each figure: the median of %d runs, every run's in brackets, the meshes' runs "
        "interleaved (tp 1, tp 2, pp 2, then again); a failed run is reported with its log "
        "and left out of the median." % a.runs,
        "# Predicted: tpc suggest's candidates' decode_ms and throughput_tok_s; --host-mem-gbs "
        "%g because the two namespace hosts share this machine's one memory bus (27 GB/s, "
        "suggest's default, fitted to tpc's decode steps: docs/plans.md), so a lone rank "
        "reads faster than its host's share says." % HOST_MEM_GBS,
        "# A pair of meshes is ranked where the measured medians differ by more than 10% "
        "(|a-b|/min(a,b)); suggest agrees where its figures order the pair the same way.")
    results = {}
    for rate in a.rates.split(","):
        results[rate] = setting(rate, a.runs, binaries, prompt, requests, a.predicted)
    say("", "# total %.0f s; load average at the end %.2f %.2f %.2f"
        % (time.time() - started, *os.getloadavg()),
        "# " + "; ".join("%s: %s" % (r, v) for r, v in results.items()))


if __name__ == "__main__":
    main()

"""Runs a compiled model across hosts of a network-namespace cluster (scripts/netns-cluster.sh)
and says what came of it, for multi-host.test.

python3 hosts_check.py SCRIPT TPC_BIN OUT SCENARIO...

SCRIPT is netns-cluster.sh, TPC_BIN the directory holding tpc, OUT a directory (not under
/tmp: every host has its own /tmp) holding llama2/ and llama4/ (the example model compiled for
tp 2 and 4) and ref2.bin/ref4.bin (their logits run on one host). Each scenario prints a few
lines for FileCheck:

  launch   2 hosts x 1 rank, then 2 hosts x 2 ranks, through tpc launch: the logits against
           the one-host run's, and the paths the trace shows
  torchrun 2 hosts x 1 rank through torchrun --nnodes 2
  mpirun   2 hosts x 1 rank and 2 hosts x 2 ranks through mpirun --host, from host 0, its
           launch agent entering host 1
  nostart  host 1 never starts: host 0 names the ranks that never joined
  kill     rank 1 (host 1) is killed at decode step 3
  stall    rank 1 stops itself (SIGSTOP) at step 3 and stays stopped
  cut      rank 1 stops itself at step 3, host 1's link is cut, and it goes on
  dup      both hosts say they are node 0 (tp 4, 2 ranks a host): two ranks claim one id
  world    host 1 runs ranks 2 and 3 of a world of 4 against host 0's world of 2

Each fault runs with --timeout 3; it prints each host's exit status, whether it ended within
--timeout + 10 s, the line that names the lost peer, and whether anything is left running in
the cluster. The cluster is made once (with a time to live, in case this script dies) and
removed at the end whatever happened.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

script, tpc_bin, out = sys.argv[1], sys.argv[2], sys.argv[3]
scenarios = sys.argv[4:]
tpc = os.path.join(tpc_bin, "tpc")
name = "tpc%d" % (os.getpid() % 100000)
MASTER = "10.232.0.1"
TIMEOUT = 3
PROMPT = ["--random-weights", "6", "--prompt-ids", "9,8,7,6", "--max-new-tokens", "6"]


def cluster(*args, check=True):
    return subprocess.run([script, *args, "--name", name], check=check, capture_output=True,
                          text=True, timeout=60)


def on_host(k, cmd, log, env=None):
    """Starts `cmd` on host k, its output into `log`."""
    return subprocess.Popen([script, "exec", str(k), "--name", name, "--", *cmd],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})}, start_new_session=True)


def finish(procs, limit):
    """Each process's exit status, None for one still running after `limit` seconds."""
    end = time.time() + limit
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, end - time.time())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    return codes


def launch(k, nnodes, per_node, binary, extra, log, env=None, port=29500, node=None):
    cmd = [tpc, "launch", "--nnodes", str(nnodes), "--node-rank", str(k if node is None else node), "--master-addr",
           MASTER, "--master-port", str(port), "--nproc-per-node", str(per_node), binary,
           *extra]
    return on_host(k, cmd, log, env)


def compare(reference, got):
    """The largest difference of the logits, and whether the tokens match."""
    a = open(reference, "rb").read()
    b = open(got, "rb").read() if os.path.exists(got) else b""
    if len(a) != len(b) or not a:
        return "no logits (%d bytes against %d)" % (len(b), len(a))
    import struct
    x = struct.unpack("%df" % (len(a) // 4), a)
    y = struct.unpack("%df" % (len(b) // 4), b)
    worst = max(abs(p - q) for p, q in zip(x, y))
    return "within 1e-5" if worst <= 1e-5 else "differ by %g" % worst


def tokens_of(log):
    found = re.search(r"tokens:([ 0-9]*)", open(log).read())
    return found.group(1).split() if found else None


def paths(trace):
    return sorted({c["path"] for c in json.load(open(trace))["collectives"]})


def left():
    return "nothing left" if not cluster("pids").stdout.strip() else "processes left"


def same(tp, per_node, how):
    binary = os.path.join(out, "llama%d" % tp, "llama")
    logs, procs = [], []
    for k in range(2):
        log = os.path.join(out, "%s%d-host%d.txt" % (how, tp, k))
        extra = PROMPT + ["--dump-logits", os.path.join(out, "%s%d.bin" % (how, tp)),
                          "--trace", os.path.join(out, "%s%d.json" % (how, tp)),
                          "--timeout", "20"]
        if how == "torchrun":
            torchrun = os.environ["TORCHRUN"]
            cmd = [torchrun, "--nnodes", "2", "--node-rank", str(k), "--master-addr", MASTER,
                   "--master-port", "29400", "--nproc-per-node", str(per_node),
                   "--no-python", binary, *extra]
            procs.append(on_host(k, cmd, log))
        else:
            procs.append(launch(k, 2, per_node, binary, extra, log))
        logs.append(log)
    codes = finish(procs, 90)
    ref = os.path.join(out, "ref%d.bin" % tp)
    same_tokens = tokens_of(logs[0]) == tokens_of(ref[:-4] + ".txt")
    print("%s: tp %d as 2 hosts x %d: exit %s; logits %s of one host's; tokens %s; paths %s" % (
        how, tp, per_node, codes, compare(ref, os.path.join(out, "%s%d.bin" % (how, tp))),
        "the same" if same_tokens else "differ",
        " ".join(paths(os.path.join(out, "%s%d.json.rank0" % (how, tp))))))
    if codes != [0, 0]:
        for log in logs:
            sys.stdout.write(open(log).read())


def mpirun(tp, per_node):
    """mpirun on host 0 starts host 1's ranks through a launch agent that enters host 1. Open
    MPI tells its nodes apart by hostname, which network namespaces share: each host's
    processes get a hostname of their own (a UTS namespace)."""
    agent = os.path.join(out, "mpi-agent.sh")
    with open(agent, "w") as f:
        f.write('#!/bin/sh\n# mpirun\'s launch agent: "agent HOST CMD..." runs CMD on that host.\n'
                'host=$1; shift\nk=$(( ${host##*.} - 1 ))\n'
                'exec %s exec $k --name %s -- unshare --uts sh -c "hostname %s-h$k; $*"\n'
                % (script, name, name))
    os.chmod(agent, 0o755)
    how = "mpirun%d" % tp
    log = os.path.join(out, how + ".txt")
    subnet = "10.232.0.0/24"
    cmd = ["unshare", "--uts", "sh", "-c", 'hostname %s-h0; exec "$@"' % name, "sh",
           "mpirun", "--allow-run-as-root", "-n", str(2 * per_node), "--host",
           "10.232.0.1:%d,10.232.0.2:%d" % (per_node, per_node), "--mca", "plm_rsh_agent",
           agent, "--mca", "oob_tcp_if_include", subnet, "--mca", "btl_tcp_if_include", subnet,
           "--mca", "btl", "self,vader,tcp", os.path.join(out, "llama%d" % tp, "llama"), *PROMPT,
           "--dump-logits", os.path.join(out, how + ".bin"),
           "--trace", os.path.join(out, how + ".json"), "--timeout", "20"]
    code = finish([on_host(0, cmd, log)], 90)
    ref = os.path.join(out, "ref%d.bin" % tp)
    same_tokens = tokens_of(log) == tokens_of(ref[:-4] + ".txt")
    print("mpirun: tp %d as 2 hosts x %d: exit %s; logits %s of one host's; tokens %s; "
          "paths %s" % (tp, per_node, code, compare(ref, os.path.join(out, how + ".bin")),
                        "the same" if same_tokens else "differ",
                        " ".join(paths(os.path.join(out, how + ".json.rank0")))))
    if code != [0]:
        sys.stdout.write(open(log).read())


def named(log):
    """The lines of `log` that name a lost peer, or say what the rendezvous lacked."""
    text = open(log).read()
    lines = []
    for line in text.splitlines():
        if ("error: rank" in line or "tpc launch: rank" in line) and (
                "lost" in line or "never joined" in line or "stopped" in line or
                "refused" in line or "claim" in line or "cannot serve" in line or
                "killed" in line):
            lines.append(re.sub(r"\[rank \d+\] ", "", line).strip())
    return lines or ["(nothing named) " + text[-600:]]


def fault(kind):
    binary = os.path.join(out, "llama2", "llama")
    extra = PROMPT[:-1] + ["40", "--timeout", str(TIMEOUT)]
    logs = [os.path.join(out, "%s-host%d.txt" % (kind, k)) for k in range(2)]
    start = time.time()
    port = 29500 + len(kind)
    env1 = {}
    if kind == "kill":
        env1 = {"TPC_FAULT": "kill:rank=1:step=3"}
    elif kind in ("stall", "cut"):
        env1 = {"TPC_FAULT": "stop:rank=1:step=3"}
    if kind == "dup":  # both hosts say they are node 0
        binary = os.path.join(out, "llama4", "llama")
        procs = [launch(k, 2, 2, binary, extra, logs[k], port=port, node=0) for k in range(2)]
    elif kind == "world":  # host 1 runs the tp 4 binary, as ranks 2 and 3 of 4
        procs = [launch(0, 2, 1, binary, extra, logs[0], port=port),
                 launch(1, 2, 2, os.path.join(out, "llama4", "llama"), extra, logs[1],
                        port=port)]
    else:
        procs = [launch(0, 2, 1, binary, extra, logs[0], port=port)]
    if kind not in ("nostart", "dup", "world"):
        procs.append(launch(1, 2, 1, binary, extra, logs[1], env1, port=port))
    if kind == "cut":
        # Once rank 1 has stopped itself, its link goes down, and then it goes on.
        for _ in range(200):
            if "stops itself" in open(logs[1]).read():
                break
            time.sleep(0.05)
        time.sleep(0.2)
        cluster("cut", "1")
        cluster("cont", "1")
    codes = finish(procs[:1], TIMEOUT + 10)
    elapsed = time.time() - start
    if kind == "stall":
        cluster("cont", "1")  # the stalled rank wakes to a peer gone, and ends too
    codes += finish(procs[1:], TIMEOUT + 10)
    if kind == "cut":
        cluster("heal", "1")
    print("%s: exit %s, host 0 within --timeout + 10 s: %s" % (
        kind, codes, elapsed < TIMEOUT + 10))
    for k, log in enumerate(logs[:len(procs)]):
        for line in named(log):
            print("%s: host %d: %s" % (kind, k, line))
    time.sleep(0.5)
    print("%s: %s" % (kind, left()))


try:
    cluster("up", "2", "--ttl", "300")
    for scenario in scenarios:
        if scenario == "launch":
            same(2, 1, "launch")
            same(4, 2, "launch")
        elif scenario == "torchrun":
            same(2, 1, "torchrun")
        elif scenario == "mpirun":
            mpirun(2, 1)
            mpirun(4, 2)
        else:
            fault(scenario)
        sys.stdout.flush()
finally:
    cluster("down", check=False)
    print("cluster removed: %s" % (name + "-h0" not in subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True).stdout))

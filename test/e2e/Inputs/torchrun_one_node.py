"""Runs the ranks of BINARY the way torchrun starts them on one node under its agent store
(MASTER_ADDR, MASTER_PORT held by the agent, TORCHELASTIC_USE_AGENT_STORE=True,
LOCAL_WORLD_SIZE = WORLD_SIZE) while another program listens on MASTER_PORT + 1, the port tpc's
store took before; prints each rank's exit status and output.

usage: torchrun_one_node.py BINARY RUN_ID WORLD[:STARTED] ARGS...  (STARTED ranks of WORLD, all
by default)
"""
import os
import socket
import subprocess
import sys

binary, run_id, args = sys.argv[1], sys.argv[2], sys.argv[4:]
world, _, started = sys.argv[3].partition(":")
world, started = int(world), int(started or world)

# The agent's port, and its neighbour held by someone else: two listeners on adjacent ports.
while True:
    agent = socket.socket()
    agent.bind(("127.0.0.1", 0))
    agent.listen()
    port = agent.getsockname()[1]
    other = socket.socket()
    try:
        other.bind(("127.0.0.1", port + 1))
        other.listen()
        break
    except OSError:
        agent.close()
        other.close()

env = {k: v for k, v in os.environ.items() if k != "TPC_RENDEZVOUS_DIR"}
env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_USE_AGENT_STORE="True",
           TORCHELASTIC_RUN_ID=run_id, WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
ranks = [subprocess.Popen([binary, *args], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
         for r in range(started)]
for r, p in enumerate(ranks):
    out, _ = p.communicate(timeout=120)
    print(f"rank {r} exit {p.returncode}")
    print(out.replace(str(port), "MASTER_PORT"), end="")

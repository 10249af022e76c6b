#!/bin/sh
# A multi-node, torchrun-style job:
#
#   rota submit --nodes 2 --gpus-per-node 8 -- examples/torchrun.sh [train.py ARGS...]
#
# rota starts this script once per node (one rank per node) and sets the torchrun variables
# MASTER_ADDR, MASTER_PORT, NNODES, NODE_RANK, NPROC_PER_NODE and WORLD_SIZE (see
# `rota help job`); where one is missing (a one-node job, a run by hand) it is worked out
# here from ROTA_NODELIST, ROTA_JOB_ID and CUDA_VISIBLE_DEVICES, as below.
#
# With PyTorch installed and a training script given, it runs `torchrun` on it. Otherwise it
# starts NPROC_PER_NODE workers on this node, one per GPU, each with torchrun's RANK,
# LOCAL_RANK and WORLD_SIZE, and they run STEPS (default 5) steps of a fake all-reduce over
# TCP through MASTER_ADDR:MASTER_PORT: every worker adds its number, every worker gets the
# sum. Python 3 does that; without it each worker only prints what it would do.

# The node's GPUs, one worker each: CUDA_VISIBLE_DEVICES is "0,1,2" or empty.
gpus=${CUDA_VISIBLE_DEVICES:-}
ngpus=$(printf '%s' "$gpus" | tr ',' '\n' | grep -c .)
[ "$ngpus" -gt 0 ] || ngpus=1

MASTER_ADDR=${MASTER_ADDR:-$(printf '%s' "${ROTA_NODELIST:-127.0.0.1}" | cut -d, -f1)}
MASTER_PORT=${MASTER_PORT:-$((29500 + ${ROTA_JOB_ID:-0} % 1000))}
NNODES=${NNODES:-$(printf '%s' "${ROTA_NODELIST:-x}" | tr ',' '\n' | grep -c .)}
NODE_RANK=${NODE_RANK:-0}
NPROC_PER_NODE=${NPROC_PER_NODE:-$ngpus}
WORLD_SIZE=${WORLD_SIZE:-$((NNODES * NPROC_PER_NODE))}
export MASTER_ADDR MASTER_PORT NNODES NODE_RANK NPROC_PER_NODE WORLD_SIZE
echo "node $NODE_RANK of $NNODES (${ROTA_NODELIST:-this machine}): $NPROC_PER_NODE workers on GPUs ${gpus:-none}, world size $WORLD_SIZE, master $MASTER_ADDR:$MASTER_PORT"

if [ $# -gt 0 ] && command -v torchrun >/dev/null 2>&1 && python3 -c 'import torch' 2>/dev/null; then
  exec torchrun --nnodes "$NNODES" --node_rank "$NODE_RANK" --nproc_per_node "$NPROC_PER_NODE" \
    --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" "$@"
fi

# The fake all-reduce: rank 0 listens on MASTER_PORT, the others connect to it; each step
# every worker sends rank+1 times the step, rank 0 adds them up and sends the sum to all.
allreduce='
import os, socket, sys, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
steps = int(os.environ.get("STEPS", "5"))
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
def lines(sock):
    buf = b""
    while True:
        while b"\n" not in buf:
            chunk = sock.recv(4096)
            if not chunk:
                sys.exit("rank %d: connection to rank 0 closed" % rank)
            buf += chunk
        line, buf = buf.split(b"\n", 1)
        yield int(line)
if rank == 0:
    server = socket.create_server(("", port), reuse_port=False)
    server.settimeout(120)
    peers = []
    while len(peers) < world - 1:
        conn, _ = server.accept()
        conn.settimeout(120)
        peers.append((conn, lines(conn)))
else:
    deadline = time.time() + 120
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=120)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    got = lines(conn)
for step in range(1, steps + 1):
    mine = (rank + 1) * step
    if rank == 0:
        total = mine + sum(next(it) for _, it in peers)
        for conn, _ in peers:
            conn.sendall(b"%d\n" % total)
    else:
        conn.sendall(b"%d\n" % mine)
        total = next(got)
    print("rank %d/%d (local %s): step %d/%d, all-reduce sum %d" % (rank, world, os.environ["LOCAL_RANK"], step, steps, total), flush=True)
    time.sleep(0.2)
'

pids=""
trap 'kill $pids 2>/dev/null; exit 143' TERM INT
local_rank=0
while [ "$local_rank" -lt "$NPROC_PER_NODE" ]; do
  RANK=$((NODE_RANK * NPROC_PER_NODE + local_rank)) LOCAL_RANK=$local_rank
  export RANK LOCAL_RANK
  if command -v python3 >/dev/null 2>&1; then
    python3 -c "$allreduce" &
  else
    echo "rank $RANK/$WORLD_SIZE (local $LOCAL_RANK): no python3, so no all-reduce" &
  fi
  pids="$pids $!"
  local_rank=$((local_rank + 1))
done
status=0
for pid in $pids; do
  wait "$pid" || status=1
done
[ "$status" -eq 0 ] && echo "node $NODE_RANK: all workers done"
exit "$status"

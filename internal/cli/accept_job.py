# The job `rota accept` runs on every node of a stage (see docs/acceptance.md).
#
# It starts one worker per GPU in CUDA_VISIBLE_DEVICES (one when there is none). Each worker
# runs ACCEPT_STEPS steps of a matrix multiply, with an all-reduce among every worker
# of the job after each step when ACCEPT_COMM is 1; then writes and reads back a file
# of ACCEPT_MB MB, and writes a checkpoint of that size to ROTA_CHECKPOINT_DIR. It
# prints one line per worker:
#
#   ROTA_ACCEPT {"stage": 3, "rank": 5, "gpu": "1", "backend": "numpy", "step_ms": ...}
#
# The backend is PyTorch on the GPU where torch imports and sees CUDA, else numpy, else
# pure Python. The all-reduce is NCCL through torch.distributed on the torch backend, else
# a TCP all-reduce through MASTER_ADDR:MASTER_PORT: rank 0 adds every worker's vector and
# sends the sum back. Only Python 3's standard library is needed.
import array, json, os, socket, struct, sys, tempfile, time

STAGE = int(os.environ.get("ACCEPT_STAGE", "0"))
STEPS = max(1, int(os.environ.get("ACCEPT_STEPS", "5")))
MB = max(1, int(os.environ.get("ACCEPT_MB", "16")))
COMM = os.environ.get("ACCEPT_COMM") == "1"
gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
nproc = max(1, len(gpus))
nnodes = int(os.environ.get("NNODES", "1"))
node_rank = int(os.environ.get("NODE_RANK", "0"))
world = nnodes * nproc
master = os.environ.get("MASTER_ADDR") or "127.0.0.1"
port = int(os.environ.get("MASTER_PORT") or 29500 + int(os.environ.get("ROTA_JOB_ID", "0")) % 1000)

backend = "python"
torch = np = None


def pick_backend():
    """Sets backend, torch and np. Called in each worker, after the fork: CUDA does not
    survive a fork, so the parent never touches it."""
    global backend, torch, np
    try:
        import torch as t
        if t.cuda.is_available():
            torch, backend = t, "torch"
            return
    except Exception:
        pass
    # One BLAS thread per worker: the workers already use every GPU's share of the CPUs.
    for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(v, "1")
    try:
        import numpy
        np, backend = numpy, "numpy"
    except Exception:
        pass


VEC = 1 << 14  # doubles each worker contributes to the TCP all-reduce


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def matmul_step():
    """One step of the burn: returns a function doing one matrix multiply."""
    if backend == "torch":
        n = 4096
        a = torch.randn(n, n, device="cuda")
        b = torch.randn(n, n, device="cuda")
        def step():
            (a @ b).sum().item()
        return step
    if backend == "numpy":
        n = 256
        a = np.random.rand(n, n)
        b = np.random.rand(n, n)
        return lambda: float((a @ b).sum())
    n = 40
    a = [[(i * n + j) % 7 / 7.0 for j in range(n)] for i in range(n)]
    bt = [list(col) for col in zip(*a)]
    def step():
        return sum(sum(x * y for x, y in zip(row, col)) for row in a for col in bt)
    return step


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(1 << 20, n - len(buf)))
        if not chunk:
            raise SystemExit("all-reduce: a peer closed its connection")
        buf += chunk
    return bytes(buf)


def add(x, y):
    if np is not None:
        return (np.frombuffer(x, dtype="<f8") + np.frombuffer(y, dtype="<f8")).tobytes()
    a, b = array.array("d", x), array.array("d", y)
    return array.array("d", [p + q for p, q in zip(a, b)]).tobytes()


class TCPAllReduce:
    def __init__(self, rank):
        self.rank = rank
        deadline = time.time() + 120
        if rank == 0:
            srv = socket.create_server(("", port))
            srv.settimeout(120)
            self.peers = []
            while len(self.peers) < world - 1:
                conn, _ = srv.accept()
                conn.settimeout(120)
                self.peers.append(conn)
            srv.close()
        else:
            while True:
                try:
                    self.conn = socket.create_connection((master, port), timeout=120)
                    break
                except OSError:
                    if time.time() > deadline:
                        raise
                    time.sleep(0.05)

    def __call__(self, data):
        size = len(data)
        if self.rank == 0:
            total = data
            for p in self.peers:
                total = add(total, recv_exact(p, size))
            for p in self.peers:
                p.sendall(total)
            return total
        self.conn.sendall(data)
        return recv_exact(self.conn, size)


def worker(local):
    rank = node_rank * nproc + local
    gpu = gpus[local] if gpus else ""
    pick_backend()
    if backend == "torch":
        torch.cuda.set_device(local)
    step = matmul_step()
    reduce = None
    if COMM and world > 1:
        if backend == "torch":
            import torch.distributed as dist
            dist.init_process_group("nccl", init_method="tcp://%s:%d" % (master, port), rank=rank, world_size=world)
            t = torch.full((VEC,), float(rank + 1), device="cuda")
            def reduce(_):
                dist.all_reduce(t)
                torch.cuda.synchronize()
                v = t[0].item()
                t.fill_(float(rank + 1))
                return struct.pack("<d", v)
        else:
            reduce = TCPAllReduce(rank)
    mine = array.array("d", [float(rank + 1)] * VEC).tobytes()
    want = world * (world + 1) / 2
    steps, comms = [], []
    for _ in range(STEPS):
        t0 = time.perf_counter()
        step()
        steps.append((time.perf_counter() - t0) * 1000)
        if reduce is not None:
            t0 = time.perf_counter()
            got = struct.unpack_from("<d", reduce(mine))[0]
            comms.append((time.perf_counter() - t0) * 1000)
            if got != want:
                raise SystemExit("all-reduce: rank %d got %g, want %g" % (rank, got, want))
    block = os.urandom(1 << 20)
    fd, path = tempfile.mkstemp(prefix="rota-accept-")
    try:
        with os.fdopen(fd, "wb") as f:
            for _ in range(MB):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            n = 0
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                n += len(b)
        read_s = max(time.perf_counter() - t0, 1e-9)
    finally:
        os.unlink(path)
    ckdir = os.environ.get("ROTA_CHECKPOINT_DIR") or tempfile.gettempdir()
    ckpt = os.path.join(ckdir, "rota-accept-rank%d.ckpt" % rank)
    t0 = time.perf_counter()
    with open(ckpt, "wb") as f:
        for _ in range(MB):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    ckpt_ms = (time.perf_counter() - t0) * 1000
    os.unlink(ckpt)
    out = {"stage": STAGE, "rank": rank, "gpu": gpu, "backend": backend,
           "step_ms": round(median(steps), 3), "read_mb_s": round(n / (1 << 20) / read_s, 1),
           "ckpt_ms": round(ckpt_ms, 3)}
    if comms:
        out["comm_ms"] = round(median(comms), 3)
    sys.stdout.write("ROTA_ACCEPT " + json.dumps(out, sort_keys=True) + "\n")
    sys.stdout.flush()


pids = []
for local in range(nproc):
    if nproc == 1:
        worker(0)
        sys.exit(0)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            worker(local)
        except SystemExit as e:
            print("rank %d: %s" % (node_rank * nproc + local, e), file=sys.stderr)
            code = 1
        except BaseException as e:
            print("rank %d: %r" % (node_rank * nproc + local, e), file=sys.stderr)
            code = 1
        sys.stdout.flush()
        os._exit(code)
    pids.append(pid)
status = 0
for pid in pids:
    _, st = os.waitpid(pid, 0)
    if st != 0:
        status = 1
sys.exit(status)

#!/usr/bin/env bash
# gpu-smoke.sh: check rota against a real NVIDIA GPU.
#
# On a machine with an NVIDIA driver it starts `rota up` in a throwaway data directory,
# prints the inventory the agent discovered through NVML (models, memory, PCI bus ids, NUMA
# nodes, NVLink peers, MIG mode, driver and CUDA versions), runs one small CUDA job through
# rota on one GPU, and prints the telemetry rota recorded for it (utilisation and memory:
# mean, p95, last) and the GPU history of the node.
#
# The CUDA job is PyTorch (a matrix-multiply loop) where python3 can import torch, else a
# PTX kernel launched through the CUDA driver API from python3's ctypes (needs only the
# driver's libcuda.so.1), else a CUDA sample binary named by $CUDA_JOB.
#
# Usage:
#   scripts/gpu-smoke.sh                 # builds rota with go, or uses $ROTA (a built binary)
#   ROTA=/tmp/rota JOB_SECONDS=60 scripts/gpu-smoke.sh
#   CUDA_JOB='/usr/local/cuda/extras/demo_suite/bandwidthTest' scripts/gpu-smoke.sh
#
# It never changes the GPU's settings (no MIG, clock or persistence changes) and stops
# everything it started when it exits.
set -euo pipefail
cd "$(dirname "$0")/.."

JOB_SECONDS=${JOB_SECONDS:-40}
work=$(mktemp -d /tmp/rota-gpu-smoke.XXXXXX)
export ROTA_DATA_DIR="$work/data"
log="$work/rota-up.log"

if [ -z "${ROTA:-}" ]; then
  ROTA="$work/rota"
  echo "== building rota"
  CGO_CFLAGS="-Wno-deprecated-declarations" go build -o "$ROTA" ./cmd/rota
fi

up_pid=""
cleanup() {
  if [ -n "$up_pid" ]; then
    kill -TERM "$up_pid" 2>/dev/null || true
    wait "$up_pid" 2>/dev/null || true
  fi
  echo "== logs and data kept in $work"
}
trap cleanup EXIT

echo "== nvidia-smi (for comparison)"
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,mig.mode.current,driver_version --format=csv || echo "(nvidia-smi not available)"
nvidia-smi topo -m 2>/dev/null || true
if nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader 2>/dev/null | grep -qi enabled; then
  # Read only: rota never changes MIG mode or instances, and neither does this script.
  echo "== MIG is enabled: MIG devices as nvidia-smi lists them (rota should report each as a device)"
  nvidia-smi -L || true
fi

echo "== starting rota up (log: $log)"
"$ROTA" up --data-dir "$ROTA_DATA_DIR" --listen 127.0.0.1:${PORT:-17070} --telemetry-interval 1s >"$log" 2>&1 &
up_pid=$!

for _ in $(seq 1 60); do
  if "$ROTA" nodes -o json 2>/dev/null | grep -q '"state": *"READY"'; then break; fi
  if ! kill -0 "$up_pid" 2>/dev/null; then echo "rota up exited:"; cat "$log"; exit 1; fi
  sleep 1
done
grep -i -m3 'nvml\|gpu' "$log" || true

echo "== inventory as rota sees it"
"$ROTA" nodes
node=$("$ROTA" nodes -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0]["name"])' 2>/dev/null || hostname)
"$ROTA" nodes "$node" || true
"$ROTA" nodes -o json | python3 -c '
import json, sys
n = json.load(sys.stdin)["nodes"][0]
print("device_source:", n.get("device_source"), " driver:", n.get("driver_version"), " cuda:", n.get("cuda_version"),
      " container runtime:", n.get("container_runtime") or "-", " limits:", n.get("limits") or "-")
for g in n.get("gpus") or []:
    print("  GPU %d %s %d MB bus=%s numa=%s nvlink=%s mig=%s healthy=%s" % (
        g["index"], g["model"], g["memory_mb"], g.get("pci_bus_id"), g.get("numa_node"),
        g.get("nvlink_peers"), g.get("mig_mode") or "-", g["healthy"]))
    if g.get("mig_parent") is not None:
        print("    MIG device of GPU %d, profile %s, uuid %s" % (g["mig_parent"], g.get("mig_profile"), g["uuid"]))
' || true

echo "== the CUDA job"
job_script="$work/cuda-job.sh"
cat >"$job_script" <<EOF
#!/usr/bin/env bash
set -e
echo "CUDA_VISIBLE_DEVICES=\$CUDA_VISIBLE_DEVICES"
if [ -n "${CUDA_JOB:-}" ]; then exec ${CUDA_JOB:-true}; fi
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  exec python3 - <<'PY'
import time, torch
x = torch.randn(8192, 8192, device="cuda")
end = time.time() + $JOB_SECONDS
n = 0
while time.time() < end:
    y = x @ x
    torch.cuda.synchronize()
    n += 1
print("torch matmuls:", n, "on", torch.cuda.get_device_name(0))
PY
fi
exec python3 "$PWD/scripts/cuda_spin.py" $JOB_SECONDS
EOF
chmod +x "$job_script"
out=$("$ROTA" submit --gpus 1 --time 10m --name gpu-smoke -- "$job_script")
echo "$out"
id=$(echo "$out" | tail -1)

for _ in $(seq 1 $((JOB_SECONDS + 120))); do
  state=$("$ROTA" show "$id" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  case "$state" in SUCCEEDED|FAILED|CANCELLED|TIMEOUT) break ;; esac
  sleep 1
done
echo "== job $id ended $state"
"$ROTA" logs "$id" || true
"$ROTA" show "$id"
echo "== telemetry rota recorded for job $id"
"$ROTA" show "$id" -o json | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(json.dumps(j.get("usage"), indent=2))
for a in j.get("attempt_list") or []:
    for p in a.get("placements") or []:
        print("rank on", p["node"], "GPUs", p.get("gpu_ids"), "usage", json.dumps(p.get("usage")))
'
echo "== the node now"
"$ROTA" nodes
[ "$state" = SUCCEEDED ]

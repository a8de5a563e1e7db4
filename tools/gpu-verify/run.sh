#!/usr/bin/env bash
# The device plugin on a real GPU host, by hand (see docs/operator.md,
# "Install the device plugin on GPU clients"): real NVML fingerprint,
# stats and Reserve; per-process accounting of a real CUDA workload with
# its Nomad owner; MPS memory limits enforced on a share. Needs
# bin/gpu-check (go build -o bin/gpu-check ./device/cmd/gpu-check) and
# the NVIDIA driver; OUT is where the logs go.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
check=${GPU_CHECK:-bin/gpu-check}
OUT=${OUT:-/tmp/gpu-verify}
mkdir -p "$OUT"
step() { echo; echo "######## $*"; }

step "driver and GPUs"
nvidia-smi --query-gpu=name,uuid,memory.total,mig.mode.current,compute_mode,driver_version --format=csv
python3 -c 'import sys; print("python", sys.version.split()[0])'
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())' 2>&1 | tail -1

step "1. fingerprint, stats and a Reserve of 25 shares on real NVML"
timeout 60 "$check" -shares 25 -env-file "$OUT/env-none.txt"
echo "rc=$?"

step "2. per-process accounting: a 3000 MiB CUDA process owned by a (pretend) Nomad allocation"
(set -a; . "$OUT/env-none.txt"; set +a
 NOMAD_ALLOC_ID=0b7c2f0e-1111-2222-3333-444455556666 NOMAD_TASK_NAME=train \
   timeout 60 python3 "$here/cuda_alloc.py" 3000 12) > "$OUT/load-none.txt" 2>&1 &
load=$!
for _ in $(seq 50); do grep -q allocated "$OUT/load-none.txt" && break; sleep 0.2; done
cat "$OUT/load-none.txt"
timeout 60 "$check" -shares 5 -watch 4s | sed -n '/== processes/,$p'
wait $load; cat "$OUT/load-none.txt"

step "3. MPS: a 10-share reservation's memory limit enforced by CUDA"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps CUDA_MPS_LOG_DIRECTORY=/tmp/nvidia-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d; echo "mps daemon rc=$?"
timeout 60 "$check" -shares 10 -mps-pipe-dir /tmp/nvidia-mps -env-file "$OUT/env-mps.txt" | sed -n '/== reserve/,$p'
(set -a; . "$OUT/env-mps.txt"; set +a
 NOMAD_ALLOC_ID=0b7c2f0e-aaaa-bbbb-cccc-444455556666 NOMAD_TASK_NAME=infer \
   timeout 90 python3 "$here/cuda_alloc.py" 200000 8) > "$OUT/load-mps.txt" 2>&1 &
load=$!
for _ in $(seq 150); do grep -q -e allocated -e Error "$OUT/load-mps.txt" && break; sleep 0.2; done
cat "$OUT/load-mps.txt"
timeout 60 "$check" -shares 5 -watch 3s | sed -n '/== processes/,$p'
wait $load; cat "$OUT/load-mps.txt"

step "3a. a PyTorch program under the same reservation (if torch is installed)"
(set -a; . "$OUT/env-mps.txt"; set +a
 timeout 120 python3 - <<'PY'
import torch
free, total = torch.cuda.mem_get_info()
print("torch sees", torch.cuda.get_device_name(0), "free %d MiB of %d MiB" % (free >> 20, total >> 20))
blocks = []
try:
    while True:
        blocks.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    pass
print("torch allocated %d MiB before CUDA refused" % (len(blocks) * 256))
PY
) 2>&1 | grep -v Warning

step "3b. the same limit given by ordinal instead of UUID"
(set -a; . "$OUT/env-mps.txt"; set +a
 export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=${GPUSHARE_MEMORY_LIMIT_MIB}M"
 timeout 90 python3 "$here/cuda_alloc.py" 200000 1) 2>&1
echo quit | nvidia-cuda-mps-control

step "4. how soon NVML stops showing a SIGKILLed process's memory"
unset CUDA_MPS_PIPE_DIRECTORY
python3 "$here/cuda_alloc.py" 8000 60 > "$OUT/load-kill.txt" 2>&1 &
load=$!
for _ in $(seq 100); do grep -q allocated "$OUT/load-kill.txt" && break; sleep 0.2; done
cat "$OUT/load-kill.txt"
python3 - "$load" <<'PY'
import subprocess, sys, time, os, signal
pid = int(sys.argv[1])
def listed():
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if l.split(",")[0].strip() == str(pid)]
print("before kill:", listed())
t0 = time.monotonic()
os.kill(pid, signal.SIGKILL)
polls = 0
while listed():
    polls += 1
print("gone from NVML %.0f ms after SIGKILL (%d polls of nvidia-smi)" % ((time.monotonic() - t0) * 1000, polls))
PY
wait $load 2>/dev/null
ls "$CUDA_MPS_LOG_DIRECTORY"; tail -20 "$CUDA_MPS_LOG_DIRECTORY"/control.log 2>/dev/null
tail -20 "$CUDA_MPS_LOG_DIRECTORY"/server.log 2>/dev/null

#!/bin/sh
# Stands in for nvidia-smi in tests: two GPUs, as
# `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader` and `nvidia-smi -L` print them.
if [ "$1" = "-L" ]; then
  echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5f0c6a1e-0000-0000-0000-000000000000)"
  echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-5f0c6a1e-0000-0000-0000-000000000001)"
  exit 0
fi
[ "$1" = "--query-gpu=name,memory.total" ] || exit 2
echo "NVIDIA H100 80GB HBM3, 81559 MiB"
echo "NVIDIA H100 80GB HBM3, 81559 MiB"

#!/bin/sh
# Stands in for nvidia-smi in the window tests: two GPUs, as
# `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader` prints them.
[ "$1" = "--query-gpu=name,memory.total" ] || exit 2
echo "NVIDIA H100 80GB HBM3, 81559 MiB"
echo "NVIDIA H100 80GB HBM3, 81559 MiB"

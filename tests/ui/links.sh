#!/bin/sh
# The window talks to the engine through the launch plan, the config API, the workspace reader
# and the progress protocol: it must not link the distributed layer (store, collectives,
# launcher, rank discovery) nor Gloo, NCCL or CUDA, nor the model layer (models, kernels,
# tensors in files) nor what only that layer needs (oneDNN, OpenBLAS, OpenMP, libpng, libjpeg).
# GTK itself loads libpng and libjpeg for its textures, so for those the window's own NEEDED
# entries are checked, not ldd. Fails naming what it found. Usage: links.sh COHORT
set -eu
exe=$1
bad=$(nm "$exe" | grep -E ' [TtDdBb] cohort_(comm|store|dist_env|dist_group|launch_run|launch_spawn|reducer)_' || true)
if [ -n "$bad" ]; then
  echo "links.sh: $exe holds the distributed layer:" >&2
  echo "$bad" | head -5 >&2
  exit 1
fi
libs=$(ldd "$exe" | grep -Ei 'gloo|nccl|cudart|cublas|libmpi|dnnl|openblas|gomp' || true)
if [ -n "$libs" ]; then
  echo "links.sh: $exe links: $libs" >&2
  exit 1
fi
needed=$(readelf -d "$exe" | grep NEEDED | grep -Ei 'png|jpeg|dnnl|blas|gomp' || true)
if [ -n "$needed" ]; then
  echo "links.sh: $exe needs: $needed" >&2
  exit 1
fi
bad=$(nm "$exe" | grep -E ' [TtDdBb] cohort_(model|gpt|dit|resnet|safetensors|optimizer|image|png|jpeg|backend)_|cohort_checkpoint_(save|load)$' || true)
if [ -n "$bad" ]; then
  echo "links.sh: $exe holds the model layer:" >&2
  echo "$bad" | head -5 >&2
  exit 1
fi
# And it does plan launches: the launch part is there.
nm "$exe" | grep -q ' T cohort_launch_plan_new$' || {
  echo "links.sh: $exe has no launch plan" >&2
  exit 1
}
echo "links.sh: $exe links neither the distributed nor the model layer, nor Gloo, NCCL, CUDA, MPI, oneDNN, OpenBLAS, OpenMP, libpng or libjpeg"

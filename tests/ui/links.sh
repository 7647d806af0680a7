#!/bin/sh
# The window talks to the engine through the launch plan, the config API and the progress
# protocol: it must not link the distributed layer (store, collectives, launcher, rank
# discovery) nor Gloo, NCCL or CUDA. Fails naming what it found. Usage: links.sh COHORT
set -eu
exe=$1
bad=$(nm "$exe" | grep -E ' [TtDdBb] cohort_(comm|store|dist_env|dist_group|launch_run|launch_spawn|reducer)_' || true)
if [ -n "$bad" ]; then
  echo "links.sh: $exe holds the distributed layer:" >&2
  echo "$bad" | head -5 >&2
  exit 1
fi
libs=$(ldd "$exe" | grep -Ei 'gloo|nccl|cudart|cublas|libmpi' || true)
if [ -n "$libs" ]; then
  echo "links.sh: $exe links: $libs" >&2
  exit 1
fi
# And it does plan launches: the launch part is there.
nm "$exe" | grep -q ' T cohort_launch_plan_new$' || {
  echo "links.sh: $exe has no launch plan" >&2
  exit 1
}
echo "links.sh: $exe links neither the distributed layer nor Gloo, NCCL, CUDA or MPI"

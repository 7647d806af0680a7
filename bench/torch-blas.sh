# Sourced by the bench/run-*-bench scripts (POSIX sh): PyTorch's fair baseline. Build machines
# may set OPENBLAS_CORETYPE (e.g. Haswell) and OPENBLAS_L2_SIZE machine-wide for older OpenBLAS
# builds that misdetect their CPU; every process inherits them, and PyTorch's OpenBLAS then runs
# kernels older than the CPU's. A benchmark therefore runs PyTorch under each of these "variants"
# and reports the faster, naming it:
#
#   machine  the environment as it is (whatever the machine sets)
#   unset    OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE removed (OpenBLAS detects the CPU itself);
#            tried only when the machine sets one of them, else it is the same run as machine
#   haswell  OPENBLAS_CORETYPE=Haswell, the setting seen on these machines, to measure the
#            handicap where the machine does not set it (only when asked for in $TORCH_BLAS)
#
# $TORCH_BLAS (a space-separated list of those words) replaces the default list. Cohort's own
# runs keep the environment as it is: these settings are for PyTorch's OpenBLAS only.

# The variants to run, space-separated.
torch_blas_variants() {
  if [ -n "${TORCH_BLAS:-}" ]; then
    for v in $TORCH_BLAS; do
      case $v in
      machine | unset | haswell) ;;
      *) echo "TORCH_BLAS: unknown variant '$v'; allowed: machine, unset, haswell" >&2; return 2 ;;
      esac
    done
    echo "$TORCH_BLAS"
  elif [ -n "${OPENBLAS_CORETYPE+x}${OPENBLAS_L2_SIZE+x}" ]; then
    echo "machine unset"
  else
    echo "machine"
  fi
}

# torch_blas_run VARIANT COMMAND [ARG...]: runs the command under the variant's settings.
torch_blas_run() {
  _v=$1
  shift
  case $_v in
  machine) "$@" ;;
  unset) env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@" ;;
  haswell) env OPENBLAS_CORETYPE=Haswell "$@" ;;
  *) echo "torch_blas_run: unknown variant '$_v'; allowed: machine, unset, haswell" >&2; return 2 ;;
  esac
}

# What a variant means on this machine, for the report.
torch_blas_describe() {
  case $1 in
  machine) echo "as the machine sets them (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset})" ;;
  unset) echo "OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset" ;;
  haswell) echo "OPENBLAS_CORETYPE=Haswell (OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset})" ;;
  esac
}

# Reads lines "VARIANT VALUE ..." (VALUE: higher is faster) and prints the line with the
# largest VALUE: the faster PyTorch.
torch_blas_fastest() {
  sort -k2,2gr | head -n 1
}

# The same for lines "VARIANT VALUE ..." where VALUE is a time (lower is faster).
torch_blas_quickest() {
  sort -k2,2g | head -n 1
}

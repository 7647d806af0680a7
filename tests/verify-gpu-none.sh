#!/bin/sh
# scripts/verify-gpu where there is no GPU (forced: no nvidia-smi, no NVIDIA driver files):
# it says so, exits 77 (skipped) and leaves nothing behind; a bad argument is exit 2 naming it.
script=$1
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
out=$(COHORT_NVIDIA_SMI=/nonexistent COHORT_NVIDIA_PROC=/nonexistent "$script" --build "$tmp/b" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 77 ] || { echo "FAIL: exit status $rc, expected 77"; exit 1; }
echo "$out" | grep -q "no NVIDIA GPU on this machine" || { echo "FAIL: no message"; exit 1; }
[ ! -e "$tmp/b" ] || { echo "FAIL: it created $tmp/b"; exit 1; }
out=$("$script" --budget ten 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q -- "--budget is 'ten'" || { echo "FAIL: --budget ten: $rc $out"; exit 1; }
echo "ok"

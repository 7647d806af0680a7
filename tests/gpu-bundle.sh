#!/usr/bin/env bash
# The GPU bundle (scripts/verify-gpu --bundle) is self-contained: built from this build tree, it
# is at most 60 MiB; its run finds every library it carries in the bundle, reports NVIDIA's as
# found or "to be found on the GPU machine", and exits 77 (no GPU here). In a root that holds
# nothing but the C runtime, the bundle and NVIDIA's libraries (a mount namespace; root only),
# every program starts. And a bundle that lacks one of its libraries fails both ways, naming it.
#   tests/gpu-bundle.sh SOURCE_ROOT BUILD_ROOT
set -u
src=$1 build=$2
tmp=$(mktemp -d /var/tmp/cohort-bundle-test.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

out=$("$src/scripts/verify-gpu" --bundle "$tmp/b" --build "$build" --jobs 1 2>&1)
rc=$?
echo "$out" | grep -v '^\[\|^INFO\|^ninja'
[ $rc -eq 77 ] && { echo "no nvcc: nothing to bundle"; exit 77; }
[ $rc -eq 0 ] || fail "verify-gpu --bundle: exit status $rc"
size=$(du -cb "$tmp/b/run" "$tmp/b/payload.tar.gz" | tail -1 | cut -f1)
[ "$size" -le $((60 * 1048576)) ] || fail "the bundle is $size bytes, over 60 MiB"
echo "$out" | grep -q 'library check here: ok' || fail "run's library check did not pass here"
[ ! -e "$tmp/b/root" ] || fail "the bundle's folder keeps its unpacked copy"

# run on the unpacked bundle, with and without one of its libraries
mkdir -p "$tmp/u/root" && tar -xzf "$tmp/b/payload.tar.gz" -C "$tmp/u/root" && cp "$tmp/b/run" "$tmp/u/" ||
  fail "cannot unpack"
r=$tmp/u/root
COHORT_NVIDIA_SMI=/nonexistent COHORT_NVIDIA_PROC=/nonexistent "$tmp/u/run" --out "$tmp/rep" >"$tmp/run.log" 2>&1
rc=$?
[ $rc -eq 77 ] || { cat "$tmp/run.log"; fail "run: exit status $rc, expected 77 (no GPU)"; }
grep -q '"exit": 77' "$tmp/rep/report.json" || fail "report.json does not say 77"
grep -q '^| libraries | ok ' "$tmp/rep/report.md" || fail "report.md: the library check did not pass"
lib=libjson-glib-1.0.so.0
[ -f "$r/lib/$lib" ] || fail "the bundle has no $lib"
mv "$r/lib/$lib" "$tmp/$lib"
COHORT_NVIDIA_SMI=/nonexistent COHORT_NVIDIA_PROC=/nonexistent "$tmp/u/run" --out "$tmp/rep2" >"$tmp/run2.log" 2>&1
rc=$?
[ $rc -eq 1 ] || { cat "$tmp/run2.log"; fail "run without $lib: exit status $rc, expected 1"; }
grep -q "cohort-train loads $lib from .*outside the bundle" "$tmp/rep2/logs/libraries.log" ||
  { cat "$tmp/rep2/logs/libraries.log"; fail "run without $lib does not name it"; }
mv "$tmp/$lib" "$r/lib/$lib"
echo "run: 77 with the bundle whole, 1 naming $lib without it"

# a root with the C runtime only
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null || ! command -v dpkg >/dev/null ||
  ! unshare -m true 2>/dev/null; then
  echo "ok (the root with the C runtime only needs root, unshare and dpkg: not tried)"
  exit 0
fi
pr=$tmp/pr
mkdir -p "$pr/b" "$pr/nv" "$pr/proc"
dpkg -L libc6 | grep -E '^/(usr/)?lib(64|/x86_64-linux-gnu)/[^/]*\.so[^/]*$' | while read -r f; do
  mkdir -p "$pr$(dirname "$f")" && cp -L "$f" "$pr$f" || exit 1
done
[ -f "$pr/lib64/ld-linux-x86-64.so.2" ] || fail "no dynamic loader in the C runtime root"
nv=$(sed -n 's/^cuda: [0-9.]* (\(.*\)\/bin\/nvcc).*/\1/p' "$r/bundle-info.txt")/lib64
nv=$(readlink -f "$nv")
[ -d "$nv" ] || fail "no NVIDIA library folder beside nvcc ($nv)"
starts() { # prints one line per program that does not start
  unshare -m bash -c '
    pr=$1 r=$2 nv=$3
    # /proc: the loader finds $ORIGIN (the run path to the bundle'"'"'s lib/) through /proc/self/exe
    mount --bind "$r" "$pr/b" && mount --bind "$nv" "$pr/nv" && mount -t proc proc "$pr/proc" || exit 1
    grep "^build/" "$r/elf-files.txt" | while read -r p; do
      case "$p" in build/tests/test-*) a=-l ;; build/tests/*) continue ;; *) a=--help ;; esac
      LD_LIBRARY_PATH=/nv:/b/lib/fallback chroot "$pr" "/b/$p" $a >/dev/null 2>"$pr/err" ||
        echo "$p: $(tail -1 "$pr/err")"
    done' starts "$pr" "$r" "$nv"
}
bad=$(starts)
[ -z "$bad" ] || fail "in a root with the C runtime only, these did not start: $bad"
n=$(grep -c '^build/' "$r/elf-files.txt")
echo "in a root with the C runtime only (and NVIDIA's libraries): every program started"
mv "$r/lib/$lib" "$tmp/$lib"
bad=$(starts)
echo "$bad" | grep -q "cohort-train: .*$lib" || fail "without $lib, cohort-train still started there: $bad"
echo "without $lib: $(echo "$bad" | grep -c .) of $n programs did not start there, naming it"
echo "ok"

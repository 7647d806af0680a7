#!/bin/sh
# A stand-in for cohort-train in the window tests: speaks the progress protocol on fd 3 the
# way a failing or stuck run would. COHORT_FAKE_MODE picks the behaviour:
#   crash     rank 1 fails: an error event, a failed done, a launcher-style report, exit 1
#   stubborn  starts two "ranks" (sleep) in its process group, ignores SIGTERM, runs on
set -u
# Ignoring SIGTERM comes first, so a Stop that arrives early still meets a stubborn run.
[ "${COHORT_FAKE_MODE:-crash}" = stubborn ] && trap '' TERM
now() { date +%s.%N; }
printf '{"event":"start","time":%s,"run":"fake","params":1000,"device":"cpu","world_size":2,"total_steps":100,"steps_per_epoch":50}\n' "$(now)" >&3
printf '{"event":"step","time":%s,"step":1,"total_steps":100,"epoch":0,"epoch_step":1,"steps_per_epoch":50,"loss":5.5,"lr":0.001,"tokens_per_s":1000}\n' "$(now)" >&3
case "${COHORT_FAKE_MODE:-crash}" in
crash)
  echo "[rank 1] cohort-train: all_reduce failed: connection reset by peer" >&2
  printf '{"event":"error","time":%s,"rank":1,"message":"all_reduce failed: connection reset by peer"}\n' "$(now)" >&3
  printf '{"event":"done","time":%s,"status":"failed","step":1}\n' "$(now)" >&3
  echo "cohort-run: rank 1 (pid 4242) exited with code 1" >&2
  exit 1
  ;;
stubborn)
  sleep 300 &
  echo "rank pid $!" >&2
  sleep 300 &
  echo "rank pid $!" >&2
  step=2
  while :; do
    printf '{"event":"step","time":%s,"step":%d,"total_steps":100,"loss":5.0}\n' "$(now)" $step >&3
    step=$((step + 1))
    sleep 0.2
  done
  ;;
esac

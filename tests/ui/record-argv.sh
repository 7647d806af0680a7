#!/bin/sh
# Stands in for cohort-train and cohort-run (linked under those names) in the window tests:
# writes the command line it was started with, one word per line, to $COHORT_ARGV_OUT.
{
  printf '%s\n' "$0"
  for a in "$@"; do printf '%s\n' "$a"; done
} >"$COHORT_ARGV_OUT"

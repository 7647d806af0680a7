#!/bin/sh
# Validates the desktop entry and the AppStream metainfo with the distribution's tools
# (skipped, exit 77, when neither is installed). Usage: validate-data.sh DESKTOP METAINFO
set -eu
desktop=$1
metainfo=$2
ran=0
if command -v desktop-file-validate >/dev/null 2>&1; then
  desktop-file-validate "$desktop"
  echo "desktop-file-validate: $desktop ok"
  ran=1
fi
if command -v appstreamcli >/dev/null 2>&1; then
  appstreamcli validate --no-net --explain "$metainfo"
  ran=1
fi
[ $ran = 1 ] || { echo "no validator installed: skipped"; exit 77; }

#!/bin/sh
# Prints, one per line and sorted, the dpkg packages that provide the shared
# libraries the given binaries load (as ldd resolves them here). Run in an
# image's build stage, its output is the list of runtime packages to install
# in the runtime stage of the same distribution, so the runtime stage never
# guesses library package names (they differ between Debian and Ubuntu, and
# between releases: libgrpc++1.51 vs libgrpc++1.51t64, libyaml-cpp0.7 vs
# libyaml-cpp0.8).
#
#   docker/runtime-packages.sh build/bin/kubeps-agent > /runtime-packages.txt
#
# Fails when a library is missing or belongs to no package.
set -eu
if [ "$#" -eq 0 ]; then
  echo "usage: $0 BINARY..." >&2
  exit 2
fi
libraries=""
for binary in "$@"; do
  found=$(ldd "$binary")
  if echo "$found" | grep 'not found' >&2; then
    echo "$0: $binary: missing libraries" >&2
    exit 1
  fi
  libraries="$libraries $(echo "$found" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }')"
done
owner() {
  dpkg -S "$1" 2>/dev/null | cut -d: -f1 | tr -d ' ' | tr ',' '\n' | grep -v -- '-dev$' | head -n 1 || true
}
packages=""
for library in $(printf '%s\n' $libraries | sort -u); do
  # dpkg knows each file under the path its package installed it at; on
  # merged-/usr systems /lib and /usr/lib are one folder, so try both, for
  # the path ldd printed and for the file the symlinks lead to.
  package=""
  real=$(readlink -f "$library")
  for path in "$library" "$real"; do
    case "$path" in
      /usr/*) other=${path#/usr} ;;
      *) other=/usr$path ;;
    esac
    for candidate in "$path" "$other"; do
      [ -n "$package" ] || package=$(owner "$candidate")
    done
  done
  if [ -z "$package" ]; then
    echo "$0: $library belongs to no package" >&2
    exit 1
  fi
  packages="$packages $package"
done
printf '%s\n' $packages | sort -u

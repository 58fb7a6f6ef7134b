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
# Each library's candidate paths: dpkg knows each file under the path its
# package installed it at; on merged-/usr systems /lib and /usr/lib are one
# folder, so both, for the path ldd printed and for the file the symlinks
# lead to.
candidates_of() {
  for path in "$1" "$(readlink -f "$1")"; do
    case "$path" in
      /usr/*) other=${path#/usr} ;;
      *) other=/usr$path ;;
    esac
    printf '%s\n%s\n' "$path" "$other"
  done
}
libraries=$(printf '%s\n' $libraries | sort -u)
all=""
for library in $libraries; do
  all="$all $(candidates_of "$library")"
done
# One dpkg -S for every path (each call reads dpkg's whole database): its
# lines are "package[:arch][, package...]: path"; paths of no package are
# left out (dpkg says so on stderr and exits 1).
owners=$(dpkg -S $all 2>/dev/null | grep -v '^diversion ' || true)
owner() {
  printf '%s\n' "$owners" | awk -v path="$1" '
    { at = length($0) - length(path) - 1 }
    at > 0 && substr($0, at) == ": " path { print substr($0, 1, at - 1); exit }' |
    cut -d: -f1 | tr -d ' ' | tr ',' '\n' | grep -v -- '-dev$' | head -n 1 || true
}
packages=""
for library in $libraries; do
  package=""
  for candidate in $(candidates_of "$library"); do
    [ -n "$package" ] || package=$(owner "$candidate")
  done
  if [ -z "$package" ]; then
    echo "$0: $library belongs to no package" >&2
    exit 1
  fi
  packages="$packages $package"
done
printf '%s\n' $packages | sort -u

#!/usr/bin/env bash
# The NVRTC time of the built-in specs: `optgen emit` then `optgen compile` of each spec in specs/,
# one after another, and the CPU time (user + system, what a loaded machine changes least) and
# wall time of each compile. Usage: scripts/nvrtc_time.sh OPTGEN [ARCHS]
#   OPTGEN  the optgen command to time, e.g. build/generator/optgen
#   ARCHS   its --arch list (default: the command's own default)
set -euo pipefail
cd "$(dirname "$0")/.."
optgen=$(realpath "$1")
archs=${2:-}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
total_cpu=0
total_wall=0
printf '%-16s %8s %8s\n' spec cpu_s wall_s
for spec in specs/*.yaml; do
  name=$(basename "$spec" .yaml)
  "$optgen" emit "$spec" --out "$scratch/$name" >/dev/null
  arguments=(compile "$spec" --out "$scratch/$name" --quiet)
  [ -n "$archs" ] && arguments+=(--arch "$archs")
  /usr/bin/time -f '%U %S %e' -o "$scratch/time" "$optgen" "${arguments[@]}"
  read -r user system wall < "$scratch/time"
  cpu=$(awk -v u="$user" -v s="$system" 'BEGIN { print u + s }')
  printf '%-16s %8.1f %8.1f\n' "$name" "$cpu" "$wall"
  total_cpu=$(awk -v a="$total_cpu" -v b="$cpu" 'BEGIN { print a + b }')
  total_wall=$(awk -v a="$total_wall" -v b="$wall" 'BEGIN { print a + b }')
done
printf '%-16s %8.1f %8.1f\n' total "$total_cpu" "$total_wall"

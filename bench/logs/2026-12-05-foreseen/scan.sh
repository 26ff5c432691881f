#!/usr/bin/env bash
# For each element-wise built-in: its 8-bit Update kernels (f32:q8, bf16:uq8, and the spec's own q8 storages) that
# keep local memory at sm_$1, the source as generated.
arch=$1; out=$2; optgen=${3:-/work/main/build-gpu/generator/optgen}
cd /work/main
: > $out
for spec in specs/*.yaml; do
  name=$(basename $spec .yaml)
  case $name in adafactor|adam_mini|muon|sm3) continue;; esac
  d=/tmp/spill/$name.$arch; mkdir -p $d
  own=$(grep -o '"[a-z0-9]*:q8[^"]*"' $spec | tr -d '"' | tr '\n' ' ')
  $optgen emit $spec --out $d --storage f32:q8 bf16:q8 $own >/dev/null 2>$d/emit.err || { echo "== $name emit failed: $(head -2 $d/emit.err)" >> $out; continue; }
  nvcc -cubin -arch=sm_$arch -std=c++17 --fmad=false -I runtime/include $d/${name}_kernels.cu -o $d/k.cubin -Xptxas -v > $d/ptxas.txt 2>&1
  echo "== $name ($own)" >> $out
  python3 - $d/ptxas.txt >> $out <<'PY'
import re,sys
cur=None
for line in open(sys.argv[1]):
    m=re.search(r"Compiling entry function '(\w+)'",line)
    if m: cur=m.group(1)
    m=re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",line)
    if m and cur and (int(m.group(1)) or int(m.group(2))): print(" ",cur,line.strip())
PY
done

#!/usr/bin/env bash
# adam, adamw, lamb, adam_mini: optgen compile (sm_80, sm_90) with the generator before (45e291f) and after (this commit), in turn.
cd /work/main
for spec in adam adamw lamb adam_mini; do
  for tree in old new; do
    if [ $tree = old ]; then o=/tmp/wt-old/build/generator/optgen; else o=/work/main/build-gpu/generator/optgen; fi
    d=/tmp/t4/$tree/$spec; mkdir -p $d
    $o emit specs/$spec.yaml --out $d >/dev/null
    /usr/bin/time -f "%U %S %e" -o $d/time $o compile specs/$spec.yaml --out $d --quiet
    echo "$tree $spec $(cat $d/time)"
  done
done

#!/usr/bin/env bash
# Experiment: where ghostnet_100's fp32 Adam step loses time against its floor.
set -u
out=${OUT:-/tmp/o}; mkdir -p $out
python3 -c "import tarfile;tarfile.open('.carry/build-run.tar.xz').extractall('build-run')"
export LD_LIBRARY_PATH=$PWD/build-run
python3 - <<'PY'
import json, math
w = json.load(open('build-run/workloads/ghostnet_100.json'))
for name, keep in [('ghost_big', lambda n: n >= 2048), ('ghost_small', lambda n: n < 2048)]:
    shapes = [s for s in w['shapes'] if keep(math.prod(s))]
    json.dump({'name': name, 'source': 'ghostnet_100 subset', 'tensors': len(shapes),
               'parameters': sum(math.prod(s) for s in shapes), 'shapes': shapes},
              open('build-run/workloads/%s.json' % name, 'w'))
    print(name, len(shapes), sum(math.prod(s) for s in shapes))
PY
nvidia-smi --query-gpu=name --format=csv > $out/gpu.txt
build-run/optgen_bench --workload-dir build-run/workloads --workloads ghostnet_100,ghost_big,ghost_small,resnet50 \
  --optimizers adam --modes eager,graph --chunk-sizes 1024,2048,4096 --host-tensors 0 2>&1 | tee $out/bench.log
python3 - <<'PY' 2>&1 | tee $out/copy.log
import torch
for params in [5182508, 5182508 - 54940, 25557032]:
    n = params * 28 // 2 // 4
    x = torch.empty(n, device='cuda'); y = torch.empty_like(x)
    for _ in range(20): y.copy_(x)
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    ts = []
    for r in range(5):
        s.record()
        for _ in range(200): y.copy_(x)
        e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) * 1000 / 200)
    ts.sort()
    print(f"params {params}: copy_ of {n*4/1e6:.1f} MB ({2*n*4/1e6:.1f} MB moved): {ts[2]:.1f} us, {2*n*4/ts[2]/1e6:.2f} TB/s")
    ts = []
    for r in range(5):
        s.record()
        for _ in range(200): torch.mul(x, 1.0, out=y)
        e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) * 1000 / 200)
    ts.sort()
    print(f"params {params}: mul kernel, same bytes: {ts[2]:.1f} us, {2*n*4/ts[2]/1e6:.2f} TB/s")
PY

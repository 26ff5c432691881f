#!/usr/bin/env python3
"""optgen.torch.Adafactor beside torch.optim.Adafactor: time per step on the shapes of real models.

In one process, for each workload (bench/workloads/<name>.json: a model's parameter shapes; default:
every file there), on the same CUDA parameters and gradients (fp32, N(0, 1)), with torch's default
hyperparameters (lr 1e-2, beta2_decay -0.8, eps (None, 1e-3), d 1, weight_decay 0), it times one
optimizer step of:

  optgen        optgen.torch.Adafactor(params).step(), from a Python loop
  optgen_graph  the same step captured once in a torch.cuda.CUDAGraph (warm-up on a side stream), replayed
  forloop       torch.optim.Adafactor(foreach=False): torch's default (foreach=None is the for-loop)
  foreach       torch.optim.Adafactor(foreach=True)
  compile       torch.compile(opt.step) of torch.optim.Adafactor(foreach=True): fullgraph=True with
                torch._dynamo.config.capture_scalar_outputs (torch's step reads its step counts and
                norms with .item()) when that compiles, else fullgraph=False; the table says which
                (only --compile-workloads; default: all). Its eps is (float32's epsilon, 1e-3), what
                eps=(None, 1e-3) means for these fp32 parameters: torch 2.11 cannot trace None (its
                foreach step asserts that it knows the dtype, which it does not under dynamo)

and optgen's speedup against each torch method (against eager optgen; optgen_graph's time is
reported beside them). The timing is bench/torch_compare.py's, through its time_steps(): the median
over --reps repetitions of CUDA-event time around a Python loop of --steps steps (GPU timeline,
launch gaps included), in µs per step, and the host time per step (perf_counter around the same
loop, no synchronisation); torch.compile warms up until its calls stop being slow. Before timing, a
correctness cross-check: 3 optgen steps against 3 torch.optim.Adafactor(foreach=True) steps from
identical parameters and gradients (the parameters are put back after it).

Markdown goes to stdout, the results as JSON to --out (rewritten after every workload, so a run cut
short keeps what it measured). It needs torch, a GPU, and the optgen package with its library
(PYTHONPATH=python OPTGEN_LIBRARY=<build>/liboptgen.so, as scripts/gpu_session.sh sets them);
--dry-run checks the arguments, the workloads and the library without touching a GPU.

    python3 bench/torch_adafactor.py --out adafactor.json
    python3 bench/torch_adafactor.py --methods optgen compile --compile-workloads gpt2
"""

import argparse
import json
import os
import platform
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_compare as tc  # noqa: E402  (its workload loader and timing, shared so the two agree)

METHODS = ["optgen", "optgen_graph", "forloop", "foreach", "compile"]
OPTGEN_METHODS = ("optgen", "optgen_graph")
TORCH_METHODS = ("forloop", "foreach", "compile")
TITLES = {"optgen": "optgen", "optgen_graph": "optgen + CUDA graph", "forloop": "torch for-loop",
          "foreach": "torch foreach", "compile": "torch.compile"}
SHORT = {"optgen": "optgen", "optgen_graph": "optgen+graph", "forloop": "for-loop", "foreach": "foreach",
         "compile": "compile"}
CHECK_STEPS = 3
CHECK_TOLERANCE = 1e-4  # a warning above this


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="methods: " + ", ".join(f"{m} ({TITLES[m]})" for m in METHODS))
    p.add_argument("--workloads", nargs="+", default=None,
                   help="workload names, <workload-dir>/<name>.json (default: every file there)")
    p.add_argument("--workload-dir", default=None, help="folder of workload JSON files (default: bench/workloads)")
    p.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS,
                   help="(default: all); optgen is always run, for the ratios")
    p.add_argument("--compile-workloads", nargs="*", default=["all"],
                   help="workloads on which torch.compile runs ('all': every one; default: %(default)s)")
    p.add_argument("--steps", type=int, default=50, help="timed steps per repetition (default: %(default)s)")
    p.add_argument("--reps", type=int, default=5, help="repetitions; the median is reported (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up steps before timing (default: %(default)s)")
    p.add_argument("--skip-check", action="store_true", help="skip the correctness cross-check")
    p.add_argument("--out", default="adafactor.json", help="JSON results (default: %(default)s)")
    p.add_argument("--render", metavar="JSON", help="print the tables of a results JSON written earlier, and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="check the arguments, the workloads and the library, print the plan, touch no GPU")
    args = p.parse_args(argv)
    if args.steps < 1 or args.reps < 1 or args.warmup < 0:
        p.error("--steps and --reps must be >= 1, --warmup >= 0")
    args.workload_dir = os.path.abspath(args.workload_dir) if args.workload_dir else tc.default_workload_dir()
    if args.workloads is None:
        if not os.path.isdir(args.workload_dir):
            p.error(f"no workload folder {args.workload_dir}")
        args.workloads = sorted(f[:-5] for f in os.listdir(args.workload_dir) if f.endswith(".json"))
    args.methods = [m for m in METHODS if m in args.methods or m == "optgen"]
    return args


# --------------------------------------------------------------------------------------------------
# Methods: each returns (step, cleanup, info); step() issues one optimizer step on the current stream.


def setup_optgen(params):
    import optgen.torch as ot
    opt = ot.Adafactor(params)
    opt.step()  # the first step builds the engine (synchronizes); time_steps warms up further

    def info():
        return {"launches_per_step": opt.engine.launches_last_step()}

    return opt.step, None, info


def setup_optgen_graph(params):
    import torch
    import optgen.torch as ot
    opt = ot.Adafactor(params)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graphs asks
        for _ in range(3):
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        opt.step()
    torch.cuda.synchronize()

    def cleanup():
        nonlocal graph, opt
        graph = opt = None

    return graph.replay, cleanup, None


def setup_torch(foreach):
    def setup(params):
        import torch
        opt = torch.optim.Adafactor(params, foreach=foreach)
        return opt.step, None, None
    return setup


def setup_compile(params):
    import torch
    if not hasattr(torch, "compile"):
        raise tc.NotSupported("this torch has no torch.compile")
    config = torch._dynamo.config
    scalar_outputs = config.capture_scalar_outputs
    failures = []
    for fullgraph in (True, False):
        torch._dynamo.reset()
        # fullgraph: torch's step reads step counts and norms with .item(), which must then be
        # traced as symbolic scalars instead of breaking the graph
        config.capture_scalar_outputs = fullgraph or scalar_outputs
        opt = torch.optim.Adafactor(params, foreach=True, eps=(torch.finfo(torch.float32).eps, 1e-3))

        @torch.compile(fullgraph=fullgraph)
        def fn(opt=opt):
            opt.step()

        before = tc.dynamo_counters()
        t0 = time.perf_counter()
        try:
            fn()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 -- fullgraph refused: go on without it
            first_line = str(e).splitlines()[0][:160] if str(e) else ""
            failures.append(f"fullgraph={fullgraph}: {type(e).__name__}: {first_line}")
            tc.log(f"      torch.compile(fullgraph={fullgraph}) failed: {failures[-1]}")
            opt = fn = None
            config.capture_scalar_outputs = scalar_outputs
            tc.free_memory()
            continue
        compile_s = time.perf_counter() - t0
        tc.log(f"      compiled in {compile_s:.1f} s (first call), fullgraph={fullgraph}")

        def cleanup():
            torch._dynamo.reset()
            config.capture_scalar_outputs = scalar_outputs

        def info(before=before, compile_s=compile_s, fullgraph=fullgraph):
            after = tc.dynamo_counters()
            out = {"compile_s": compile_s, "fullgraph": fullgraph}
            if failures:
                out["note"] = "; ".join(failures)
            if before and after:
                out["graphs"] = after["unique_graphs"] - before["unique_graphs"]
            return out

        return fn, cleanup, info
    raise tc.NotSupported("; ".join(failures))


SETUP = {"optgen": setup_optgen, "optgen_graph": setup_optgen_graph, "forloop": setup_torch(False),
         "foreach": setup_torch(True), "compile": setup_compile}


def run_method(method, params, args):
    import torch
    step = cleanup = info = None
    entry = {}
    try:
        step, cleanup, info = SETUP[method](params)
        entry.update(tc.time_steps(step, args.steps, args.reps, args.warmup, method == "compile"))
        if info:
            entry.update(info())
        if method == "compile":
            ws = entry["warmup_ms"]
            if len(ws) > 2 and ws[-1] > 3 * min(ws) + 1:
                entry["note"] = (entry.get("note", "") + "; " if entry.get("note") else "") + \
                    f"still slow at the end of warm-up ({ws[-1]:.1f} ms): recompiling?"
    except tc.NotSupported as e:
        entry = {"na": str(e).splitlines()[0][:300]}
    except Exception as e:  # noqa: BLE001 -- report and go on with the next method
        entry = {"na": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
        traceback.print_exc()
    finally:
        step = info = None
        if cleanup:
            try:
                cleanup()
            except Exception as e:  # noqa: BLE001
                tc.log(f"      cleanup failed: {type(e).__name__}: {e}")
        cleanup = None
        if method == "compile":
            try:
                torch._dynamo.reset()
            except Exception:  # noqa: BLE001
                pass
        tc.free_memory()
    if "na" in entry:
        tc.log(f"    {method:12s} n/a: {entry['na']}")
    else:
        extra = f", {entry['launches_per_step']} launch(es)/step" if "launches_per_step" in entry else ""
        tc.log(f"    {method:12s} {entry['us_per_step']:10.1f} µs/step  host {entry['host_us_per_step']:8.1f} µs"
               + extra)
    return entry


def cross_check(params):
    """CHECK_STEPS optgen steps against as many torch.optim.Adafactor(foreach=True) steps from the
    same parameters and gradients; the parameters end where they started."""
    import torch
    import optgen.torch as ot
    with torch.no_grad():
        start = [p.detach().clone() for p in params]
    opt = ot.Adafactor(params)
    for _ in range(CHECK_STEPS):
        opt.step()
    torch.cuda.synchronize()
    launches = opt.engine.launches_last_step()
    del opt
    with torch.no_grad():
        ours = [p.detach().clone() for p in params]
        for p, s in zip(params, start):
            p.copy_(s)
    opt = torch.optim.Adafactor(params, foreach=True)
    for _ in range(CHECK_STEPS):
        opt.step()
    del opt
    max_abs, max_rel, worst = 0.0, 0.0, -1
    with torch.no_grad():
        for i, (p, a) in enumerate(zip(params, ours)):
            diff = (a - p).abs()
            d = diff.max().item() if diff.numel() else 0.0
            # relative, with near-zero params compared absolutely (floor 1e-3: params are ~N(0, 1))
            r = (diff / p.abs().clamp_min(1e-3)).max().item() if diff.numel() else 0.0
            max_abs = max(max_abs, d)
            if r > max_rel:
                max_rel, worst = r, i
        moved = max((p - s).abs().max().item() for p, s in zip(params, start) if p.numel())
        for p, s in zip(params, start):
            p.copy_(s)
    del start, ours
    tc.free_memory()
    return {"steps": CHECK_STEPS, "against": "torch.optim.Adafactor(foreach=True)", "max_abs_diff": max_abs,
            "max_rel_diff": max_rel, "worst_tensor": worst, "max_param_change": moved,
            "launches_per_step": launches, "ok": max_rel <= CHECK_TOLERANCE}


# --------------------------------------------------------------------------------------------------
# Output


def markdown(results, methods):
    torch_methods = [m for m in methods if m in TORCH_METHODS]
    lines = ["Adafactor (fp32, torch's defaults). Cells: µs per step, median (GPU time of a loop of steps); "
             "`X / optgen`: how many times faster eager optgen is than X.", ""]
    head = (["workload (tensors, factored, params)"] + [TITLES[m] for m in methods] +
            [f"{SHORT[m]} / optgen" for m in torch_methods] +
            ["launches", "check max rel diff"])
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    notes = []
    for r in results:
        ms = r["methods"]
        ours = (ms.get("optgen") or {}).get("us_per_step")
        cells = [f"{r['workload']} ({r['tensors']}, {r['factored']}, {r['parameters'] / 1e6:.1f}M)"]
        cells += [tc.fmt_us(ms.get(m)) for m in methods]
        for m in torch_methods:
            t = (ms.get(m) or {}).get("us_per_step")
            cells.append(f"{t / ours:.2f}x" if (t and ours) else ("—" if ms.get(m) is None else "n/a"))
        cells.append(str((ms.get("optgen") or {}).get("launches_per_step", "—")))
        c = r.get("check")
        cells.append("—" if not c else (f"{c['max_rel_diff']:.1e}" + ("" if c["ok"] else " MISMATCH"))
                     if "max_rel_diff" in c else "error")
        lines.append("| " + " | ".join(cells) + " |")
        for m in methods:
            e = ms.get(m)
            if e and "us_per_step" not in e:
                notes.append(f"- {r['workload']}, {TITLES[m]}: n/a — {e.get('na', '?')}")
            elif e and e.get("note"):
                notes.append(f"- {r['workload']}, {TITLES[m]}: {e['note']}")
            if m == "compile" and e and "fullgraph" in e:
                notes.append(f"- {r['workload']}, torch.compile: fullgraph={e['fullgraph']}, compiled in "
                             f"{e['compile_s']:.0f} s")
    lines += ["", "Host (CPU) time to issue one step, µs, median:", ""]
    head = ["workload"] + [TITLES[m] for m in methods]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for r in results:
        ms = r["methods"]
        cells = [r["workload"]]
        for m in methods:
            e = ms.get(m)
            cells.append("—" if e is None else (f"{e['host_us_per_step']:.0f}" if "host_us_per_step" in e else "n/a"))
        lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines += ["", "Notes:"] + list(dict.fromkeys(notes))
    return "\n".join(lines) + "\n"


def write_json(path, meta, results):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(argv)
    if args.render:
        with open(args.render) as f:
            data = json.load(f)
        print(markdown(data["results"], data["meta"]["methods"]), flush=True)
        return 0
    workloads = [tc.load_workload(args.workload_dir, w) for w in args.workloads]
    compile_set = {w["name"] for w in workloads} if "all" in args.compile_workloads else set(args.compile_workloads)
    try:
        import optgen
    except ImportError:  # not installed: the sources of this checkout
        sys.path.insert(0, os.path.join(tc.REPO, "python"))
        import optgen
    try:
        specs = optgen.builtin_specs()
    except optgen.OptgenError as e:
        raise SystemExit(f"error: {e}") from None
    if "adafactor" not in specs:
        raise SystemExit(f"error: the optgen library {optgen.library_path()} has no built-in Adafactor (it has: "
                         f"{', '.join(specs)}); set OPTGEN_LIBRARY to a liboptgen.so built with "
                         "specs/adafactor.yaml")
    tc.log(f"optgen library: {optgen.library_path()} (optgen {optgen.version()})")
    tc.log(f"workloads from {args.workload_dir}: " + ", ".join(
        f"{w['name']} ({w['tensors']} tensors, {w['parameters'] / 1e6:.1f}M)" for w in workloads))
    tc.log(f"methods: {', '.join(args.methods)}; torch.compile on: "
           f"{', '.join(sorted(compile_set)) if 'compile' in args.methods else '(not run)'}")
    tc.log(f"timing: {args.reps} x {args.steps} steps after {args.warmup} warm-up steps, median reported")
    if args.dry_run:
        tc.log("dry run: arguments, workloads and library are fine; no GPU touched")
        return 0

    import torch
    if not torch.cuda.is_available():
        raise SystemExit("error: torch sees no CUDA device")
    torch.manual_seed(0)
    if hasattr(torch, "_dynamo"):
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    meta = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "device": torch.cuda.get_device_name(0), "library": optgen.library_path(),
            "workload_dir": args.workload_dir, "steps": args.steps, "reps": args.reps, "warmup": args.warmup,
            "methods": args.methods, "compile_workloads": sorted(compile_set),
            "hyperparameters": "torch.optim.Adafactor's defaults",
            "timing": "bench/torch_compare.py's time_steps: median over reps of CUDA-event time around a Python loop "
                      "of steps, per step; host = perf_counter around the same loop without synchronisation"}
    tc.log(f"device: {meta['device']}, torch {meta['torch']}, CUDA {meta['cuda']}")
    t_start = time.perf_counter()
    results = []
    for w in workloads:
        factored = sum(1 for s in w["shapes"] if len(s) >= 2)
        tc.log(f"\n== {w['name']}: {w['tensors']} tensors ({factored} factored), {w['parameters']:,} parameters "
               f"[{time.perf_counter() - t_start:.0f} s]")
        params = []
        with torch.no_grad():
            for shape in w["shapes"]:
                p = torch.nn.Parameter(torch.randn(shape, device="cuda", dtype=torch.float32))
                p.grad = torch.randn_like(p)
                params.append(p)
        torch.cuda.synchronize()
        row = {"workload": w["name"], "tensors": w["tensors"], "factored": factored, "parameters": w["parameters"],
               "methods": {}}
        if not args.skip_check:
            try:
                row["check"] = c = cross_check(params)
                tc.log(f"    check: {CHECK_STEPS} optgen steps vs torch foreach: max rel diff {c['max_rel_diff']:.2e}, "
                       f"max abs diff {c['max_abs_diff']:.2e} (params moved up to {c['max_param_change']:.2e})"
                       + ("" if c["ok"] else f"  ** MISMATCH above {CHECK_TOLERANCE:g} (tensor {c['worst_tensor']}, "
                                             f"shape {w['shapes'][c['worst_tensor']]}) **"))
            except Exception as e:  # noqa: BLE001
                row["check"] = {"error": f"{type(e).__name__}: {e}"}
                tc.log(f"    check failed: {type(e).__name__}: {e}")
                traceback.print_exc()
                tc.free_memory()
        for method in args.methods:
            if method == "compile" and w["name"] not in compile_set:
                continue
            row["methods"][method] = run_method(method, params, args)
        ours = row["methods"]["optgen"].get("us_per_step")
        row["speedup_of_optgen"] = {m: e["us_per_step"] / ours for m, e in row["methods"].items()
                                    if m != "optgen" and ours and "us_per_step" in e}
        results.append(row)
        meta["elapsed_s"] = time.perf_counter() - t_start
        write_json(args.out, meta, results)
        params = p = None
        tc.free_memory()
    tc.log(f"\ndone in {time.perf_counter() - t_start:.0f} s; JSON: {os.path.abspath(args.out)}\n")
    print(markdown(results, args.methods), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

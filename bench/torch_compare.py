#!/usr/bin/env python3
"""Side-by-side benchmark: optgen (through its C ABI, via ctypes) against PyTorch's optimizers.

In one process, for each workload (parameter shapes of a real model, from a JSON file with the keys
name, tensors, parameters, shapes) and each optimizer (Adam, AdamW, SGD with momentum 0.9, and
adamw_clip: torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True) then AdamW, against optgen's
AdamW with max_grad_norm 1.0 (not under AMP); fp32, lr 1e-3), on the same CUDA parameter tensors
and gradients, it times one optimizer step of:

  optgen        optgen_<spec>_create + optgen_add_param_group + optgen_step (one ctypes call per step)
  optgen_graph  optgen_step captured once in a torch.cuda.CUDAGraph, replayed
  optgen_amp    optgen_step_amp with AMP's grad_scale and found_inf (device float32 tensors)
  forloop       torch.optim, foreach=False
  foreach       torch.optim, foreach=True
  fused         torch.optim, fused=True
  fused_graph   torch.optim, fused=True (capturable=True for Adam/AdamW) captured in a CUDA graph, replayed
  fused_amp     torch.optim, fused=True, stepped with grad_scale and found_inf exactly as GradScaler.step()
                passes them to a fused optimizer (after its overflow check)
  fused_scaler  torch.optim, fused=True, under a real torch.amp.GradScaler: scaler.step(opt) (which checks
                every gradient for inf/NaN, then steps as fused_amp) and scaler.update()
  compile       torch.compile(opt.step), default mode            (only --compile-workloads)
  compile_ro    torch.compile(opt.step), mode="reduce-overhead"  (only --compile-workloads)

Each torch method is compared with the optgen method doing the same work: fused_graph with
optgen_graph, fused_amp and fused_scaler with optgen_amp, every other one with optgen. The AMP
inputs are a scale of 65536 (GradScaler's initial scale) and no overflow.

Each step is launched from a Python loop, as a training loop would. Reported: the median over --reps
repetitions of --steps steps, in microseconds per step, from CUDA events around the loop (GPU
timeline, launch gaps included), plus the host time per step (perf_counter around the loop, no
synchronisation: the cost of issuing a step); effective bandwidth (Adam/AdamW 28, SGD 20, clipped
AdamW 32 bytes per parameter per step) in TB/s and as a fraction of the device's measured copy bandwidth; optgen's
speedup against each torch method. Before timing, a correctness cross-check: 3 optgen steps against
3 torch.optim (foreach) steps from identical params and grads.

Markdown goes to stdout, the full results as JSON to --out (rewritten after every workload x
optimizer, so a run cut short keeps what it measured). Run it from anywhere; relative default paths
are resolved against the repository root. --dry-run checks the arguments, the workload files and the
library's symbols without touching a GPU.
"""

import argparse
import ctypes
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ALL_METHODS = ["optgen", "optgen_graph", "optgen_amp", "forloop", "foreach", "fused", "fused_graph", "fused_amp",
               "fused_scaler", "compile", "compile_ro"]
OPTGEN_METHODS = ("optgen", "optgen_graph", "optgen_amp")
TORCH_METHODS = [m for m in ALL_METHODS if m not in OPTGEN_METHODS]
COMPILE_METHODS = ("compile", "compile_ro")
# The optgen method each torch method is measured against: the one doing the same work.
COUNTERPART = {"fused_graph": "optgen_graph", "fused_amp": "optgen_amp", "fused_scaler": "optgen_amp"}
METHOD_TITLES = {
    "optgen": "optgen",
    "optgen_graph": "optgen + CUDA graph",
    "optgen_amp": "optgen AMP",
    "forloop": "for-loop",
    "foreach": "foreach",
    "fused": "fused",
    "fused_graph": "fused + CUDA graph",
    "fused_amp": "fused AMP",
    "fused_scaler": "fused + GradScaler",
    "compile": "compile",
    "compile_ro": "compile reduce-overhead",
}
SHORT_TITLES = {
    "optgen": "optgen",
    "optgen_graph": "optgen+graph",
    "optgen_amp": "optgen AMP",
    "forloop": "for-loop",
    "foreach": "foreach",
    "fused": "fused",
    "fused_graph": "fused+graph",
    "fused_amp": "fused AMP",
    "fused_scaler": "fused+scaler",
    "compile": "compile",
    "compile_ro": "compile-RO",
}
AMP_SCALE = 65536.0  # GradScaler's default init_scale

LR = 1e-3
# Per optimizer: optgen spec name, hyperparameters by the spec's names, the torch.optim class name and
# its keyword arguments (the same values), and bytes moved per parameter per step (fp32).
OPTIMIZERS = {
    "adam": {
        "spec": "adam",
        "optgen": {"lr": LR, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0},
        "torch": "Adam",
        "torch_kwargs": {"lr": LR, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0},
        "bytes_per_param": 28,  # param r+w, grad r, exp_avg r+w, exp_avg_sq r+w
    },
    "adamw": {
        "spec": "adamw",
        "optgen": {"lr": LR, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01},
        "torch": "AdamW",
        "torch_kwargs": {"lr": LR, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01},
        "bytes_per_param": 28,
    },
    "sgd": {
        "spec": "sgd",
        "optgen": {"lr": LR, "momentum": 0.9, "dampening": 0.0, "weight_decay": 0.0},
        "torch": "SGD",
        "torch_kwargs": {"lr": LR, "momentum": 0.9, "dampening": 0.0, "weight_decay": 0.0},
        "bytes_per_param": 20,  # param r+w, grad r, momentum_buffer r+w
    },
    # Global-norm clipping then AdamW. torch: clip_grad_norm_(params, 1.0, foreach=True) before each
    # step (what a training loop calls); optgen: max_grad_norm, its norm a reduce stage of the step.
    "adamw_clip": {
        "spec": "adamw",
        "optgen": {"lr": LR, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01, "max_grad_norm": 1.0},
        "torch": "AdamW",
        "torch_kwargs": {"lr": LR, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01},
        "clip": 1.0,
        "bytes_per_param": 32,  # AdamW's 28, and the gradient read once more for its norm
    },
}

CHECK_STEPS = 3
CHECK_TOLERANCE = 1e-4  # a warning above this; expected ~1e-7..1e-6


def log(*args):
    print(*args, flush=True)


# --------------------------------------------------------------------------------------------------
# Arguments and workloads


def resolve(path, candidates_base=(None, REPO)):
    """An existing path: as given (absolute or relative to the working directory), else relative to
    the repository root; if neither exists, the one relative to the repository root."""
    if os.path.isabs(path):
        return path
    for base in candidates_base:
        p = os.path.abspath(path if base is None else os.path.join(base, path))
        if os.path.exists(p):
            return p
    return os.path.abspath(os.path.join(REPO, path))


def default_workload_dir():
    return os.path.join(REPO, "bench", "workloads")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="methods: " + ", ".join(f"{m} ({METHOD_TITLES[m]})" for m in ALL_METHODS))
    p.add_argument("--workloads", nargs="+", default=["ghostnet_100", "resnet50", "gpt2", "llama-1b"],
                   help="workload names: <workload-dir>/<name>.json (default: %(default)s)")
    p.add_argument("--workload-dir", default=None,
                   help="folder of the workload JSON files (default: bench/workloads of the repository)")
    p.add_argument("--optimizers", nargs="+", default=["adam", "adamw", "sgd"], choices=sorted(OPTIMIZERS),
                   help="(default: %(default)s)")
    p.add_argument("--methods", nargs="+", default=ALL_METHODS, choices=ALL_METHODS,
                   help="methods to run (default: all); optgen is always run when any are, for the ratios")
    p.add_argument("--steps", type=int, default=50, help="timed steps per repetition (default: %(default)s)")
    p.add_argument("--reps", type=int, default=5, help="repetitions; the median is reported (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=5,
                   help="warm-up steps before timing (at least 1; for torch.compile at least 5, after the compiling "
                        "call, and more while a call is still slow) (default: %(default)s)")
    p.add_argument("--skip-compile", action="store_true", help="skip both torch.compile methods")
    p.add_argument("--compile-workloads", nargs="*", default=["ghostnet_100", "gpt2"],
                   help="workloads on which torch.compile runs ('all': every one; default: %(default)s)")
    p.add_argument("--skip-check", action="store_true", help="skip the correctness cross-check")
    p.add_argument("--lib", default="build/specs/liboptgen_builtin.so",
                   help="optgen's shared library with the built-in specs (default: %(default)s, relative to the "
                        "working directory or the repository root)")
    p.add_argument("--out", default="results.json", help="JSON results (default: %(default)s, in the working directory)")
    p.add_argument("--copy-gib", type=float, default=2.0, help="size of the copy-bandwidth probe (default: %(default)s GiB)")
    p.add_argument("--render", metavar="JSON", default=None,
                   help="print the markdown tables of a results JSON written earlier, and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="check arguments, workloads and the library's symbols, print the plan, touch no GPU")
    args = p.parse_args(argv)
    if args.steps < 1 or args.reps < 1 or args.warmup < 0:
        p.error("--steps and --reps must be >= 1, --warmup >= 0")
    args.workload_dir = os.path.abspath(args.workload_dir) if args.workload_dir else default_workload_dir()
    args.lib = resolve(args.lib)
    if "optgen" not in args.methods:
        args.methods = ["optgen"] + list(args.methods)
    args.methods = [m for m in ALL_METHODS if m in args.methods]  # canonical order, no duplicates
    if args.skip_compile:
        args.methods = [m for m in args.methods if m not in COMPILE_METHODS]
    return args


def load_workload(directory, name):
    path = os.path.join(directory, name + ".json")
    if not os.path.isfile(path):
        available = sorted(f[:-5] for f in os.listdir(directory) if f.endswith(".json")) if os.path.isdir(directory) else []
        raise SystemExit(f"error: workload '{name}': no file {path}"
                         + (f" (available there: {', '.join(available)})" if available else
                            " (pass --workload-dir pointing at a folder of workload JSON files)"))
    with open(path) as f:
        data = json.load(f)
    for key in ("shapes",):
        if key not in data:
            raise SystemExit(f"error: {path}: no key '{key}'")
    shapes = [tuple(int(d) for d in s) for s in data["shapes"]]
    params = sum(math.prod(s) for s in shapes)
    if "tensors" in data and data["tensors"] != len(shapes):
        log(f"warning: {path}: 'tensors' says {data['tensors']}, 'shapes' has {len(shapes)}")
    if "parameters" in data and data["parameters"] != params:
        log(f"warning: {path}: 'parameters' says {data['parameters']}, the shapes hold {params}")
    return {"name": data.get("name", name), "file": path, "shapes": shapes, "tensors": len(shapes), "parameters": params}


# --------------------------------------------------------------------------------------------------
# optgen through ctypes


# The C ABI's structs and version are the Python package's (python/optgen/_capi.py), the one
# binding of optgen/c_api.h: this layer once spoke ABI 7 for five versions after it changed.
sys.path.insert(0, os.path.join(REPO, "python"))
from optgen._capi import ABI_VERSION as OPTGEN_ABI_VERSION  # noqa: E402
from optgen._capi import _Storage as OptgenStorage  # noqa: E402  (NULL: f32 states, params rounded to nearest)
from optgen._capi import _Tensor as OptgenTensor  # noqa: E402

OPTGEN_F32 = 0


class OptgenError(RuntimeError):
    pass


class Optgen:
    """The library, with argtypes and restype declared for every function of the C ABI used here."""

    def __init__(self, path, specs):
        if not os.path.isfile(path):
            raise SystemExit(f"error: no optgen library at {path}; build it (cmake --build <build> --target "
                             "optgen_builtin_shared) or pass --lib")
        self.path = path
        self.lib = lib = ctypes.CDLL(path)
        c_int, c_size_t, c_int64, c_void_p, c_double = ctypes.c_int, ctypes.c_size_t, ctypes.c_int64, ctypes.c_void_p, ctypes.c_double
        P = ctypes.POINTER
        handle = c_void_p  # optgen_optimizer*
        decl = {
            "optgen_abi_version": (ctypes.c_int32, []),
            "optgen_last_error": (ctypes.c_char_p, []),
            "optgen_prepare": (c_int, [handle, c_void_p]),
            "optgen_step_amp": (c_int, [handle, c_void_p, c_void_p, c_void_p]),
            "optgen_add_param_group": (c_int, [handle, P(OptgenTensor), c_size_t, P(ctypes.c_char_p), P(c_double),
                                               c_size_t, P(c_size_t)]),
            "optgen_step": (c_int, [handle, c_void_p]),
            "optgen_set": (c_int, [handle, ctypes.c_char_p, c_double, c_int64]),
            "optgen_get": (c_int, [handle, ctypes.c_char_p, c_size_t, P(c_double)]),
            "optgen_state": (c_int, [handle, ctypes.c_char_p, c_size_t, c_size_t, P(c_void_p)]),
            "optgen_step_count": (c_int, [handle, c_size_t, P(c_int64)]),
            "optgen_launches_last_step": (c_int, [handle, P(c_int)]),
            "optgen_set_chunk_size": (c_int, [handle, c_int64]),
            "optgen_destroy": (None, [handle]),
        }
        for spec in specs:
            # int optgen_<spec>_create(const char* const* names, const double* values, size_t count,
            #                          const optgen_storage* storage, optgen_optimizer** out)
            decl[f"optgen_{spec}_create"] = (c_int, [P(ctypes.c_char_p), P(c_double), c_size_t, P(OptgenStorage),
                                                     P(handle)])
        missing = []
        for name, (restype, argtypes) in decl.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                missing.append(name)
                continue
            fn.restype = restype
            fn.argtypes = argtypes
        if missing:
            raise SystemExit(f"error: {path} lacks {', '.join(missing)}")
        if lib.optgen_abi_version() != OPTGEN_ABI_VERSION:
            raise SystemExit(f"error: {path} implements optgen's C ABI version {lib.optgen_abi_version()}; "
                             f"this script speaks version {OPTGEN_ABI_VERSION}")
        self.symbols = sorted(decl)

    def check(self, rc, what):
        if rc != 0:
            message = self.lib.optgen_last_error()
            raise OptgenError(f"{what} failed ({rc}): {message.decode(errors='replace') if message else '(no message)'}")

    def create(self, spec, hyperparameters, storage=None):
        """`storage`: an OptgenStorage, or None (NULL: f32 states, params rounded to nearest)."""
        names = (ctypes.c_char_p * len(hyperparameters))(*[k.encode() for k in hyperparameters])
        values = (ctypes.c_double * len(hyperparameters))(*hyperparameters.values())
        handle = ctypes.c_void_p()
        self.check(getattr(self.lib, f"optgen_{spec}_create")(names, values, len(hyperparameters),
                                                             None if storage is None else ctypes.byref(storage),
                                                             ctypes.byref(handle)), f"optgen_{spec}_create")
        if not handle.value:
            raise OptgenError(f"optgen_{spec}_create returned 0 but no optimizer")
        return handle

    def add_param_group(self, handle, params):
        tensors = (OptgenTensor * len(params))()
        for t, p in zip(tensors, params):
            assert p.is_cuda and p.dtype == p.grad.dtype and p.is_contiguous() and p.grad.is_contiguous()
            t.param = p.data_ptr()
            t.grad = p.grad.data_ptr()
            t.numel = p.numel()
            t.grad_numel = p.grad.numel()
            t.dtype = OPTGEN_F32
            t.grad_dtype = OPTGEN_F32
            t.states = None
        group = ctypes.c_size_t()
        self.check(self.lib.optgen_add_param_group(handle, tensors, len(params), None, None, 0, ctypes.byref(group)),
                   "optgen_add_param_group")
        return group.value

    def step(self, handle, stream):
        self.check(self.lib.optgen_step(handle, stream), "optgen_step")

    def launches_last_step(self, handle):
        n = ctypes.c_int()
        self.check(self.lib.optgen_launches_last_step(handle, ctypes.byref(n)), "optgen_launches_last_step")
        return n.value

    def step_count(self, handle, group=0):
        n = ctypes.c_int64()
        self.check(self.lib.optgen_step_count(handle, group, ctypes.byref(n)), "optgen_step_count")
        return n.value

    def destroy(self, handle):
        if handle is not None and handle.value:
            self.lib.optgen_destroy(handle)
            handle.value = None


# --------------------------------------------------------------------------------------------------
# Methods: each returns (step, cleanup, info); step() issues one optimizer step on the current stream.


class NotSupported(Exception):
    """A method that this torch or this optimizer does not offer: reported as n/a."""


def free_memory():
    gc.collect()
    import torch
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def torch_optimizer(opt_name, params, **extra):
    import torch
    cfg = OPTIMIZERS[opt_name]
    cls = getattr(torch.optim, cfg["torch"])
    kwargs = dict(cfg["torch_kwargs"])
    kwargs.update(extra)
    try:
        opt = cls(params, **kwargs)
    except (TypeError, ValueError, RuntimeError) as e:
        raise NotSupported(f"torch.optim.{cfg['torch']}({', '.join(f'{k}={v}' for k, v in extra.items())}): {e}") from e
    if "clip" in cfg:
        step, params = opt.step, list(params)

        def clipped_step(*args, **kwargs):
            torch.nn.utils.clip_grad_norm_(params, cfg["clip"], foreach=True)
            return step(*args, **kwargs)

        opt.step = clipped_step
    return opt


def setup_optgen(ctx, opt_name, params):
    import torch
    og = ctx["optgen"]
    cfg = OPTIMIZERS[opt_name]
    torch.cuda.synchronize()
    handle = og.create(cfg["spec"], cfg["optgen"])
    try:
        og.add_param_group(handle, params)
    except Exception:
        og.destroy(handle)
        raise
    torch.cuda.synchronize()
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    lib_step, check = og.lib.optgen_step, og.check

    def step():
        rc = lib_step(handle, stream)
        if rc != 0:
            check(rc, "optgen_step")

    def info():
        return {"launches_per_step": og.launches_last_step(handle)}

    return step, lambda: og.destroy(handle), info


def setup_optgen_graph(ctx, opt_name, params):
    import torch
    og = ctx["optgen"]
    cfg = OPTIMIZERS[opt_name]
    torch.cuda.synchronize()
    handle = og.create(cfg["spec"], cfg["optgen"])
    graph = None
    try:
        og.add_param_group(handle, params)
        stream = torch.cuda.current_stream()
        og.check(og.lib.optgen_prepare(handle, ctypes.c_void_p(stream.cuda_stream)), "optgen_prepare")
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            capture = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            og.check(og.lib.optgen_step(handle, capture), "optgen_step")
        # Setters are ordered on the stream of the last prepare() or step(): the one replays run on.
        og.check(og.lib.optgen_prepare(handle, ctypes.c_void_p(stream.cuda_stream)), "optgen_prepare")
        torch.cuda.synchronize()
    except Exception:
        og.destroy(handle)
        raise

    def cleanup():
        nonlocal graph
        del graph
        og.destroy(handle)

    return graph.replay, cleanup, None


def amp_inputs():
    import torch
    return (torch.full((), AMP_SCALE, dtype=torch.float32, device="cuda"),
            torch.zeros((), dtype=torch.float32, device="cuda"))


def setup_optgen_amp(ctx, opt_name, params):
    import torch
    no_amp_with_clipping(opt_name)
    og = ctx["optgen"]
    cfg = OPTIMIZERS[opt_name]
    torch.cuda.synchronize()
    handle = og.create(cfg["spec"], cfg["optgen"])
    try:
        og.add_param_group(handle, params)
    except Exception:
        og.destroy(handle)
        raise
    grad_scale, found_inf = amp_inputs()
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    scale_ptr, inf_ptr = ctypes.c_void_p(grad_scale.data_ptr()), ctypes.c_void_p(found_inf.data_ptr())
    lib_step, check = og.lib.optgen_step_amp, og.check

    def step():
        rc = lib_step(handle, stream, scale_ptr, inf_ptr)
        if rc != 0:
            check(rc, "optgen_step_amp")

    def cleanup():
        nonlocal grad_scale, found_inf
        og.destroy(handle)
        grad_scale = found_inf = None

    return step, cleanup, None


def no_amp_with_clipping(opt_name):
    if "clip" in OPTIMIZERS[opt_name]:
        raise NotSupported("not measured: torch's clipping under AMP needs GradScaler.unscale_ before it")


def setup_fused_amp(ctx, opt_name, params):
    no_amp_with_clipping(opt_name)
    opt = torch_optimizer(opt_name, params, fused=True)
    grad_scale, found_inf = amp_inputs()

    def step():
        # What torch.amp.GradScaler.step() does for an optimizer with _step_supports_amp_scaling,
        # once its overflow check has produced found_inf.
        opt.grad_scale, opt.found_inf = grad_scale, found_inf
        opt.step()
        del opt.grad_scale, opt.found_inf

    return step, None, None


def setup_fused_scaler(ctx, opt_name, params):
    import torch
    no_amp_with_clipping(opt_name)
    opt = torch_optimizer(opt_name, params, fused=True)
    scaler = torch.amp.GradScaler("cuda", init_scale=AMP_SCALE, growth_interval=1 << 30)
    scaler.scale(torch.ones((), device="cuda"))  # as a training loop's scaler.scale(loss) would, once: creates the scale

    def step():
        scaler.step(opt)
        scaler.update()

    return step, None, None


def setup_eager(flags):
    def setup(ctx, opt_name, params):
        opt = torch_optimizer(opt_name, params, **flags)
        return opt.step, None, None
    return setup


def setup_fused_graph(ctx, opt_name, params):
    import torch
    extra = {"fused": True}
    if OPTIMIZERS[opt_name]["torch"] in ("Adam", "AdamW"):
        extra["capturable"] = True  # torch requires it to capture Adam/AdamW in a graph
    opt = torch_optimizer(opt_name, params, **extra)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up (states initialised) on a side stream, as torch.cuda.graphs asks
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        opt.step()
    torch.cuda.synchronize()

    def cleanup():
        nonlocal graph
        del graph

    return graph.replay, cleanup, None


def dynamo_counters():
    try:
        from torch._dynamo.utils import counters
        return {"unique_graphs": int(counters["stats"].get("unique_graphs", 0)),
                "cudagraph_skips": int(counters["inductor"].get("cudagraph_skips", 0))}
    except Exception:
        return {}


def setup_compile(mode):
    def setup(ctx, opt_name, params):
        import torch
        if not hasattr(torch, "compile"):
            raise NotSupported("this torch has no torch.compile")
        torch._dynamo.reset()  # a fresh cache: no stale guards, no recompile limit reached from earlier runs
        opt = torch_optimizer(opt_name, params)

        # As in the PyTorch tutorial "Compiling the optimizer with torch.compile".
        @torch.compile(fullgraph=False, mode=mode)
        def fn():
            opt.step()

        before = dynamo_counters()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        log(f"      compiled in {compile_s:.1f} s (first call)")

        def cleanup():
            nonlocal opt
            del opt
            torch._dynamo.reset()

        def info():
            after = dynamo_counters()
            out = {"compile_s": compile_s}
            if before and after:
                out["graphs"] = after["unique_graphs"] - before["unique_graphs"]
                out["cudagraph_skips"] = after["cudagraph_skips"] - before["cudagraph_skips"]
            return out

        return fn, cleanup, info
    return setup


SETUP = {
    "optgen": setup_optgen,
    "optgen_graph": setup_optgen_graph,
    "optgen_amp": setup_optgen_amp,
    "fused_amp": setup_fused_amp,
    "fused_scaler": setup_fused_scaler,
    "forloop": setup_eager({"foreach": False}),
    "foreach": setup_eager({"foreach": True}),
    "fused": setup_eager({"fused": True}),
    "fused_graph": setup_fused_graph,
    "compile": setup_compile(None),
    "compile_ro": setup_compile("reduce-overhead"),
}


# --------------------------------------------------------------------------------------------------
# Timing


def time_steps(step, steps, reps, warmup, is_compiled):
    import torch
    warm_times = []
    for _ in range(max(warmup, 5 if is_compiled else 1)):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        warm_times.append(time.perf_counter() - t0)
    if is_compiled:
        # "until compiled": keep warming while a call is far slower than the last ones (a recompile,
        # or the CUDA graph being recorded), at most 10 more calls.
        for _ in range(10):
            if len(warm_times) < 3 or warm_times[-1] <= 3 * min(warm_times) + 1e-3:
                break
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            warm_times.append(time.perf_counter() - t0)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    gpu_us, host_us = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        start.record()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        t1 = time.perf_counter()
        end.record()
        end.synchronize()
        gpu_us.append(start.elapsed_time(end) * 1e3 / steps)
        host_us.append((t1 - t0) * 1e6 / steps)
    return {
        "us_per_step": statistics.median(gpu_us),
        "host_us_per_step": statistics.median(host_us),
        "reps_us": gpu_us,
        "reps_host_us": host_us,
        "warmup_ms": [w * 1e3 for w in warm_times],
    }


def measure_copy_bandwidth(gib):
    import torch
    n = int(gib * 2**30) // 4
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    iters, rates = 10, []
    for _ in range(5):
        torch.cuda.synchronize()
        start.record()
        for _ in range(iters):
            dst.copy_(src)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) * 1e-3 / iters
        rates.append(2 * n * 4 / seconds / 1e12)
    del src, dst
    free_memory()
    return statistics.median(rates)


# --------------------------------------------------------------------------------------------------
# Correctness cross-check


def cross_check(ctx, opt_name, params):
    """3 optgen steps against 3 torch.optim (foreach) steps from identical params and grads; the
    params end where they started."""
    import torch
    og = ctx["optgen"]
    cfg = OPTIMIZERS[opt_name]
    with torch.no_grad():
        start = [p.detach().clone() for p in params]
        handle = og.create(cfg["spec"], cfg["optgen"])
        try:
            og.add_param_group(handle, params)
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            for _ in range(CHECK_STEPS):
                og.step(handle, stream)
            torch.cuda.synchronize()
            steps_counted = og.step_count(handle)
        finally:
            og.destroy(handle)
        ours = [p.detach().clone() for p in params]
        for p, s in zip(params, start):
            p.copy_(s)
    opt = torch_optimizer(opt_name, params, foreach=True)
    for _ in range(CHECK_STEPS):
        opt.step()
    del opt
    max_abs, max_rel, max_norm_rel, worst = 0.0, 0.0, 0.0, -1
    with torch.no_grad():
        for i, (p, a) in enumerate(zip(params, ours)):
            b = p.detach()
            diff = (a - b).abs()
            d = diff.max().item() if diff.numel() else 0.0
            # relative, with near-zero params compared absolutely (floor 1e-3: params are ~N(0, 1))
            r = (diff / b.abs().clamp_min(1e-3)).max().item() if diff.numel() else 0.0
            scale = b.abs().max().item() if diff.numel() else 0.0
            n = d / scale if scale > 0 else d
            max_abs, max_norm_rel = max(max_abs, d), max(max_norm_rel, n)
            if r > max_rel:
                max_rel, worst = r, i
            del diff
        moved = max((p - s).abs().max().item() for p, s in zip(params, start) if p.numel())
        for p, s in zip(params, start):
            p.copy_(s)
    del start, ours
    free_memory()
    return {"steps": CHECK_STEPS, "against": "torch.optim foreach=True", "optgen_step_count": steps_counted,
            "max_abs_diff": max_abs, "max_rel_diff": max_rel, "max_rel_diff_to_tensor_max": max_norm_rel,
            "worst_tensor": worst, "max_param_change": moved, "ok": max_rel <= CHECK_TOLERANCE}


# --------------------------------------------------------------------------------------------------
# Output


def fmt_us(r):
    if r is None:
        return "—"
    if "us_per_step" not in r:
        return "n/a"
    us = r["us_per_step"]
    return f"{us:.0f}" if us >= 100 else f"{us:.1f}"


def markdown(results, copy_tbps, methods):
    lines = []
    lines.append(f"Device copy bandwidth: {copy_tbps:.2f} TB/s (read + write of a copy_). "
                 "Cells: µs per step, median; floor = bytes moved at the copy bandwidth; "
                 "`X / optgen`: how many times faster optgen is than X.")
    lines.append("")
    torch_methods = [m for m in methods if m not in OPTGEN_METHODS]
    by_opt = {}
    for r in results:
        by_opt.setdefault(r["optimizer"], []).append(r)
    notes = []
    for opt_name, rows in by_opt.items():
        cfg = OPTIMIZERS[opt_name]
        lines.append(f"### {cfg['torch']} (fp32, {cfg['bytes_per_param']} bytes/parameter/step)")
        lines.append("")
        head = ["workload (tensors, params)", "floor"] + [METHOD_TITLES[m] for m in methods] + \
               ["optgen TB/s (of copy)"] + [f"{SHORT_TITLES[m]} / {SHORT_TITLES[COUNTERPART.get(m, 'optgen')]}" for m in torch_methods] + \
               ["check max rel diff"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        for r in rows:
            ms = r["methods"]
            og = ms.get("optgen", {})
            og_us = og.get("us_per_step")
            cells = [f"{r['workload']} ({r['tensors']}, {r['parameters'] / 1e6:.1f}M)", f"{r['floor_us']:.0f}"]
            cells += [fmt_us(ms.get(m)) for m in methods]
            cells.append(f"{og['tbps']:.2f} ({og['fraction_of_copy'] * 100:.0f}%)" if og_us else "n/a")
            for m in torch_methods:
                t = ms.get(m, {}).get("us_per_step") if ms.get(m) else None
                ours = (ms.get(COUNTERPART.get(m, "optgen")) or {}).get("us_per_step")
                cells.append(f"{t / ours:.2f}x" if (t and ours) else ("—" if ms.get(m) is None else "n/a"))
            c = r.get("check")
            if not c:
                cells.append("—")
            elif "max_rel_diff" in c:
                cells.append(f"{c['max_rel_diff']:.1e}" + ("" if c["ok"] else " MISMATCH"))
            else:
                cells.append("error")
            lines.append("| " + " | ".join(cells) + " |")
            for m in methods:
                e = ms.get(m)
                if e and "us_per_step" not in e:
                    notes.append(f"- {cfg['torch']}, {r['workload']}, {METHOD_TITLES[m]}: n/a — {e.get('na', '?')}")
                elif e and e.get("note"):
                    notes.append(f"- {cfg['torch']}, {r['workload']}, {METHOD_TITLES[m]}: {e['note']}")
        lines.append("")
        # host time: what issuing one step costs the CPU (the GPU may run behind or ahead of it)
        lines.append(f"Host (CPU) time to issue one {cfg['torch']} step, µs, median:")
        lines.append("")
        with_compile = any(m in COMPILE_METHODS for m in methods)
        head = ["workload"] + [METHOD_TITLES[m] for m in methods] + (["compile time, s"] if with_compile else [])
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        for r in rows:
            ms = r["methods"]
            cells = [r["workload"]]
            for m in methods:
                e = ms.get(m)
                cells.append("—" if e is None else (f"{e['host_us_per_step']:.0f}" if "host_us_per_step" in e else "n/a"))
            comp = [f"{SHORT_TITLES[m]} {ms[m]['compile_s']:.0f}" for m in COMPILE_METHODS
                    if ms.get(m) and "compile_s" in ms[m]]
            if with_compile:
                cells.append(", ".join(comp) if comp else "—")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if notes:
        lines.append("Notes:")
        lines.extend(dict.fromkeys(notes))
        lines.append("")
    return "\n".join(lines)


def write_json(path, meta, results):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------------


def run_method(ctx, method, opt_name, params, args, bytes_moved):
    import torch
    setup = SETUP[method]
    step = cleanup = info = None
    entry = {}
    try:
        step, cleanup, info = setup(ctx, opt_name, params)
        entry.update(time_steps(step, args.steps, args.reps, args.warmup, method in COMPILE_METHODS))
        if info:
            entry.update(info())
        us = entry["us_per_step"]
        entry["tbps"] = bytes_moved / (us * 1e-6) / 1e12
        entry["fraction_of_copy"] = entry["tbps"] / ctx["copy_tbps"]
        if method in COMPILE_METHODS:
            if entry.get("cudagraph_skips"):
                entry["note"] = "inductor skipped CUDA graphs (see the log above)"
            ws = entry["warmup_ms"]
            if len(ws) > 2 and ws[-1] > 3 * min(ws) + 1:
                entry["note"] = (entry.get("note", "") + "; " if entry.get("note") else "") + \
                    f"still slow at the end of warm-up ({ws[-1]:.1f} ms): recompiling?"
    except NotSupported as e:
        entry = {"na": str(e).splitlines()[0][:200]}
    except Exception as e:  # noqa: BLE001 -- report and go on with the next method
        entry = {"na": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
        if isinstance(e, OptgenError) or os.environ.get("TORCH_COMPARE_TRACEBACK"):
            traceback.print_exc()
    finally:
        step = None
        if cleanup:
            try:
                cleanup()
            except Exception as e:  # noqa: BLE001
                log(f"      cleanup failed: {type(e).__name__}: {e}")
        cleanup = info = None
        if method in COMPILE_METHODS:
            try:
                torch._dynamo.reset()  # drops the compiled code, its guards and CUDA graphs, and what they hold
            except Exception:  # noqa: BLE001
                pass
        try:
            free_memory()
        except Exception as e:  # noqa: BLE001 -- a sticky CUDA error: nothing further can run
            log(f"      CUDA failed after {method}: {e}")
            raise
    if "na" in entry:
        log(f"    {method:12s} n/a: {entry['na']}")
    else:
        extra = ""
        if "launches_per_step" in entry:
            extra += f", {entry['launches_per_step']} launch(es)/step"
        log(f"    {method:12s} {entry['us_per_step']:10.1f} µs/step  host {entry['host_us_per_step']:8.1f} µs  "
            f"{entry['tbps']:.2f} TB/s ({entry['fraction_of_copy'] * 100:.0f}% of copy){extra}")
    return entry


def main(argv=None):
    args = parse_args(argv)
    if args.render:
        with open(args.render) as f:
            data = json.load(f)
        print(markdown(data["results"], data["meta"]["copy_tbps"], data["meta"]["methods"]), flush=True)
        return 0
    workloads = [load_workload(args.workload_dir, w) for w in args.workloads]
    compile_set = {w["name"] for w in workloads} if "all" in args.compile_workloads else set(args.compile_workloads)
    specs = sorted({OPTIMIZERS[o]["spec"] for o in OPTIMIZERS})
    og = Optgen(args.lib, specs)

    log(f"optgen library: {args.lib} ({len(og.symbols)} functions declared)")
    log(f"workloads from {args.workload_dir}: " +
        ", ".join(f"{w['name']} ({w['tensors']} tensors, {w['parameters'] / 1e6:.1f}M)" for w in workloads))
    log(f"optimizers: {', '.join(args.optimizers)}; methods: {', '.join(args.methods)}; "
        f"torch.compile on: {', '.join(sorted(compile_set)) if any(m in COMPILE_METHODS for m in args.methods) else '(skipped)'}")
    log(f"timing: {args.reps} x {args.steps} steps after {args.warmup} warm-up steps, median reported")
    if args.dry_run:
        log("dry run: arguments, workloads and library symbols are fine; no GPU touched")
        return 0

    import torch
    if not torch.cuda.is_available():
        raise SystemExit("error: torch sees no CUDA device")
    torch.manual_seed(0)
    dev = torch.cuda.get_device_properties(0)
    meta = {
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "device": torch.cuda.get_device_name(0), "device_memory_gib": dev.total_memory / 2**30,
        "library": args.lib, "workload_dir": args.workload_dir, "steps": args.steps, "reps": args.reps,
        "warmup": args.warmup, "methods": args.methods, "compile_workloads": sorted(compile_set),
        "lr": LR, "optimizers": {k: {"optgen": v["optgen"], "torch": v["torch"], "bytes_per_param": v["bytes_per_param"]}
                                 for k, v in OPTIMIZERS.items() if k in args.optimizers},
        "timing": "median over reps of CUDA-event time around a Python loop of steps, per step; host = perf_counter "
                  "around the same loop without synchronisation",
    }
    try:
        import triton
        meta["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        meta["triton"] = None
    if hasattr(torch, "_dynamo"):
        try:
            torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        except Exception:  # noqa: BLE001
            pass
    log(f"device: {meta['device']} ({meta['device_memory_gib']:.0f} GiB), torch {meta['torch']}, "
        f"CUDA {meta['cuda']}, triton {meta['triton']}")

    t_start = time.perf_counter()
    copy_tbps = measure_copy_bandwidth(args.copy_gib)
    meta["copy_tbps"] = copy_tbps
    meta["copy_probe_gib"] = args.copy_gib
    log(f"copy bandwidth: {copy_tbps:.3f} TB/s ({args.copy_gib:g} GiB copy_, bytes read + written)")
    ctx = {"optgen": og, "copy_tbps": copy_tbps}

    results = []
    for w in workloads:
        log(f"\n== {w['name']}: {w['tensors']} tensors, {w['parameters']:,} parameters "
            f"[{time.perf_counter() - t_start:.0f} s]")
        params = []
        with torch.no_grad():
            for shape in w["shapes"]:
                p = torch.nn.Parameter(torch.randn(shape, device="cuda", dtype=torch.float32))
                p.grad = torch.randn_like(p)
                params.append(p)
        torch.cuda.synchronize()
        for opt_name in args.optimizers:
            cfg = OPTIMIZERS[opt_name]
            bytes_moved = cfg["bytes_per_param"] * w["parameters"]
            row = {"workload": w["name"], "optimizer": opt_name, "tensors": w["tensors"], "parameters": w["parameters"],
                   "bytes_per_step": bytes_moved, "floor_us": bytes_moved / (copy_tbps * 1e12) * 1e6, "methods": {}}
            log(f"  -- {cfg['torch']} [{time.perf_counter() - t_start:.0f} s]")
            if not args.skip_check:
                try:
                    row["check"] = cross_check(ctx, opt_name, params)
                    c = row["check"]
                    log(f"    check: {CHECK_STEPS} optgen steps vs torch foreach: max rel diff {c['max_rel_diff']:.2e}, "
                        f"max abs diff {c['max_abs_diff']:.2e} (params moved up to {c['max_param_change']:.2e})"
                        + ("" if c["ok"] else f"  ** MISMATCH above {CHECK_TOLERANCE:g} (tensor {c['worst_tensor']}) **"))
                except Exception as e:  # noqa: BLE001
                    row["check"] = {"error": f"{type(e).__name__}: {e}"}
                    log(f"    check failed: {type(e).__name__}: {e}")
                    free_memory()
            for method in args.methods:
                if method in COMPILE_METHODS and w["name"] not in compile_set:
                    continue
                row["methods"][method] = run_method(ctx, method, opt_name, params, args, bytes_moved)
            row["speedup_of_optgen"] = {}
            for m, e in row["methods"].items():
                ours = row["methods"].get(COUNTERPART.get(m, "optgen"), {}).get("us_per_step")
                if m not in OPTGEN_METHODS and ours and "us_per_step" in e:
                    row["speedup_of_optgen"][m] = e["us_per_step"] / ours
            results.append(row)
            meta["elapsed_s"] = time.perf_counter() - t_start
            write_json(args.out, meta, results)
        params = p = None
        free_memory()

    meta["elapsed_s"] = time.perf_counter() - t_start
    write_json(args.out, meta, results)
    log(f"\ndone in {meta['elapsed_s']:.0f} s; JSON: {os.path.abspath(args.out)}\n")
    print(markdown(results, copy_tbps, args.methods), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Record reference optimizer trajectories from torch.optim for optgen's C++ tests.

What it records
---------------
For every optimizer optgen generates (sgd, adam, adamw, adagrad, adadelta,
adamax, nadam, radam, rmsprop, asgd, rprop) this script runs the matching
``torch.optim`` class for a fixed number of steps on three parameter tensors of
shapes [1], [5] and [3, 4], and writes ``<out>/<spec>.json`` containing, per
case (one combination of hyperparameters):

* ``groups``: the parameter groups (indices of the tensors in the group and
  *all* of optgen's hyperparameters of the group, under optgen's names);
* ``shapes``: the tensor shapes;
* ``params0``: the initial parameter values (flattened, row-major);
* ``grads``: the gradient handed to torch at each step (``p.grad``, i.e. the
  raw gradient *before* torch applies ``maximize`` or ``weight_decay``);
* ``params``: the parameter values after each step.
* for ASGD only, ``state.ax``: the averaged parameter ``ax`` after each step
  (it never feeds back into ``params``, so it is the only way to observe
  ASGD's averaging coefficient ``mu``).

Adafactor (spec adafactor) is recorded on tensors of one to four dimensions
(``SPEC_SHAPES``: vectors, matrices, a batch of matrices and conv-like weights,
whose last two dimensions are factored into rows and columns) and also records
``state``: ``row_var`` and ``col_var`` of the factored tensors (flattened; []
for a vector) and ``variance`` of the others ([] for a factored tensor).  Its
``eps`` tuple is split into ``eps1``, ``eps2``; torch's ``eps1=None`` means the
machine epsilon of the parameter's dtype, which for the float64 recording would
be float64's, so every case passes ``eps1`` explicitly (float32's epsilon, what
None means for the float32 parameters optgen's default stands for, unless the
case says otherwise), and ``torch_defaults`` records float32's epsilon for it.
Adafactor is recorded only when asked for (``--only adafactor``), into
tests/data/factored (tests/reference_test.cpp counts the other built-ins'
files in tests/data).

Every file also carries the torch version, the class name and ``torch_defaults``:
the defaults of the class ``__init__`` (read with ``inspect.signature``) for
optgen's hyperparameters.

Everything runs on the CPU in float64 (``torch.set_default_dtype(torch.float64)``,
so torch's scalar state such as ``step``, NAdam's ``mu_product`` and ASGD's
``eta``/``mu`` is float64 too), and every optimizer is constructed with
``foreach=False`` so torch's single-tensor (``_single_tensor_*``) code path is
the reference.

optgen's hyperparameter names equal torch's keyword names except that tuples
are split: ``betas`` -> ``beta1``, ``beta2``; ``etas`` -> ``etaminus``,
``etaplus``; ``step_sizes`` -> ``step_size_min``, ``step_size_max``.  Every
hyperparameter is passed to torch explicitly; if the installed torch lacks a
keyword the script stops with an error naming it.

Initial values and gradients come from ``torch.randn`` with a
``torch.Generator`` seeded per case with ``zlib.crc32("<spec>:<case index>")``;
for Rprop about a quarter of the gradient elements are set to exactly +0.0 at
each step so that all of Rprop's sign branches occur.  The output is
deterministic for a given torch version.

How to run
----------
    python3 tests/record_trajectories.py --out tests/data [--steps 10] [--only adam,sgd]
    python3 tests/record_trajectories.py --out tests/data/factored --only adafactor

Requires only torch and the Python standard library.
"""

import argparse
import inspect
import json
import os
import sys
import zlib

try:
    import torch
except ImportError:  # tests/record_adafactor_numpy.py reads the case tables without torch
    torch = None

SHAPES = [[1], [5], [3, 4]]
# Specs recorded on other shapes; the two-group case puts the first half of the tensors in group 0.
SPEC_SHAPES = {
    # A vector and a one-element one; matrices tall, wide, of one row, of one column; a batch of
    # matrices; conv weights, one of 3 x 3 kernels and one of 1 x 1 (matrices of one element).
    "adafactor": [[5], [1], [4, 3], [2, 7], [1, 6], [6, 1], [2, 3, 4], [4, 3, 3, 3], [6, 5, 1, 1]],
}


def shapes_of(spec):
    return SPEC_SHAPES.get(spec, SHAPES)


# optgen tuple-split names: torch keyword -> (optgen name 0, optgen name 1)
TUPLE_SPLITS = {
    "betas": ("beta1", "beta2"),
    "etas": ("etaminus", "etaplus"),
    "step_sizes": ("step_size_min", "step_size_max"),
}
# Specs whose torch keywords split differently (Adafactor's eps is a pair; other specs' a float).
SPEC_TUPLE_SPLITS = {"adafactor": {"eps": ("eps1", "eps2")}}


def split_to_tuple(spec):
    splits = SPEC_TUPLE_SPLITS.get(spec, TUPLE_SPLITS)
    return {n: (t, i) for t, names in splits.items() for i, n in enumerate(names)}


BOOL_HPS = {"nesterov", "maximize", "amsgrad", "decoupled_weight_decay", "centered"}

# torch.finfo(torch.float32).eps: what Adafactor's eps1=None means for float32 parameters.
FLOAT32_EPS = 1.1920928955078125e-07

# States recorded after every step (flattened per tensor; [] where a tensor has none).
RECORDED_STATES = {"asgd": ["ax"], "adafactor": ["row_var", "col_var", "variance"]}

# Specs recorded only when --only names them: optgen does not build them in yet.
NOT_BUILT_IN_YET = {"adafactor"}

# spec -> (torch class name, optgen hyperparameters in order)
SPECS = {
    "sgd": ("SGD", ["lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"]),
    "adam": ("Adam", ["lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "maximize"]),
    "adamw": ("AdamW", ["lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "maximize"]),
    "adagrad": ("Adagrad", ["lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps",
                            "maximize"]),
    "adadelta": ("Adadelta", ["lr", "rho", "eps", "weight_decay", "maximize"]),
    "adamax": ("Adamax", ["lr", "beta1", "beta2", "eps", "weight_decay", "maximize"]),
    "nadam": ("NAdam", ["lr", "beta1", "beta2", "eps", "weight_decay", "momentum_decay",
                        "decoupled_weight_decay", "maximize"]),
    "radam": ("RAdam", ["lr", "beta1", "beta2", "eps", "weight_decay", "decoupled_weight_decay",
                        "maximize"]),
    "rmsprop": ("RMSprop", ["lr", "alpha", "eps", "weight_decay", "momentum", "centered",
                            "maximize"]),
    "asgd": ("ASGD", ["lr", "lambd", "alpha", "t0", "weight_decay", "maximize"]),
    "rprop": ("Rprop", ["lr", "etaminus", "etaplus", "step_size_min", "step_size_max",
                        "maximize"]),
    "adafactor": ("Adafactor", ["lr", "beta2_decay", "eps1", "eps2", "d", "weight_decay",
                                "maximize"]),
}

# Per spec: the base hyperparameters every case starts from, the single-group
# cases (overrides of the base; the case name lists the overrides) and the
# two-group case (overrides of the base for group 0 = tensors 0,1 and for
# group 1 = tensor 2).
BASES = {
    "sgd": dict(lr=0.05, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                maximize=False),
    "adam": dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, amsgrad=False,
                 maximize=False),
    "adamw": dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, amsgrad=False,
                  maximize=False),
    "adagrad": dict(lr=0.05, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                    eps=1e-10, maximize=False),
    "adadelta": dict(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, maximize=False),
    "adamax": dict(lr=0.02, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, maximize=False),
    "nadam": dict(lr=0.02, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
                  momentum_decay=4e-3, decoupled_weight_decay=False, maximize=False),
    "radam": dict(lr=0.02, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
                  decoupled_weight_decay=False, maximize=False),
    "rmsprop": dict(lr=0.01, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                    centered=False, maximize=False),
    "asgd": dict(lr=0.05, lambd=0.01, alpha=0.75, t0=3.0, weight_decay=0.0, maximize=False),
    "rprop": dict(lr=0.05, etaminus=0.5, etaplus=1.2, step_size_min=1e-6, step_size_max=50.0,
                  maximize=False),
    "adafactor": dict(lr=1e-2, beta2_decay=-0.8, eps1=FLOAT32_EPS, eps2=1e-3, d=1.0,
                      weight_decay=0.0, maximize=False),
}

_ADAM_CASES = [
    {},
    {"weight_decay": 0.1},
    # beta2=0.9 so that v_t actually decreases and the amsgrad max matters
    {"amsgrad": True, "beta2": 0.9},
    {"amsgrad": True, "beta2": 0.9, "weight_decay": 0.1},
    {"beta1": 0.5, "beta2": 0.9, "eps": 1e-3},
    {"maximize": True, "weight_decay": 0.1},
    {"maximize": True, "amsgrad": True, "beta2": 0.9},
]
_ADAM_TWO_GROUPS = ({"weight_decay": 0.1},
                    {"lr": 0.03, "weight_decay": 0.2, "amsgrad": True, "beta2": 0.9})

CASES = {
    "sgd": [
        {},
        {"momentum": 0.9},
        {"momentum": 0.9, "dampening": 0.1},
        {"momentum": 0.9, "nesterov": True},
        {"weight_decay": 0.1},
        {"momentum": 0.9, "dampening": 0.1, "weight_decay": 0.1},
        {"momentum": 0.9, "nesterov": True, "weight_decay": 0.1},
        {"maximize": True},
        {"maximize": True, "momentum": 0.9, "weight_decay": 0.1},
    ],
    "adam": _ADAM_CASES,
    "adamw": _ADAM_CASES,
    "adagrad": [
        {},
        {"lr_decay": 0.1},
        {"initial_accumulator_value": 0.5},
        {"weight_decay": 0.1},
        {"lr_decay": 0.1, "initial_accumulator_value": 0.5, "weight_decay": 0.1, "eps": 1e-3},
        {"maximize": True, "weight_decay": 0.1},
    ],
    "adadelta": [
        {},
        {"weight_decay": 0.1},
        {"rho": 0.5, "eps": 1e-3},
        {"lr": 0.5, "eps": 1e-2},
        {"maximize": True, "weight_decay": 0.1},
    ],
    "adamax": [
        {},
        {"weight_decay": 0.1},
        {"beta1": 0.5, "beta2": 0.9},
        {"eps": 0.1},
        {"maximize": True, "weight_decay": 0.1},
    ],
    "nadam": [
        {},
        {"weight_decay": 0.1},
        {"weight_decay": 0.1, "decoupled_weight_decay": True},
        {"momentum_decay": 0.1},
        {"beta1": 0.5, "beta2": 0.9, "eps": 1e-3},
        {"maximize": True, "weight_decay": 0.1},
        {"maximize": True, "weight_decay": 0.1, "decoupled_weight_decay": True},
    ],
    "radam": [
        {},
        # beta2=0.9: the rectification switch (rho_t > 5) flips at step 6
        # (with 0.999 it flips at step 6 as well; both checked by the script)
        {"beta2": 0.9},
        {"weight_decay": 0.1},
        {"weight_decay": 0.1, "decoupled_weight_decay": True},
        {"maximize": True, "weight_decay": 0.1},
        {"maximize": True, "weight_decay": 0.1, "decoupled_weight_decay": True, "beta2": 0.9},
    ],
    "rmsprop": [
        {},
        {"centered": True},
        {"momentum": 0.5},
        {"momentum": 0.5, "centered": True},
        {"weight_decay": 0.1},
        {"alpha": 0.9, "eps": 1e-3, "momentum": 0.5, "centered": True, "weight_decay": 0.1},
        {"maximize": True},
        {"maximize": True, "momentum": 0.5, "centered": True, "weight_decay": 0.1},
    ],
    "asgd": [
        {},
        {"t0": 1000000.0},
        {"t0": 0.0},
        {"lr": 0.1, "lambd": 0.5, "alpha": 0.5},
        {"weight_decay": 0.1},
        {"maximize": True, "weight_decay": 0.1},
    ],
    "rprop": [
        {},
        {"etaminus": 0.4, "etaplus": 1.3, "step_size_min": 0.02, "step_size_max": 0.1},
        {"lr": 0.2, "step_size_max": 0.15},
        {"maximize": True},
        {"maximize": True, "etaminus": 0.4, "etaplus": 1.3, "step_size_min": 0.02,
         "step_size_max": 0.1},
    ],
    "adafactor": [
        {},
        {"maximize": True},
        {"weight_decay": 0.1},
        # lr above 1/sqrt(step) for the first steps, so rho_t = 1/sqrt(step) there
        {"lr": 0.5, "weight_decay": 0.05},
        {"eps1": 1e-3, "eps2": 1e-2},
        # d bounds the update's RMS: 1 (the default) clips most steps, 1.5 fewer
        {"d": 1.5, "lr": 0.1},
        {"beta2_decay": -0.5},
        {"maximize": True, "weight_decay": 0.1, "eps1": 1e-4, "beta2_decay": -0.6, "lr": 0.05},
    ],
}

TWO_GROUPS = {
    "sgd": ({"momentum": 0.9},
            {"lr": 0.1, "momentum": 0.5, "dampening": 0.1, "weight_decay": 0.1}),
    "adam": _ADAM_TWO_GROUPS,
    "adamw": _ADAM_TWO_GROUPS,
    # torch's Adagrad initialises every state "sum" from the constructor's
    # initial_accumulator_value (not the group's), so both groups share it.
    "adagrad": ({"initial_accumulator_value": 0.1},
                {"lr": 0.1, "lr_decay": 0.05, "weight_decay": 0.1,
                 "initial_accumulator_value": 0.1}),
    "adadelta": ({}, {"lr": 0.5, "rho": 0.8, "weight_decay": 0.1}),
    "adamax": ({}, {"lr": 0.05, "beta1": 0.8, "weight_decay": 0.1}),
    "nadam": ({}, {"lr": 0.05, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    "radam": ({}, {"lr": 0.05, "beta2": 0.9, "weight_decay": 0.1}),
    "rmsprop": ({"momentum": 0.5},
                {"lr": 0.02, "centered": True, "weight_decay": 0.1}),
    "asgd": ({}, {"lr": 0.1, "lambd": 0.05, "t0": 5.0, "weight_decay": 0.1}),
    "rprop": ({}, {"lr": 0.02, "etaminus": 0.3, "etaplus": 1.5, "step_size_max": 0.1}),
    "adafactor": ({"weight_decay": 0.1},
                  {"lr": 0.05, "beta2_decay": -0.6, "eps1": 1e-5, "d": 2.0, "maximize": True}),
}


def fail(msg):
    sys.exit(f"record_trajectories.py: error: {msg}")


def normalize(spec, hps):
    """Return the full, ordered, typed hyperparameter dict of optgen's spec."""
    names = SPECS[spec][1]
    unknown = set(hps) - set(names)
    if unknown:
        fail(f"{spec}: unknown hyperparameters {sorted(unknown)}")
    out = {}
    for n in names:
        if n not in hps:
            fail(f"{spec}: hyperparameter {n} missing")
        v = hps[n]
        out[n] = bool(v) if n in BOOL_HPS else float(v)
    return out


def torch_signature(cls):
    return inspect.signature(cls.__init__).parameters


def to_torch_kwargs(spec, cls, hps):
    """optgen hyperparameters -> torch keyword arguments (tuples re-joined)."""
    sig = torch_signature(cls)
    splits = split_to_tuple(spec)
    kwargs = {}
    for n, v in hps.items():
        if n in splits:
            tname, idx = splits[n]
            pair = list(kwargs.get(tname, (None, None)))
            pair[idx] = v
            kwargs[tname] = tuple(pair)
        else:
            kwargs[n] = v
    for k in kwargs:
        if k not in sig:
            fail(f"torch {torch.__version__} {cls.__name__}.__init__ has no keyword '{k}' "
                 f"(needed for optgen spec {spec})")
    return kwargs


def torch_defaults(spec, cls):
    sig = torch_signature(cls)
    splits = split_to_tuple(spec)
    out = {}
    for n in SPECS[spec][1]:
        if n in splits:
            tname, idx = splits[n]
        else:
            tname, idx = n, None
        if tname not in sig:
            fail(f"torch {torch.__version__} {cls.__name__}.__init__ has no keyword '{tname}' "
                 f"(needed for optgen spec {spec})")
        d = sig[tname].default
        if d is inspect.Parameter.empty:
            fail(f"{cls.__name__}.__init__ keyword '{tname}' has no default")
        if idx is not None:
            d = d[idx]
        if isinstance(d, torch.Tensor):
            d = d.item()
        if spec == "adafactor" and n == "eps1" and d is None:
            d = FLOAT32_EPS  # None: the parameter dtype's epsilon, float32's for optgen's default
        out[n] = bool(d) if n in BOOL_HPS else float(d)
    return out


def fmt_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v)


def case_name(overrides):
    if not overrides:
        return "base"
    return ",".join(f"{k}={fmt_value(v)}" for k, v in overrides.items())


def flat(t):
    vals = t.detach().reshape(-1).tolist()
    return [float(x) for x in vals]


def run_case(spec, cls, index, groups, steps, before_step=None):
    """groups: list of (tensor indices, full optgen hyperparameters). before_step(params), when
    given, runs once the gradients are set, before each step (tests/record_clipping.py clips)."""
    seed = zlib.crc32(f"{spec}:{index}".encode("ascii"))
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)

    shapes = shapes_of(spec)
    params = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    params0 = [flat(p) for p in params]

    torch_groups = []
    for idxs, hps in groups:
        g = {"params": [params[i] for i in idxs]}
        g.update(to_torch_kwargs(spec, cls, hps))
        torch_groups.append(g)
    # The constructor keywords are group 0's hyperparameters (so that e.g.
    # Adagrad's constructor-level initial_accumulator_value is the recorded one).
    ctor = to_torch_kwargs(spec, cls, groups[0][1])
    if "foreach" not in torch_signature(cls):
        fail(f"{cls.__name__}.__init__ has no keyword 'foreach'")
    opt = cls(torch_groups, foreach=False, **ctor)

    # Check torch kept every hyperparameter as given.
    for (idxs, hps), tg in zip(groups, opt.param_groups):
        for k, v in to_torch_kwargs(spec, cls, hps).items():
            if tg[k] != v:
                fail(f"{spec} case {index}: torch group has {k}={tg[k]!r}, expected {v!r}")
        if tg["foreach"] is not False:
            fail(f"{spec}: foreach was not kept False")

    recorded = RECORDED_STATES.get(spec, [])
    grads_rec, params_rec = [], []
    states_rec = {name: [] for name in recorded}
    for _ in range(steps):
        grads = []
        for s in shapes:
            g = torch.randn(s, generator=gen, dtype=torch.float64)
            if spec == "rprop":
                keep = torch.rand(s, generator=gen, dtype=torch.float64) >= 0.25
                g = torch.where(keep, g, torch.zeros_like(g))  # exact +0.0
            grads.append(g)
        for p, g in zip(params, grads):
            p.grad = g.clone()
        if before_step is not None:
            before_step(params)
        opt.step()
        grads_rec.append([flat(g) for g in grads])
        params_rec.append([flat(p) for p in params])
        for name in recorded:  # a state a tensor lacks (Adafactor's) is recorded as []
            states_rec[name].append([flat(opt.state[p][name]) if name in opt.state[p] else []
                                     for p in params])

    case = {
        "groups": [{"tensors": list(idxs), "hyperparameters": hps} for idxs, hps in groups],
        "shapes": shapes,
        "params0": params0,
        "grads": grads_rec,
        "params": params_rec,
    }
    if recorded:
        case["state"] = states_rec
    return case


def build_cases(spec):
    """Return list of (name, groups)."""
    base = BASES[spec]
    out = []
    every = list(range(len(shapes_of(spec))))
    for ov in CASES[spec]:
        hps = normalize(spec, {**base, **ov})
        out.append((case_name(ov), [(every, hps)]))
    ov0, ov1 = TWO_GROUPS[spec]
    h0 = normalize(spec, {**base, **ov0})
    h1 = normalize(spec, {**base, **ov1})
    if spec == "adagrad" and h0["initial_accumulator_value"] != h1["initial_accumulator_value"]:
        fail("adagrad two-group case: groups must share initial_accumulator_value")
    first = every[:-1] if spec not in SPEC_SHAPES else every[:len(every) // 2]
    second = [i for i in every if i not in first]

    def listed(indices):
        return "[" + ",".join(str(i) for i in indices) + "]"
    name = ("two_groups:" + listed(first) + ":" + (case_name(ov0) if ov0 else "base") + ";" +
            listed(second) + ":" + case_name(ov1))
    out.append((name, [(first, h0), (second, h1)]))
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        fail(f"{spec}: duplicate case names")
    return out


def dump(obj):
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


def write_file(path, doc):
    """Deterministic, compact-but-readable JSON: one line per case array."""
    lines = ["{"]
    top = [(k, v) for k, v in doc.items() if k != "cases"]
    for k, v in top:
        lines.append(f"  {dump(k)}: {json.dumps(v, allow_nan=False)},")
    lines.append('  "cases": [')
    for ci, case in enumerate(doc["cases"]):
        lines.append("    {")
        items = list(case.items())
        for ki, (k, v) in enumerate(items):
            comma = "," if ki + 1 < len(items) else ""
            lines.append(f"      {dump(k)}: {dump(v)}{comma}")
        lines.append("    }" + ("," if ci + 1 < len(doc["cases"]) else ""))
    lines.append("  ]")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    json.loads(text)  # must be valid JSON
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(text)
    return len(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory (e.g. tests/data)")
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps per case (default 10)")
    ap.add_argument("--only", default="", help="comma-separated subset of specs")
    args = ap.parse_args()
    if args.steps < 1:
        fail("--steps must be >= 1")

    if torch is None:
        fail("needs torch (pip install torch)")
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)  # nothing should use the global generator; just in case

    specs = [s for s in SPECS if s not in NOT_BUILT_IN_YET]
    if args.only:
        specs = [s.strip() for s in args.only.split(",") if s.strip()]
        for s in specs:
            if s not in SPECS:
                fail(f"unknown spec {s}; known: {', '.join(SPECS)}")

    os.makedirs(args.out, exist_ok=True)
    print(f"torch {torch.__version__}")
    total = 0
    for spec in specs:
        cls_name = SPECS[spec][0]
        cls = getattr(torch.optim, cls_name, None)
        if cls is None:
            fail(f"torch.optim has no class {cls_name}")
        cases = []
        for index, (name, groups) in enumerate(build_cases(spec)):
            case = run_case(spec, cls, index, groups, args.steps)
            cases.append({"name": name, **case})
        doc = {
            "torch_version": torch.__version__,
            "spec": spec,
            "torch_class": cls_name,
            "implementation": "single_tensor (foreach=False), float64, CPU",
            "steps": args.steps,
            "torch_defaults": torch_defaults(spec, cls),
            "cases": cases,
        }
        path = os.path.join(args.out, f"{spec}.json")
        size = write_file(path, doc)
        total += size
        print(f"{spec}: {len(cases)} cases ({cls_name}) -> {path} ({size} bytes)")
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()

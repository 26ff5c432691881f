"""torch.optim drop-ins whose step is one fused optgen launch for every parameter.

Each class takes torch.optim's arguments with torch's defaults (the built-in specs match
torch.optim: specs/<name>.yaml), plus the options of optgen.torch.Optimizer (state_dtype,
master_weights, stochastic_rounding, seed, static_grads, max_grad_norm). Those torch lacks take
the arguments of their authors' code: Lion its paper's, LAMB APEX's FusedLAMB's, Adan
sail-sg/Adan's, AdEMAMix apple/ml-ademamix's, CautiousAdamW and CautiousLion
kyleliang919/C-Optim's; LARS those of timm's Lars; Prodigy konstmish/prodigy's; DAdaptAdam
facebookresearch/dadaptation's; AdamMini zyushun/Adam-mini's (named parameters);
AdamWScheduleFree facebookresearch/schedule_free's (with its train() and eval()). Muon is
torch.optim.Muon's, its Newton-Schulz iteration batched over every matrix of one shape.

    import optgen.torch
    opt = optgen.torch.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    # bf16 params: fp32 master copies (state[p]["master_param"]), or bf16 states but exp_avg_sq
    opt = optgen.torch.AdamW(bf16_model.parameters(), lr=3e-4, master_weights=True)
    opt = optgen.torch.AdamW(bf16_model.parameters(), lr=3e-4,
                             state_dtype={"*": torch.bfloat16, "exp_avg_sq": torch.float32})
"""

try:
    import torch as _torch
except ModuleNotFoundError as error:
    if error.name != "torch":
        raise
    raise ImportError("optgen.torch needs torch: pip install torch") from None

# Only the optimizers are public here: every other name is underscored.
from typing import Any as _Any, Dict as _Dict, Optional as _Optional  # noqa: E402

from .._capi import Engine as _Engine  # noqa: E402
from .._hyperparameters import TUPLES as _TUPLES, check_adafactor as _check_adafactor  # noqa: E402
from .._hyperparameters import spec_values as _spec_values  # noqa: E402
from ._optimizer import Optimizer, _stream_of  # noqa: E402


def _builtin(spec: str):
    return lambda storage: _Engine.builtin(spec, storage=storage)


def _d_adaptation_split_problem(name: str, group, parts) -> _Optional[str]:
    """Why Prodigy's or DAdaptAdam's param group cannot step as groups of one (dtype, step count)
    each: D's sums need every group in one kernel set, one dtype; with use_bias_correction each
    part's bias correction would read its own step count, where the published class reads the
    group's."""
    dtypes = sorted({str(dtype) for dtype, _ in parts})
    if len(dtypes) > 1:
        return (f"its parameters are of {len(dtypes)} dtypes ({', '.join(dtypes)}), and {name}'s one D over every "
                "group needs every parameter of the optimizer in one dtype: give the optimizer parameters of one dtype")
    steps = sorted({step for _, step in parts})
    if len(steps) > 1 and group.get("use_bias_correction"):
        return (f"its parameters reached their first gradient at different steps (step counts {steps}), and with "
                f"use_bias_correction each would read its own count where {name} reads the group's: give every "
                "parameter of the group a gradient from the first step on, or put the late ones in a group of their "
                "own")
    return None


def _check_d_adaptation(name: str, lr: float, eps: float, d0: float, fsdp_in_use: bool) -> None:
    """The argument checks Prodigy and DAdaptAdam share (their published classes' own)."""
    if not 0.0 < d0:
        raise ValueError(f"Invalid d0 value: {d0}")
    if not 0.0 < lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 < eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not isinstance(fsdp_in_use, bool):
        raise TypeError(f"fsdp_in_use must be True or False; got {fsdp_in_use!r}")


def _is_dtensor(t: _Any) -> bool:
    return getattr(t, "_local_tensor", None) is not None


def _as_published(state_dict: _Dict[str, _Any], scalar_states, extra: _Dict[str, _Any], flat=()) -> _Dict[str, _Any]:
    """`state_dict` (optgen's, torch's layout) as a class that keeps its scalar state in each param
    group also reads it: each group gets its scalar state (its first parameter's with state: the
    same for all of them) and `k` (its step count), and `extra` where it lacks them; the states named in
    `flat` are flattened (views), but for a DTensor's (a shard does not flatten into the whole's
    order; torch.distributed.checkpoint reshards them as they are). load_state_dict reads both forms."""
    states = dict(state_dict["state"])
    groups = []
    for saved in state_dict["param_groups"]:
        group = dict(saved)
        first = next((states[i] for i in group["params"] if i in states), None)
        if first is not None:
            for name in scalar_states:
                group[name] = float(first[name])
            group["k"] = int(first["step"])
        for key, value in extra.items():
            group.setdefault(key, value)
        for i in group["params"]:
            if i in states and any(name in states[i] for name in flat):
                states[i] = {k: v.flatten() if k in flat and not _is_dtensor(v) else v for k, v in states[i].items()}
        groups.append(group)
    return {"state": states, "param_groups": groups}


class Adadelta(Optimizer):
    """torch.optim.Adadelta (specs/adadelta.yaml)."""

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, *, maximize=False, **options):
        super().__init__(params, _builtin("adadelta"),
                         dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize), **options)


class Adafactor(Optimizer):
    """torch.optim.Adafactor (torch 2.11, torch/optim/_adafactor.py; specs/adafactor.yaml): its
    arguments, defaults and checks, and its state_dict: per parameter 'step' (a float tensor),
    and for a tensor of two or more dimensions row_var (shape p.shape[:-1] + (1,)) and col_var
    (p.shape[:-2] + (1, p.shape[-1])), the second moment factored over its last two dimensions,
    for the others variance (p's shape). A checkpoint of either loads into the other.

    eps=(eps1, eps2): eps1 None means torch.finfo(dtype).eps for the dtype of the group's first
    parameter with a gradient, as torch's step resolves it (float32: 1.1920928955078125e-07,
    bfloat16: 0.0078125); a group that mixes dtypes takes that first one's for all, as torch's
    for-loop step does. foreach chooses torch's implementation and is ignored here (optgen's step
    is fused: its launches do not grow with the number of tensors). States are kept in state_dtype (float32 by
    default; torch keeps them in the parameter's dtype), and the step computes in float32.
    Parameters of two or more dimensions must be contiguous (not channels_last): the step reads
    them as matrices of their last two dimensions. DTensor params (fully_shard) sharded along their
    first dimension step as whole tensors do: each rank holds whole rows, the ranks sum their parts
    of every column's and matrix's sums between the stages, and the states are DTensors (row_var
    sharded as its param; col_var of a matrix of two dimensions replicated, every rank stepping it
    alike; a rank holding none of a matrix's rows leaves its copy unchanged)."""

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, *,
                 maximize=False, **options):
        _check_adafactor(lr, beta2_decay, eps, d, weight_decay)
        super().__init__(params, _builtin("adafactor"),
                         dict(lr=lr, beta2_decay=beta2_decay, eps=tuple(eps), d=d, weight_decay=weight_decay,
                              maximize=maximize), **options)

    def _group_values(self, group: _Dict[str, _Any], dtype: _Optional[_torch.dtype]) -> _Dict[str, float]:
        """The group's values, eps's None (eps1) resolved to torch.finfo(dtype).eps (left to the
        spec's default, float32's, while dtype is unknown)."""
        values = _spec_values(group, self._spec_names, optional=("eps1",))
        eps = group.get("eps")
        if isinstance(eps, (tuple, list)) and len(eps) == 2 and eps[0] is None and dtype is not None:
            values["eps1"] = _torch.finfo(dtype).eps
        return values


class AdamMini(Optimizer):
    """Adam-mini (Zhang et al., 2024) as its authors' adam-mini 1.1.1 computes it (zyushun/Adam-mini
    adam_mini/adam_mini.py, class Adam_mini; specs/adam_mini.yaml): its arguments and defaults,
    Adam with one second moment per block of parameters. It takes named parameters and partitions
    them by name as Adam_mini does: a block per attention head for queries and keys (names with
    k_proj, q_proj, wq, wk, query, key: rows of dim * dim / n_heads), a block per output neuron
    (a row) for embeddings, output layers, values, attention projections and MLPs, Adam's second
    moment per element for biases, and one block for any other parameter (norms); weight decay 0
    for names with norm, ln or bias. The name sets are attributes (embd_names, output_names,
    wqk_names, wv_names, attn_proj_names, mlp_names, adam_block_names) that may be changed before
    the first step, as Adam_mini's. Each parameter is a param group of its own, named, as in
    Adam_mini; state_dict() is Adam_mini's layout (a query's m as (heads, dim * dim / n_heads), a
    norm's vmean a scalar, step an int, and its bookkeeping), and checkpoints move both ways.
    model_sharding and verbose are accepted; nothing is printed. DTensor params (fully_shard's
    Shard(0)) are stepped on their shards as Optimizer steps them: a rank holds whole rows of
    embeddings, outputs, values, projections and MLPs, and whole heads of queries and keys (a shard
    that cuts a head is refused); the one block of any other parameter is cut across the ranks, whose
    parts of its sum are all-reduced inside step(), and its vmean is replicated."""

    _tuples = {}  # Adam_mini's groups hold beta1 and beta2

    def __init__(self, named_parameters, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *,
                 model_sharding=None, dim=2048, n_heads=32, n_kv_heads=None, verbose=True, **options):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))
        if not 0.0 <= weight_decay:
            raise ValueError("Invalid weight_decay value: {}".format(weight_decay))
        if n_kv_heads is not None and n_heads % n_kv_heads != 0:
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
        self.dim, self.n_heads = int(dim), int(n_heads)
        self.n_kv_heads = self.n_heads if n_kv_heads is None else int(n_kv_heads)
        self.head_numel = self.dim * self.dim // self.n_heads
        self.embd_names = {"embed", "embd", "wte"}
        self.output_names = {"lm_head", "output", "final_layer"}
        self.wqk_names = {"k_proj", "q_proj", "wq", "wk", "query", "key"}
        self.wv_names = {"v_proj", "wv", "value"}
        self.attn_proj_names = {"o_proj", "wo", "attn.proj"}
        self.mlp_names = {"feed_forward", "linear", "mlp"}
        self.adam_block_names = {"bias"}
        groups = []
        for name, p in named_parameters:
            name = name.lower()
            if not p.requires_grad:
                continue
            decay = 0.0 if "norm" in name or "ln" in name or "bias" in name else weight_decay
            groups.append({"name": name, "params": [p], "weight_decay": decay})
        super().__init__(groups, _builtin("adam_mini"),
                         dict(lr=lr, beta1=betas[0], beta2=betas[1], eps=eps, weight_decay=weight_decay), **options)

    def _block(self, p: _torch.Tensor) -> tuple:
        """Adam_mini's rule for p, by its group's name, and the rows (blocks) it gives: ("adam",
        numel), ("heads", heads), ("neurons", rows) or ("one", 1)."""
        name = next(g.get("name", "") for g in self.param_groups if any(q is p for q in g["params"]))
        if any(n in name for n in self.adam_block_names):
            return "adam", p.numel()
        if any(n in name for n in self.wqk_names):
            if p.numel() % self.head_numel:
                raise ValueError(f"{name} has {p.numel()} elements, not a whole number of heads of dim * dim / "
                                 f"n_heads = {self.head_numel}: give AdamMini the model's dim and n_heads")
            return "heads", p.numel() // self.head_numel
        rules = (self.embd_names, self.output_names, self.wv_names, self.mlp_names, self.attn_proj_names)
        if any(n in name for names in rules for n in names):
            return "neurons", p.shape[0] if p.dim() > 0 else 1
        return "one", 1

    def _whole_bound_shape(self, p: _torch.Tensor) -> tuple:
        """A bias per element (one dimension: Adam's second moment), anything else as a matrix of
        a row per block."""
        rule, rows = self._block(p)
        return (p.numel(),) if rule == "adam" else (rows, p.numel() // max(rows, 1))

    def _bound_shape(self, p: _torch.Tensor) -> tuple:
        """_whole_bound_shape, or a DTensor's shard of it: its whole blocks (rows), or its part of
        the one block of a parameter that has one (cut along its columns: _shard_dim)."""
        whole = self._whole_bound_shape(p)
        if not _is_dtensor(p):
            return whole
        numel = p.to_local().numel()
        if len(whole) == 1:
            return (numel,)
        if self._shard_dim(p) == 1:
            return (1, numel)
        rows, block = whole
        if numel % max(block, 1):
            raise ValueError(f"a DTensor parameter of shape {tuple(p.shape)} ({self._block(p)[0]} blocks of {block} "
                             f"elements) has a shard of {numel} elements on this rank, which cuts a block: AdamMini "
                             "steps shards of whole heads; shard over a number of ranks whose share of the rows is a "
                             "whole number of heads (dim / n_heads rows each)")
        return (numel // max(block, 1), block)

    def _shard_dim(self, p: _torch.Tensor) -> int:
        """1 for the one block of a parameter, which a DTensor's shards cut; else 0."""
        return 1 if self._block(p)[0] == "one" else 0

    def state_dict(self) -> _Dict[str, _Any]:
        """Adam_mini's layout (class docstring), which Adam_mini loads too."""
        saved = super().state_dict()
        params = [p for g in self.param_groups for p in g["params"]]
        for i, p in enumerate(params):
            if not saved["state"].get(i):
                continue
            state = dict(saved["state"][i], step=int(saved["state"][i]["step"]))
            rule, rows = self._block(p)
            if rule == "heads":
                state.update(m=_view(state["m"], (rows, p.numel() // max(rows, 1))), head_per_gpu=rows)
            elif rule == "neurons":
                state["neuron_per_gpu"] = rows
            elif rule == "one":
                state.update(vmean=_view(state["vmean"], ()), reduced=False, block_numel=float(p.numel()))
            saved["state"][i] = state
        return saved


def _view(t: _torch.Tensor, shape: tuple) -> _torch.Tensor:
    """t viewed as `shape`; a DTensor through its local shard: one sharded along its first
    dimension as as many rows of `shape` as its shard holds (a whole number of them:
    AdamMini._bound_shape), a replicated one as `shape`."""
    if not _is_dtensor(t):
        return t.view(shape)
    from torch.distributed.tensor import DTensor
    sharded = any(x.is_shard() for x in t.placements)
    local = t.to_local().view((-1, *shape[1:]) if sharded else shape)
    return DTensor.from_local(local, t.device_mesh, t.placements, run_check=False, shape=shape,
                              stride=_torch.empty(shape, device="meta").stride())


class Adagrad(Optimizer):
    """torch.optim.Adagrad (specs/adagrad.yaml)."""

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10,
                 *, maximize=False, **options):
        super().__init__(params, _builtin("adagrad"),
                         dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                              initial_accumulator_value=initial_accumulator_value, eps=eps, maximize=maximize),
                         **options)


class Adam(Optimizer):
    """torch.optim.Adam (specs/adam.yaml). decoupled_weight_decay=True is optgen.torch.AdamW."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, *,
                 maximize=False, decoupled_weight_decay=False, **options):
        if decoupled_weight_decay:
            raise ValueError("Adam(decoupled_weight_decay=True) is AdamW: use optgen.torch.AdamW")
        super().__init__(params, _builtin("adam"),
                         dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                              maximize=maximize), **options)


class AdamW(Optimizer):
    """torch.optim.AdamW (specs/adamw.yaml)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, **options):
        super().__init__(params, _builtin("adamw"),
                         dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                              maximize=maximize), **options)


class AdamWScheduleFree(Optimizer):
    """Schedule-free AdamW (Defazio et al., 2024) as its authors' schedulefree computes it
    (facebookresearch/schedule_free schedulefree/adamw_schedulefree.py, release 1.4.1;
    specs/adamw_schedule_free.yaml): its arguments and defaults, no learning-rate schedule, the
    parameters kept at y between the average x and the base sequence z (state[p]["z"]).

    As with the authors' class, call train() before training steps and eval() before evaluating
    or saving the model: they move the parameters from x to y and back, each one fused launch over
    every parameter (the spec's programs train and eval), and step() raises while the optimizer is
    in eval mode. Each group's train_mode is in its param group, and train() and eval() move the
    groups not yet in that mode, as schedulefree does (those alone, where the groups' modes differ:
    torch's lerp per parameter then, not the fused launch); a group that has not stepped has no z
    and does not move. The gradient is left as it was (schedulefree divides p.grad in place by
    the denominator). lr_max and weight_sum, schedulefree's per-group values, are scalar state:
    state[p]["lr_max"], state[p]["weight_sum"] after state_dict(), and in each group of
    state_dict()'s param_groups with k (the step count) and scheduled_lr, as schedulefree keeps
    them; either's checkpoint loads into the other."""

    def __init__(self, params, lr=0.0025, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, warmup_steps=0, r=0.0,
                 weight_lr_power=2.0, **options):
        super().__init__(params, _builtin("adamw_schedule_free"),
                         dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, warmup_steps=warmup_steps, r=r,
                              weight_lr_power=weight_lr_power), **options)
        for group in self.param_groups:
            group.setdefault("train_mode", False)

    def add_param_group(self, param_group: _Dict[str, _Any]) -> None:
        super().add_param_group(param_group)
        self.param_groups[-1].setdefault("train_mode", False)

    def step(self, closure=None):
        if not self.param_groups[0]["train_mode"]:
            raise Exception("Optimizer was not in train mode when step is called. Please insert .train() and "
                            ".eval() calls on the optimizer. See documentation for details.")
        return super().step(closure)

    step.hooked = True  # as Optimizer.step: torch must not wrap it

    def train(self) -> None:
        """The parameters from x to y (p.lerp_(z, 1 - beta1)), for the groups in eval mode."""
        self._switch(True, "train")

    def eval(self) -> None:
        """The parameters from y to x (p.lerp_(z, 1 - 1 / beta1)), for the groups in train mode."""
        self._switch(False, "eval")

    def _switch(self, train: bool, program: str) -> None:
        moving = [group for group in self.param_groups if group["train_mode"] != train]
        if not moving:
            return
        with _torch.no_grad():
            if self._engine is not None and not self._structure_changed and len(moving) == len(self.param_groups):
                # Every bound group at once: the engine runs the program over all of them.
                self._engine.run(program, _stream_of(self._device))
            else:
                # Some groups only (one added after train(), whose train_mode is False as
                # schedulefree's), or not bound since the last change (a loaded state_dict): z as
                # the state holds it (the engine's own buffer once bound), as schedulefree moves them.
                for group in moving:
                    beta1 = group["betas"][0]
                    weight = 1 - beta1 if train else 1 - 1 / beta1
                    for p in group["params"]:
                        z = self.state[p].get("z") if p in self.state else None
                        if z is not None:
                            p.lerp_(z.to(p.dtype).reshape(p.shape), weight)
        for group in moving:
            dict.__setitem__(group, "train_mode", train)  # not a hyperparameter: nothing to send the device

    def state_dict(self) -> _Dict[str, _Any]:
        """torch's layout, which schedulefree's AdamWScheduleFree loads too: each group also holds
        its lr_max, weight_sum, k (its step count), scheduled_lr and train_mode."""
        published = _as_published(super().state_dict(), ("lr_max", "weight_sum"), {})
        for group in published["param_groups"]:
            k, warmup = group.get("k", 0), group["warmup_steps"]
            group.setdefault("lr_max", -1.0)
            group.setdefault("weight_sum", 0.0)
            group.setdefault("k", 0)
            # The last step's lr, as schedulefree logs it (k - 1 < warmup_steps: warming up).
            group["scheduled_lr"] = 0.0 if k == 0 else group["lr"] * (k / warmup if k - 1 < warmup else 1.0)
        return published


class Adamax(Optimizer):
    """torch.optim.Adamax (specs/adamax.yaml)."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *, maximize=False,
                 **options):
        super().__init__(params, _builtin("adamax"),
                         dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize), **options)


class Adan(Optimizer):
    """Adan (Xie et al., 2022; specs/adan.yaml): the arguments and defaults of its authors' adan.py
    (sail-sg/Adan), three betas. Its max_grad_norm is the clipping every optgen optimizer has, which
    clips each param group by its own norm (+ 1e-6); adan.py clips by the norm of every group's
    gradients together (+ eps): the same with one param group, but for the epsilon. foreach and
    fused choose implementations there, and are ignored here."""

    def __init__(self, params, lr=1e-3, betas=(0.98, 0.92, 0.99), eps=1e-8, weight_decay=0.0, max_grad_norm=0.0,
                 no_prox=False, **options):
        super().__init__(params, _builtin("adan"),
                         dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, max_grad_norm=max_grad_norm,
                              no_prox=no_prox), **options)


class AdEMAMix(Optimizer):
    """AdEMAMix (Pagliardini et al., 2024; specs/ademamix.yaml): the arguments and defaults of its
    authors' PyTorch class (apple/ml-ademamix), three betas. A warmup of None (the default) is 0."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999, 0.9999), alpha=2.0, beta3_warmup=None, alpha_warmup=None,
                 eps=1e-8, weight_decay=0, **options):
        super().__init__(params, _builtin("ademamix"),
                         dict(lr=lr, betas=betas, alpha=alpha, beta3_warmup=0 if beta3_warmup is None else beta3_warmup,
                              alpha_warmup=0 if alpha_warmup is None else alpha_warmup, eps=eps,
                              weight_decay=weight_decay), **options)


class ASGD(Optimizer):
    """torch.optim.ASGD (specs/asgd.yaml)."""

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0, *, maximize=False,
                 **options):
        super().__init__(params, _builtin("asgd"),
                         dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay, maximize=maximize),
                         **options)


class CautiousAdamW(Optimizer):
    """Cautious AdamW (Liang et al., 2024; specs/cautious_adamw.yaml): the arguments and defaults of its
    authors' AdamW (kyleliang919/C-Optim c_adamw.py), which are transformers' AdamW's; the update
    masked to where the first moment and the gradient agree in sign, over the mask's mean. The step
    is that class's foreach=False step; its foreach=True (the default there) runs another
    implementation, which ignores correct_bias and adds eps after the bias correction."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, correct_bias=True,
                 **options):
        super().__init__(params, _builtin("cautious_adamw"),
                         dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, correct_bias=correct_bias),
                         **options)


class CautiousLion(Optimizer):
    """Cautious Lion (Liang et al., 2024; specs/cautious_lion.yaml): the arguments and defaults of its
    authors' Lion (kyleliang919/C-Optim c_lion.py); the sign update masked to where it agrees with
    the gradient, times numel / (the mask's count + 1). betas must be below 1 (c_lion.py allows 1)."""

    def __init__(self, params, lr=1e-4, betas=(0.95, 0.98), weight_decay=0.0, **options):
        super().__init__(params, _builtin("cautious_lion"), dict(lr=lr, betas=betas, weight_decay=weight_decay),
                         **options)


class DAdaptAdam(Optimizer):
    """D-Adaptation Adam (Defazio and Mishchenko, 2023) as its authors' dadaptation computes it
    (facebookresearch/dadaptation dadaptation/dadapt_adam.py, release 3.2; specs/dadapt_adam.yaml):
    its arguments and defaults, Adam whose step size D is estimated as it trains (leave lr at 1).
    D and numerator_weighted are scalar state of the optimizer, one value every group shares as
    DAdaptAdam's, kept on the device and updated there each step from two sums over every param
    group (state[p]["d"] after state_dict(), and each group's "d" in state_dict()'s param_groups,
    not in self.param_groups). Every group must hold the same betas[1], growth_rate and d0 (step()
    raises otherwise; DAdaptAdam reads the first group's), and one dtype; a group of lr 0 counts in
    D's sums (DAdaptAdam leaves it out). A group's layer_scale is 1; log_every is accepted and prints nothing. With DTensor params (FSDP2)
    D's sums cover every rank's shards whatever fsdp_in_use says (Optimizer: DTensor params);
    fsdp_in_use is kept for state_dict()."""

    def __init__(self, params, lr=1.0, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, log_every=0,
                 decouple=False, use_bias_correction=False, d0=1e-6, growth_rate=float("inf"), fsdp_in_use=False,
                 **options):
        _check_d_adaptation("DAdaptAdam", lr, eps, d0, fsdp_in_use)
        self._fsdp_in_use = fsdp_in_use
        super().__init__(params, _builtin("dadapt_adam"),
                         dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, decouple=decouple,
                              use_bias_correction=use_bias_correction, d0=d0, growth_rate=growth_rate), **options)

    def state_dict(self) -> _Dict[str, _Any]:
        """torch's layout, which dadaptation's DAdaptAdam loads too: each group also holds its d,
        numerator_weighted and k (its step count), and layer_scale, log_every and fsdp_in_use as
        DAdaptAdam's do. A DAdaptAdam checkpoint loads here (its groups' d and numerator_weighted
        become each parameter's)."""
        return _as_published(super().state_dict(), ("d", "numerator_weighted"),
                             dict(layer_scale=1.0, log_every=0, fsdp_in_use=self._fsdp_in_use))

    def _split_problem(self, group, parts):
        return _d_adaptation_split_problem("DAdaptAdam", group, parts)


class LAMB(Optimizer):
    """LAMB as NVIDIA APEX's FusedLAMB computes it (specs/lamb.yaml): FusedLAMB's arguments and defaults,
    but for max_grad_norm, which is the clipping every optgen optimizer has (default 0: off; FusedLAMB
    clips at 1.0 by default): pass max_grad_norm=1.0 for FusedLAMB's default behaviour."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                 adam_w_mode=True, grad_averaging=True, use_nvlamb=False, max_grad_norm=0.0, **options):
        super().__init__(params, _builtin("lamb"),
                         dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay,
                              adam_w_mode=adam_w_mode, grad_averaging=grad_averaging, use_nvlamb=use_nvlamb,
                              max_grad_norm=max_grad_norm), **options)


class LARS(Optimizer):
    """LARS (You et al., 2017) as timm's Lars computes it (specs/lars.yaml): its arguments and defaults
    (timm/optim/lars.py); trust_clip is APEX LARC's clipping, always_adapt applies the trust ratio
    also when weight_decay is 0."""

    def __init__(self, params, lr=1.0, momentum=0, dampening=0, weight_decay=0, nesterov=False, trust_coeff=0.001,
                 eps=1e-8, trust_clip=False, always_adapt=False, **options):
        super().__init__(params, _builtin("lars"),
                         dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                              nesterov=nesterov, trust_coeff=trust_coeff, eps=eps, trust_clip=trust_clip,
                              always_adapt=always_adapt), **options)


class Lion(Optimizer):
    """Lion (Chen et al., 2023; specs/lion.yaml): the arguments of the paper's reference code."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, *, maximize=False, **options):
        super().__init__(params, _builtin("lion"),
                         dict(lr=lr, betas=betas, weight_decay=weight_decay, maximize=maximize), **options)


class Muon(Optimizer):
    """torch.optim.Muon (torch 2.11, torch/optim/_muon.py; specs/muon.yaml): its arguments, defaults
    and checks, SGD momentum (Nesterov's by default) whose update is orthogonalised by a
    Newton-Schulz iteration in bf16, the step scaled by adjust_lr_fn ("original", None's meaning,
    or "match_rms_adamw"). state[p]["momentum_buffer"] as torch keeps it; checkpoints move both ways.
    state_dtype={"o": torch.float32} runs the iteration in fp32 throughout instead (its input `o`
    kept in float32, the products in fp32 with no TF32), which torch.optim.Muon cannot.

    Each step is a few launches whatever the number of parameters: the momentum in one, then per
    shape of matrix the batched GEMMs of the iteration (cuBLAS), then the update in one. Params of
    two dimensions as torch takes them; one of more (a convolution's weight) is orthogonalised as
    (p.shape[0], numel / p.shape[0]), as KellerJordan/Muon views it (torch.optim.Muon refuses
    it), its lr scaled by that shape. Params of fewer dimensions are refused as torch refuses them:
    step embeddings, heads, norms and biases with AdamW (optgen.torch.AdamW), as Muon's authors do.
    DTensor params (FSDP2's fully_shard: Shard(0) over one mesh dimension) are stepped on their
    shards, each matrix's momentum gathered to one owner rank for its Newton-Schulz iteration (the
    matrices spread over the ranks) and the rows of the result handed back; splits are refused
    with them.

    A param group may say `splits`: each of its matrices is that many matrices of consecutive rows,
    each orthogonalised (and its lr scaled) on its own, as for a fused QKV projection (3) or a
    projection's attention heads (the head count); the rows must divide evenly. With `split_dim=1`
    the splits are of consecutive columns instead, as for a fused QKV projection stored in x out
    (transformers' Conv1D, GPT-2's c_attn: splits=3, split_dim=1); the columns must divide evenly.
    torch.optim.Muon has no such option (it steps the whole matrix); its checkpoints load here,
    keeping each group's splits and split_dim."""

    _tuples = {**_TUPLES, "ns_coefficients": (("ns_a", "ns_b", "ns_c"),)}

    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=(3.4445, -4.775, 2.0315), eps=1e-7, ns_steps=5, adjust_lr_fn=None, **options):
        if lr < 0.0:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if momentum < 0.0:
            raise ValueError(f"momentum should be >= 0 but is: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"weight decay should be >= 0 but is: {weight_decay}")
        _match_rms_adamw(adjust_lr_fn)
        super().__init__(params, _builtin("muon"),
                         dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                              ns_coefficients=tuple(ns_coefficients), eps=eps, ns_steps=ns_steps,
                              match_rms_adamw=_match_rms_adamw(adjust_lr_fn)), **options)
        # torch's adjust_lr_fn in the groups, for the spec's match_rms_adamw (_group_values).
        for group in [self.defaults, *self.param_groups]:
            dict.pop(group, "match_rms_adamw", None)
            dict.__setitem__(group, "adjust_lr_fn", dict.get(group, "adjust_lr_fn", adjust_lr_fn))

    def add_param_group(self, param_group: _Dict[str, _Any]) -> None:
        splits = param_group.get("splits", 1)
        if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
            raise ValueError(f"splits must be a positive int (matrices of consecutive rows per matrix); got {splits!r}")
        split_dim = param_group.get("split_dim", 0)
        if isinstance(split_dim, bool) or not isinstance(split_dim, int) or split_dim not in (0, 1):
            raise ValueError(f"split_dim must be 0 (splits of consecutive rows) or 1 (of consecutive columns); got "
                             f"{split_dim!r}")
        side = "rows" if split_dim == 0 else "columns"
        params = param_group["params"]
        params = [params] if isinstance(params, _torch.Tensor) else list(params)
        param_group = {**param_group, "params": params}
        for p in params:
            count = self._matrix_shape(p)[split_dim]
            if splits > 1 and _is_dtensor(p):
                raise ValueError(f"a parameter of shape {tuple(p.shape)} is a DTensor, whose shard of rows cuts across "
                                 f"splits={splits}'s matrices: leave splits at 1 for DTensor parameters")
            if count % splits:
                raise ValueError(f"a parameter of shape {tuple(p.shape)} has {count} {side}, which splits={splits} does "
                                 f"not divide into matrices of as many {side} each")
            if splits > 1 and not p.is_contiguous():
                raise ValueError(f"a parameter of shape {tuple(p.shape)} is not contiguous (channels_last, a transposed "
                                 f"view): its memory's {side} are not its own, so splits={splits} would cut the wrong "
                                 "matrices; make it contiguous (p.data = p.data.contiguous()) or leave splits at 1")
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        dict.pop(group, "match_rms_adamw", None)
        if not hasattr(self, "_splits"):
            self._splits = {}
        for p in group["params"]:
            self._splits[id(p)] = (splits, split_dim)

    def load_state_dict(self, state_dict: _Dict[str, _Any]) -> None:
        # The splits a group was bound with stay (they are the tensors' binding, not a value a step
        # reads): a checkpoint's, torch's without any or another optimizer's, do not replace them.
        kept = [(group.get("splits", 1), group.get("split_dim", 0)) for group in self.param_groups]
        super().load_state_dict(state_dict)
        for group, (splits, split_dim) in zip(self.param_groups, kept):
            dict.__setitem__(group, "splits", splits)
            dict.__setitem__(group, "split_dim", split_dim)

    def _check_param(self, p: _torch.Tensor) -> None:
        if p.dim() < 2:
            raise ValueError(f"Muon only supports 2D parameters whereas we found a parameter with size: {p.size()}")
        super()._check_param(p)

    @staticmethod
    def _matrix_shape(p: _torch.Tensor) -> tuple:
        """p as a matrix: its own two dimensions, or its first against the rest."""
        return tuple(p.shape) if p.dim() == 2 else (p.shape[0], p.numel() // max(p.shape[0], 1))

    def _bound_shape(self, p: _torch.Tensor) -> tuple:
        """p's matrix, or its group's splits of it along rows: a batch of matrices of consecutive
        rows (splits along columns: _column_splits). A DTensor's local shard: its rows of the matrix."""
        rows, cols = self._matrix_shape(p)
        if _is_dtensor(p):
            return (p.to_local().shape[0], cols)
        splits, split_dim = self._splits.get(id(p), (1, 0))
        return (rows, cols) if splits == 1 or split_dim == 1 else (splits, rows // splits, cols)

    def _column_splits(self, p: _torch.Tensor) -> int:
        splits, split_dim = self._splits.get(id(p), (1, 0))
        return splits if split_dim == 1 else 1

    def _group_values(self, group: _Dict[str, _Any], dtype: _Optional[_torch.dtype]) -> _Dict[str, float]:
        """The group's values, adjust_lr_fn as the spec's match_rms_adamw; torch's limit on
        ns_steps (its _zeropower_via_newtonschulz raises at the step, this when the value is given)."""
        values = _spec_values({k: v for k, v in group.items() if k != "adjust_lr_fn"}, self._spec_names,
                              tuples=self._tuples)
        if values.get("ns_steps", 0) >= 100:
            raise ValueError("Number of steps must be less than 100 for computational efficiency")
        if "adjust_lr_fn" in group:
            values["match_rms_adamw"] = float(_match_rms_adamw(group["adjust_lr_fn"]))
        return values


class MuonWithAuxAdam(_torch.optim.Optimizer):
    """Muon for the hidden matrices and AdamW for the rest (embeddings, heads, norms, biases) in one
    optimizer, as KellerJordan/Muon's MuonWithAuxAdam takes them: param groups each with use_muon,
    Muon's (optgen.torch.Muon: lr, weight_decay, momentum, nesterov, ns_coefficients, eps, ns_steps,
    adjust_lr_fn) or AdamW's (optgen.torch.AdamW: lr, betas, eps, weight_decay, amsgrad) arguments,
    each group's defaults those of its optimizer; `options` (state_dtype, max_grad_norm, ...) go to
    both, but for Muon's matrix value in state_dtype ({"o": torch.float32}), which goes to Muon.

        opt = optgen.torch.MuonWithAuxAdam([
            dict(params=hidden_matrices, use_muon=True, lr=0.02, weight_decay=0.01),
            dict(params=embeddings_heads_norms_biases, use_muon=False, lr=3e-4, betas=(0.9, 0.95))])

    step() steps the groups of both, on the current stream, in a few launches whatever the number of
    parameters (Muon's: its stages and its batched products per shape of matrix; AdamW's: one), and
    can be captured in a CUDA graph. `muon` and `adamw` are the two optimizers: each one's
    state_dict() is torch.optim.Muon's and torch.optim.AdamW's, and each loads those; param_groups
    lists the groups in the order given (the same objects as theirs, read from them each time: a
    change, e.g. by an lr scheduler, reaches the device, and a checkpoint loaded into one of the two
    shows), each with its use_muon. state_dict() is torch's layout over
    these groups, states numbered in their order, which load_state_dict() takes back."""

    def __init__(self, param_groups, **options):
        groups = [dict(g) for g in param_groups]
        for g in groups:
            if "use_muon" not in g:
                raise ValueError("each param group needs use_muon: True (Muon) or False (AdamW)")
            g["params"] = list(g["params"])
        order = [bool(g["use_muon"]) for g in groups]

        def of(use_muon):
            return [{k: v for k, v in g.items() if k != "use_muon"} for g in groups if bool(g["use_muon"]) == use_muon]

        adamw_options = dict(options)
        if isinstance(options.get("state_dtype"), dict):  # Muon's matrix value "o" is not AdamW's
            adamw_options["state_dtype"] = {k: v for k, v in options["state_dtype"].items() if k != "o"}
        self.muon = Muon(of(True), **options) if any(order) else None
        self.adamw = AdamW(of(False), **adamw_options) if not all(order) else None
        super().__init__([p for g in groups for p in g["params"]], {})
        self._order = order
        self.state = _CombinedState(self._parts())

    def _parts(self):
        return [opt for opt in (self.muon, self.adamw) if opt is not None]

    @property
    def param_groups(self):
        """Muon's and AdamW's param groups (the same objects), in the order they were given, each
        with its use_muon: read from the two each time, so that what replaces their groups (a
        checkpoint loaded into `muon` or `adamw` alone) shows here too."""
        if "_order" not in self.__dict__:  # torch.optim.Optimizer.__init__'s own list, replaced above
            return self.__dict__.setdefault("_initial_groups", [])
        muon_groups = iter(self.muon.param_groups if self.muon else [])
        adamw_groups = iter(self.adamw.param_groups if self.adamw else [])
        groups = [next(muon_groups) if use_muon else next(adamw_groups) for use_muon in self._order]
        for group, use_muon in zip(groups, self._order):
            dict.__setitem__(group, "use_muon", use_muon)
        return groups

    @param_groups.setter
    def param_groups(self, groups):
        if "_order" in self.__dict__:
            raise AttributeError("MuonWithAuxAdam's param_groups are those of its muon and adamw: change those")
        self.__dict__["_initial_groups"] = groups

    def add_param_group(self, param_group: _Dict[str, _Any]) -> None:
        if not hasattr(self, "_order"):  # torch.optim.Optimizer.__init__'s own group: replaced above
            return super().add_param_group(param_group)
        raise NotImplementedError("MuonWithAuxAdam takes its param groups when made")

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with _torch.enable_grad():
                loss = closure()
        for opt in self._parts():
            opt.step()
        return loss

    step.hooked = True

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self._parts():
            opt.zero_grad(set_to_none)

    def state_dict(self) -> _Dict[str, _Any]:
        parts = {id(opt): opt.state_dict() for opt in self._parts()}
        state, groups, index = {}, [], 0
        cursors = {key: 0 for key in parts}
        for use_muon in self._order:
            opt = self.muon if use_muon else self.adamw
            saved = parts[id(opt)]
            group = dict(saved["param_groups"][cursors[id(opt)]])
            cursors[id(opt)] += 1
            params = []
            for p in group["params"]:
                if p in saved["state"]:
                    state[index] = saved["state"][p]
                params.append(index)
                index += 1
            group["params"] = params
            group["use_muon"] = use_muon
            groups.append(group)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: _Dict[str, _Any]) -> None:
        groups = state_dict["param_groups"]
        if [bool(g.get("use_muon")) for g in groups] != self._order:
            raise ValueError("the checkpoint's param groups are not this optimizer's (use_muon of each, in order)")
        for opt, use_muon in ((self.muon, True), (self.adamw, False)):
            if opt is None:
                continue
            mine = [g for g in groups if bool(g["use_muon"]) == use_muon]
            numbering, state = {}, {}
            for g in mine:
                for p in g["params"]:
                    numbering[p] = len(numbering)
                    if p in state_dict["state"]:
                        state[numbering[p]] = state_dict["state"][p]
            opt.load_state_dict({"state": state, "param_groups": [
                {**{k: v for k, v in g.items() if k != "use_muon"}, "params": [numbering[p] for p in g["params"]]}
                for g in mine]})


class _CombinedState(dict):
    """MuonWithAuxAdam's state: each parameter's, as its optimizer keeps it (read through)."""

    def __init__(self, parts):
        super().__init__()
        self._parts = parts

    def __getitem__(self, p):
        for opt in self._parts:
            if p in opt.state:
                return opt.state[p]
        raise KeyError(p)

    def __contains__(self, p):
        return any(p in opt.state for opt in self._parts)

    def __iter__(self):
        return (p for opt in self._parts for p in opt.state)

    def __len__(self):
        return sum(len(opt.state) for opt in self._parts)

    def items(self):
        return [(p, opt.state[p]) for opt in self._parts for p in opt.state]

    def keys(self):
        return list(iter(self))

    def values(self):
        return [s for _, s in self.items()]


def _match_rms_adamw(adjust_lr_fn) -> bool:
    """torch.optim.Muon's adjust_lr_fn as specs/muon.yaml's match_rms_adamw."""
    if adjust_lr_fn is not None and adjust_lr_fn not in ("original", "match_rms_adamw"):
        raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported")
    return adjust_lr_fn == "match_rms_adamw"


class NAdam(Optimizer):
    """torch.optim.NAdam (specs/nadam.yaml)."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum_decay=4e-3, *,
                 decoupled_weight_decay=False, maximize=False, **options):
        super().__init__(params, _builtin("nadam"),
                         dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay,
                              decoupled_weight_decay=decoupled_weight_decay, maximize=maximize), **options)


class Prodigy(Optimizer):
    """Prodigy (Mishchenko and Defazio, 2024) as its authors' prodigyopt computes it
    (konstmish/prodigy prodigyopt/prodigy.py; specs/prodigy.yaml): its arguments and defaults, Adam
    whose step size D is estimated as it trains (leave lr at 1). D, d_max and d_numerator are
    scalar state of the optimizer, one value every group shares as Prodigy's, kept on the device
    and updated there each step from two sums over every param group (state[p]["d"] after
    state_dict(), and each group's "d" in state_dict()'s param_groups, not in self.param_groups).
    Every group must hold the same betas[1], beta3, d0, d_coef and growth_rate (step() raises
    otherwise; Prodigy reads the first group's) and one dtype; a group of lr 0 counts in D's sums
    (Prodigy leaves it out). slice_p must be 1 (the exact estimate). With DTensor params (FSDP2) D's
    sums cover every rank's shards whatever fsdp_in_use says (Optimizer: DTensor params);
    fsdp_in_use is kept for state_dict(). A step whose gradients are all zero before any was not
    (Prodigy returns early there) still counts in the step count that use_bias_correction reads."""

    _tuples = {**_TUPLES, "betas": (("beta1", "beta2"),)}  # betas is a pair: beta3 stands beside it

    def __init__(self, params, lr=1.0, betas=(0.9, 0.999), beta3=None, eps=1e-8, weight_decay=0.0, decouple=True,
                 use_bias_correction=False, safeguard_warmup=False, d0=1e-6, d_coef=1.0, growth_rate=float("inf"),
                 fsdp_in_use=False, slice_p=1, **options):
        _check_d_adaptation("Prodigy", lr, eps, d0, fsdp_in_use)
        self._fsdp_in_use = fsdp_in_use
        if beta3 is not None and not 0.0 <= beta3 < 1.0:
            raise ValueError(f"Invalid beta3 value: {beta3}")
        if slice_p != 1:
            raise ValueError(f"slice_p={slice_p}: optgen.torch's Prodigy computes D's estimate from every element "
                             "(slice_p=1)")
        super().__init__(params, _builtin("prodigy"),
                         dict(lr=lr, betas=betas, beta3=beta3, eps=eps, weight_decay=weight_decay, decouple=decouple,
                              use_bias_correction=use_bias_correction, safeguard_warmup=safeguard_warmup, d0=d0,
                              d_coef=d_coef, growth_rate=growth_rate), **options)

    def state_dict(self) -> _Dict[str, _Any]:
        """torch's layout, which prodigyopt's Prodigy loads too: each group also holds its d, d_max,
        d_numerator and k (its step count), and slice_p and fsdp_in_use; s and p0 are flat, as
        Prodigy keeps them. A Prodigy checkpoint (slice_p=1) loads here (its groups' d, d_max and
        d_numerator become each parameter's; s and p0 take the parameter's shape)."""
        return _as_published(super().state_dict(), ("d", "d_max", "d_numerator"),
                             dict(slice_p=1, fsdp_in_use=self._fsdp_in_use), flat=("s", "p0"))

    def _group_values(self, group: _Dict[str, _Any], dtype: _Optional[_torch.dtype]) -> _Dict[str, float]:
        """The group's values, beta3's None as the spec's -1 (sqrt(beta2), as Prodigy's None)."""
        values = _spec_values(group, self._spec_names, optional=("beta3",), tuples=self._tuples)
        if "beta3" in group and group["beta3"] is None:
            values["beta3"] = -1.0
        return values

    def _check_ranges(self, values: _Dict[str, float]) -> None:
        """torch's checks but on beta3, which Prodigy leaves unchecked (__init__ checks it here)."""
        super()._check_ranges({k: v for k, v in values.items() if k != "beta3"})

    def _split_problem(self, group, parts):
        return _d_adaptation_split_problem("Prodigy", group, parts)


class RAdam(Optimizer):
    """torch.optim.RAdam (specs/radam.yaml)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *,
                 decoupled_weight_decay=False, maximize=False, **options):
        super().__init__(params, _builtin("radam"),
                         dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                              decoupled_weight_decay=decoupled_weight_decay, maximize=maximize), **options)


class RMSprop(Optimizer):
    """torch.optim.RMSprop (specs/rmsprop.yaml)."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False, *,
                 maximize=False, **options):
        super().__init__(params, _builtin("rmsprop"),
                         dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                              centered=centered, maximize=maximize), **options)


class Rprop(Optimizer):
    """torch.optim.Rprop (specs/rprop.yaml)."""

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50.0), *, maximize=False, **options):
        super().__init__(params, _builtin("rprop"),
                         dict(lr=lr, etas=etas, step_sizes=step_sizes, maximize=maximize), **options)


class SGD(Optimizer):
    """torch.optim.SGD (specs/sgd.yaml)."""

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, *,
                 maximize=False, **options):
        super().__init__(params, _builtin("sgd"),
                         dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                              nesterov=nesterov, maximize=maximize), **options)


__all__ = ["Optimizer", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamMini", "AdamW", "AdamWScheduleFree", "Adamax",
           "Adan", "AdEMAMix", "ASGD", "CautiousAdamW", "CautiousLion", "DAdaptAdam", "LAMB", "LARS", "Lion", "Muon", "MuonWithAuxAdam", "NAdam",
           "Prodigy", "RAdam", "RMSprop", "Rprop", "SGD"]

"""How torch names hyperparameters, and how specs do: pure functions, no torch needed.

torch.optim passes pairs as tuples (betas=(0.9, 0.999)); specs name each value (beta1, beta2).
Adan and AdEMAMix take three betas (betas=(0.98, 0.92, 0.99): beta1, beta2, beta3); Adafactor two
epsilons (eps=(None, 1e-3): eps1, eps2, where None is a default that depends on the parameters).
Every other name is the same on both sides: the built-in specs take torch's names.
"""

from __future__ import annotations

import math
import numbers
from typing import Iterable, Mapping

# torch's tuple arguments, and the spec hyperparameters they unpack into: the first of the
# choices whose names the spec all has (a spec with beta1 alone keeps beta1).
TUPLES = {
    "betas": (("beta1", "beta2", "beta3"), ("beta1", "beta2")),
    "etas": (("etaminus", "etaplus"),),
    "step_sizes": (("step_size_min", "step_size_max"),),
    "eps": (("eps1", "eps2"),),
}
_COUNTS = {2: "a pair of numbers", 3: "three numbers"}


def tuple_of(key: str, names, tuples: Mapping = TUPLES) -> tuple:
    """The spec names torch's tuple `key` unpacks into for a spec with `names`; () if none."""
    return next((members for members in tuples.get(key, ()) if all(n in names for n in members)), ())


def torch_names(spec_names: Iterable[str], tuples: Mapping = TUPLES) -> list:
    """The spec's hyperparameter names as torch would take them: betas and the like folded into
    tuples (`tuples`: TUPLES, or an optimizer's own, as Prodigy's betas pair beside its beta3)."""
    names = list(spec_names)
    result = []
    for name in names:
        key = next((key for key in tuples if name in tuple_of(key, names, tuples)), None)
        if key is None:
            result.append(name)
        elif key not in result:
            result.append(key)
    return result


def torch_defaults(spec_defaults: Mapping[str, float], types: Mapping[str, str], tuples: Mapping = TUPLES) -> dict:
    """The spec's defaults under torch's names, bools as bools, tuples as tuples."""
    def value(name):
        v = spec_defaults[name]
        return bool(v) if types[name] == "bool" else v

    result = {}
    for key in torch_names(spec_defaults, tuples):
        members = tuple_of(key, spec_defaults, tuples) if key not in spec_defaults else ()
        result[key] = tuple(value(n) for n in members) if members else value(key)
    return result


def spec_values(group: Mapping[str, object], spec_names: Iterable[str], optional: Iterable[str] = (),
                tuples: Mapping = TUPLES) -> dict:
    """A param group's hyperparameters (torch's names) as the spec's, every value a float.

    A spec name in `optional` may be None (Adafactor's eps=(None, 1e-3)): it is then left out,
    for the caller to fill in. Raises ValueError naming a tuple that is not as many numbers as it
    unpacks into, or a value that is not a number."""
    names = list(spec_names)
    optional = set(optional)
    values = {}

    def put(name, v, what):
        if v is None and name in optional:
            return
        values[name] = number(v, what)

    for key in torch_names(names, tuples):
        if key not in group:
            continue
        members = tuple_of(key, names, tuples) if key not in names else ()
        if members:
            given = group[key]
            if not (isinstance(given, (tuple, list)) and len(given) == len(members)):
                raise ValueError(f"{key} must be {_COUNTS[len(members)]}, like ({', '.join(members)}); got {given!r}")
            for name, v in zip(members, given):
                put(name, v, f"{key} ({name})")
        else:
            put(key, group[key], key)
    return values


def number(value: object, what: str) -> float:
    """`value` as a float: a bool, an int, a float, or a tensor of one element (read once)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if hasattr(value, "numel") and hasattr(value, "item") and value.numel() == 1:
        return float(value.item())
    raise ValueError(f"{what} must be a number; got {value!r}")


def check_ranges(values: Mapping[str, float]) -> None:
    """torch.optim's argument checks, with its messages, for the names they apply to."""
    def invalid(what, v):
        raise ValueError(f"Invalid {what}: {v}")

    for name, what in (("lr", "learning rate"), ("eps", "epsilon value"), ("weight_decay", "weight_decay value"),
                       ("momentum", "momentum value"), ("lr_decay", "lr_decay value"), ("rho", "rho value"),
                       ("alpha", "alpha value"), ("initial_accumulator_value", "initial_accumulator_value"),
                       ("max_grad_norm", "max_grad_norm value")):
        if name in values and not values[name] >= 0.0:
            invalid(what, values[name])
    for i, name in enumerate(("beta1", "beta2", "beta3")):
        if name in values and not 0.0 <= values[name] < 1.0:
            invalid(f"beta parameter at index {i}", values[name])
    if "rho" in values and not values["rho"] <= 1.0:
        invalid("rho value", values["rho"])
    if "etaminus" in values and not 0.0 < values["etaminus"] < 1.0 < values.get("etaplus", math.inf):
        raise ValueError(f"Invalid eta values: {values['etaminus']}, {values.get('etaplus')}")
    if values.get("nesterov") and (values.get("momentum", 0) <= 0 or values.get("dampening", 0) != 0):
        raise ValueError("Nesterov momentum requires a momentum and zero dampening")


def check_adafactor(lr: object, beta2_decay: object, eps: object, d: object, weight_decay: object) -> None:
    """torch.optim.Adafactor's argument checks (torch 2.11, _adafactor.py), with its messages:
    Adafactor's conditions and wording are its own, not those of check_ranges. The values are
    printed as given, as torch prints them."""
    if hasattr(lr, "numel") and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not (isinstance(eps, (tuple, list)) and len(eps) == 2):
        raise ValueError(f"eps must be a pair of numbers, like (eps1, eps2), eps1 None or a number; got {eps!r}")
    for value, what in ((lr, "lr"), (beta2_decay, "beta2_decay"), (eps[1], "eps (eps2)"), (d, "d"),
                        (weight_decay, "weight_decay")) + (() if eps[0] is None else ((eps[0], "eps (eps1)"),)):
        number(value, what)
    if not 0.0 <= lr:
        raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
    if not 0.0 >= beta2_decay:
        raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
    if eps[0] is not None and not 0.0 <= eps[0]:
        raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
    if not 0.0 <= eps[1]:
        raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
    if not 1.0 <= d:
        raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")

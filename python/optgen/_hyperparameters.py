"""How torch names hyperparameters, and how specs do: pure functions, no torch needed.

torch.optim passes pairs as tuples (betas=(0.9, 0.999)); specs name each value (beta1, beta2).
Adan and AdEMAMix take three betas (betas=(0.98, 0.92, 0.99): beta1, beta2, beta3).
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
}
_COUNTS = {2: "a pair of numbers", 3: "three numbers"}


def _tuple_of(key: str, names) -> tuple:
    """The spec names torch's tuple `key` unpacks into for a spec with `names`; () if none."""
    return next((members for members in TUPLES.get(key, ()) if all(n in names for n in members)), ())


def torch_names(spec_names: Iterable[str]) -> list:
    """The spec's hyperparameter names as torch would take them: betas and the like folded into tuples."""
    names = list(spec_names)
    result = []
    for name in names:
        key = next((key for key in TUPLES if name in _tuple_of(key, names)), None)
        if key is None:
            result.append(name)
        elif key not in result:
            result.append(key)
    return result


def torch_defaults(spec_defaults: Mapping[str, float], types: Mapping[str, str]) -> dict:
    """The spec's defaults under torch's names, bools as bools, tuples as tuples."""
    def value(name):
        v = spec_defaults[name]
        return bool(v) if types[name] == "bool" else v

    result = {}
    for key in torch_names(spec_defaults):
        members = _tuple_of(key, spec_defaults) if key not in spec_defaults else ()
        result[key] = tuple(value(n) for n in members) if members else value(key)
    return result


def spec_values(group: Mapping[str, object], spec_names: Iterable[str]) -> dict:
    """A param group's hyperparameters (torch's names) as the spec's, every value a float.

    Raises ValueError naming a tuple that is not as many numbers as it unpacks into, or a value
    that is not a number."""
    names = list(spec_names)
    values = {}
    for key in torch_names(names):
        if key not in group:
            continue
        members = _tuple_of(key, names) if key not in names else ()
        if members:
            given = group[key]
            if not (isinstance(given, (tuple, list)) and len(given) == len(members)):
                raise ValueError(f"{key} must be {_COUNTS[len(members)]}, like ({', '.join(members)}); got {given!r}")
            for name, v in zip(members, given):
                values[name] = number(v, f"{key} ({name})")
        else:
            values[key] = number(group[key], key)
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

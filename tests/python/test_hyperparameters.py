"""torch's hyperparameter names against the specs': pure functions (CI runs these)."""

import re

import pytest

from optgen._hyperparameters import check_adafactor, check_ranges, spec_values, torch_defaults, torch_names


def test_pairs_fold_into_torch_tuples_only_when_both_halves_exist():
    assert torch_names(["lr", "beta1", "beta2", "eps"]) == ["lr", "betas", "eps"]
    assert torch_names(["lr", "beta1"]) == ["lr", "beta1"]
    assert torch_names(["etaminus", "etaplus", "step_size_min", "step_size_max"]) == ["etas", "step_sizes"]


def test_three_betas_fold_into_one_tuple():
    # Adan and AdEMAMix: betas=(beta1, beta2, beta3)
    names = ["lr", "beta1", "beta2", "beta3", "alpha"]
    assert torch_names(names) == ["lr", "betas", "alpha"]
    defaults = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "beta3": 0.9999, "alpha": 2.0}
    types = dict.fromkeys(defaults, "float")
    assert torch_defaults(defaults, types) == {"lr": 1e-3, "betas": (0.9, 0.999, 0.9999), "alpha": 2.0}
    assert spec_values({"betas": (0.8, 0.9, 0.99)}, names) == {"beta1": 0.8, "beta2": 0.9, "beta3": 0.99}
    with pytest.raises(ValueError, match=r"betas must be three numbers, like \(beta1, beta2, beta3\)"):
        spec_values({"betas": (0.8, 0.9)}, names)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 2: 1.0"):
        check_ranges({"beta1": 0.9, "beta2": 0.9, "beta3": 1.0})


def test_defaults_under_torch_names():
    defaults = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "amsgrad": 0.0}
    types = {"lr": "float", "beta1": "float", "beta2": "float", "amsgrad": "bool"}
    assert torch_defaults(defaults, types) == {"lr": 1e-3, "betas": (0.9, 0.999), "amsgrad": False}


def test_a_group_translates_to_spec_values():
    names = ["lr", "beta1", "beta2", "amsgrad"]
    group = {"lr": 0.1, "betas": (0.8, 0.99), "amsgrad": True, "params": [], "initial_lr": 0.5}
    assert spec_values(group, names) == {"lr": 0.1, "beta1": 0.8, "beta2": 0.99, "amsgrad": 1.0}
    with pytest.raises(ValueError, match=r"betas must be a pair of numbers"):
        spec_values({"betas": 0.9}, names)
    with pytest.raises(ValueError, match="lr must be a number; got 'fast'"):
        spec_values({"lr": "fast"}, names)


def test_torch_range_checks_and_messages():
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        check_ranges({"lr": -1.0})
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1: 1.0"):
        check_ranges({"beta1": 0.9, "beta2": 1.0})
    with pytest.raises(ValueError, match="Nesterov momentum requires"):
        check_ranges({"nesterov": 1.0, "momentum": 0.0})
    with pytest.raises(ValueError, match="Invalid eta values"):
        check_ranges({"etaminus": 1.5, "etaplus": 1.2})
    check_ranges({"lr": 0.0, "beta1": 0.0, "beta2": 0.999, "nesterov": 1.0, "momentum": 0.9})


ADAFACTOR = ["lr", "beta2_decay", "eps1", "eps2", "d", "weight_decay", "maximize", "max_grad_norm"]


def test_adafactors_eps_pair_unpacks_into_eps1_and_eps2_and_eps1_may_be_none():
    assert torch_names(ADAFACTOR) == ["lr", "beta2_decay", "eps", "d", "weight_decay", "maximize", "max_grad_norm"]
    defaults = dict(zip(ADAFACTOR, (1e-2, -0.8, 2.0 ** -23, 1e-3, 1.0, 0.0, 0.0, 0.0)))
    types = dict.fromkeys(ADAFACTOR, "float") | {"maximize": "bool"}
    assert torch_defaults(defaults, types)["eps"] == (2.0 ** -23, 1e-3)
    group = {"lr": 0.1, "eps": (None, 1e-2), "d": 2}
    assert spec_values(group, ADAFACTOR, optional=("eps1",)) == {"lr": 0.1, "eps2": 1e-2, "d": 2.0}
    assert spec_values({"eps": (1e-30, 1e-2)}, ADAFACTOR, optional=("eps1",)) == {"eps1": 1e-30, "eps2": 1e-2}
    with pytest.raises(ValueError, match=r"eps \(eps1\) must be a number; got None"):
        spec_values(group, ADAFACTOR)  # None only where the caller fills it in
    with pytest.raises(ValueError, match=r"eps \(eps2\) must be a number; got None"):
        spec_values({"eps": (1e-30, None)}, ADAFACTOR, optional=("eps1",))
    with pytest.raises(ValueError, match=r"eps must be a pair of numbers, like \(eps1, eps2\)"):
        spec_values({"eps": 1e-3}, ADAFACTOR, optional=("eps1",))
    # a spec whose eps is one number keeps it
    assert spec_values({"eps": 1e-8}, ["lr", "eps"]) == {"eps": 1e-8}


@pytest.mark.parametrize("arguments,message", [
    (dict(lr=-1.0), "Learning rate should be >= 0 but is: -1.0"),
    (dict(beta2_decay=0.5), "beta2_decay should be <= 0 but is: 0.5"),
    (dict(eps=(-1.0, 1e-3)), "epsilon1 should be >= 0 but is: -1.0"),
    (dict(eps=(None, -1.0)), "epsilon2 should be >= 0 but is: -1.0"),
    (dict(d=0.5), "Clipping threshold d should be >= 1 but is: 0.5"),
    (dict(weight_decay=-0.1), "weight_decay should be >= 0 but is: -0.1"),
    (dict(eps=1e-3), "eps must be a pair of numbers"),
    (dict(lr="fast"), "lr must be a number; got 'fast'"),
])
def test_adafactors_checks_are_torchs(arguments, message):
    given = dict(lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0) | arguments
    with pytest.raises(ValueError, match=re.escape(message)):
        check_adafactor(**given)


def test_adafactors_defaults_and_edges_pass_its_checks():
    check_adafactor(lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0)
    check_adafactor(lr=0.0, beta2_decay=0.0, eps=[0.0, 0.0], d=1.0, weight_decay=0.0)

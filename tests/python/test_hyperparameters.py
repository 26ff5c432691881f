"""torch's hyperparameter names against the specs': pure functions (CI runs these)."""

import pytest

from optgen._hyperparameters import check_ranges, spec_values, torch_defaults, torch_names


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

#!/usr/bin/env python3
"""Record trajectories of published optimizers that torch.optim lacks, from transcriptions of their
authors' code, for optgen's C++ tests.

What it records
---------------
For every optimizer in ``PUBLISHED`` below, this script runs a line-by-line transcription of the
authors' published optimizer class for a fixed number of steps on three parameter tensors of
shapes [1], [5] and [3, 4] (or the entry's own, ``Published.shapes``: Adam-mini's four, named as
its partition reads them), and writes ``<out>/<spec>.json`` in the format of
tests/record_trajectories.py (read by tests/reference_test.cpp), containing, per case (one
combination of hyperparameters):

* ``groups``: the parameter groups (indices of the tensors in the group and *all* of the optgen
  spec's hyperparameters of the group, under optgen's names);
* ``shapes``: the tensor shapes;
* ``params0``: the initial parameter values (flattened, row-major);
* ``grads``: the gradient handed to the optimizer at each step (``p.grad``);
* ``params``: the parameter values after each step;
* ``state``: every per-parameter state buffer the published class keeps, by its name there (the
  spec's states have the same names), after each step; a buffer the published code does not
  allocate in a case (AdEMAMix's ``exp_avg_fast`` when beta1 is 0) is not recorded.

Every file also carries ``source`` (the repository, file and commit transcribed), the numpy
version, the class name and ``published_defaults``: the defaults of the transcribed class's
``__init__`` (read with ``inspect.signature``) for the spec's hyperparameters.

The transcriptions
------------------
Each published optimizer is a class here with the published class's ``__init__`` signature and
``step``, statement by statement, each torch operation written as the numpy operation it computes
(``a.mul_(b).add_(g, alpha=c)`` is ``a *= b; a += c * g``; ``p.addcdiv_(m, d, value=v)`` is
``p += v * (m / d)``), each followed by the published line in a comment where they differ in form.
``Param`` and ``Optimizer`` stand in for ``torch.nn.Parameter`` and ``torch.optim.Optimizer`` (the
param groups filled in from the constructor's defaults, a state dict per parameter). Everything
is float64 on the CPU.

torch is not used: the CPU wheel index was unreachable from the machine these were recorded on,
so the transcriptions are written with numpy (the only dependency besides the standard library).
The update rules are elementwise float64 arithmetic (and per-tensor norms and means) either way:
the unmodified published classes of Adan and AdEMAMix (adan.py with foreach off and on,
ademamix.py), run under torch 2.11 in float64 on the recorded params0 and grads, reproduce every
recorded param and state within 3.1e-16 relative. The other transcriptions have not been run under
torch that way.

Initial values and gradients are standard normal, from ``numpy.random.default_rng`` seeded per
case with ``zlib.crc32("<spec>:<case index>")`` (record_trajectories.py's seeds, numpy's
generator); the output is deterministic for a given numpy version. A case may zero some of them
after they are drawn (the draws, and so every other value, stay as they were), for the edges an
implementation special-cases (a norm of zero, a mask with nothing in it):
``"zero_params0": [tensor, ...]`` starts those tensors' parameters at zero, ``"zero_grads":
[[step, tensor], ...]`` hands those tensors an all-zero gradient at those steps (counted from 1).

Adding an optimizer
-------------------
Transcribe the published class (cite the repository, file and commit above it), then add a
``Published`` entry to ``PUBLISHED``: the spec's hyperparameters in order, how they map to the
class's keywords (tuples split as in the specs: ``betas`` -> ``beta1``, ``beta2``, ``beta3``), the
base hyperparameters, the single-group cases, the two-group case, the state buffers to record and
any keywords the class takes besides the hyperparameters (``fixed``: the implementation transcribed,
where the class has several). A transcription whose class name differs from the published one
gives the published one as ``published_name``.
LAMB (tests/record_lamb.py, APEX's FusedLAMB) predates this script and keeps its own.

How to run
----------
    python3 tests/record_published.py --out tests/data/published [--steps 10] [--only adan]

The current files were recorded with numpy 2.4.6 (``pip install numpy``).
"""

import argparse
import inspect
import json
import math
import os
import sys
import zlib
from collections import defaultdict
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

SHAPES = [[1], [5], [3, 4]]  # as record_trajectories.py


# ---- stand-ins for torch.nn.Parameter and torch.optim.Optimizer -------------------------------


class Param:
    """A parameter: its value (float64, updated in place), its gradient, and (Published.names) its
    name in the model."""

    def __init__(self, data: np.ndarray):
        self.data = data
        self.grad: Optional[np.ndarray] = None
        self.name = ""


class Optimizer:
    """What the transcriptions use of torch.optim.Optimizer: param groups (a list of params, or of
    dicts with 'params' and overrides) filled in from the defaults, and a state dict per param."""

    def __init__(self, params, defaults: Dict):
        self.defaults = defaults
        self.state: Dict[Param, Dict] = defaultdict(dict)
        self.param_groups: List[Dict] = []
        groups = list(params)
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            group = dict(group)
            group["params"] = list(group["params"])
            for key, value in defaults.items():
                group.setdefault(key, value)
            self.param_groups.append(group)


# ---- Adan ---------------------------------------------------------------------------------------
# Transcribed from sail-sg/Adan, adan.py at commit 2c65beaf400775753b155da4082c3819fea689b9 (the
# file as last changed by f0b1b818913a89888d59aeeddb9315bf90a23192, "Handle empty parameter list
# (#38)", 2023-08-16; pip package adan 0.0.2): class Adan (__init__, step) and _single_tensor_adan.
# foreach and fused pick other implementations of the same arithmetic (_multi_tensor_adan, the
# CUDA kernels); the single-tensor one is transcribed.

ADAN_SOURCE = ("sail-sg/Adan adan.py at 2c65beaf400775753b155da4082c3819fea689b9 (class Adan, Adan.step, "
               "_single_tensor_adan), transcribed with numpy")


class Adan(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.98, 0.92, 0.99), eps=1e-8, weight_decay=0.0, max_grad_norm=0.0,
                 no_prox=False, foreach: bool = True, fused: bool = False):
        if not 0.0 <= max_grad_norm:
            raise ValueError('Invalid Max grad norm: {}'.format(max_grad_norm))
        if not 0.0 <= lr:
            raise ValueError('Invalid learning rate: {}'.format(lr))
        if not 0.0 <= eps:
            raise ValueError('Invalid epsilon value: {}'.format(eps))
        for i in range(3):
            if not 0.0 <= betas[i] < 1.0:
                raise ValueError('Invalid beta parameter at index {}: {}'.format(i, betas[i]))
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, max_grad_norm=max_grad_norm,
                        no_prox=no_prox, foreach=foreach, fused=fused)
        super().__init__(params, defaults)

    def step(self):
        if self.defaults['max_grad_norm'] > 0:
            # Not transcribed: Adan's clipping (one global norm over every group, accumulated in
            # torch's default dtype, divided by norm + the last group's eps) is not part of
            # specs/adan.yaml, whose max_grad_norm is the clipping every optgen spec has.
            raise NotImplementedError("Adan's max_grad_norm is not recorded")
        clip_global_grad_norm = 1.0

        for group in self.param_groups:
            params_with_grad = []
            grads = []
            exp_avgs = []
            exp_avg_sqs = []
            exp_avg_diffs = []
            neg_pre_grads = []

            beta1, beta2, beta3 = group['betas']
            if 'step' in group:
                group['step'] += 1
            else:
                group['step'] = 1

            bias_correction1 = 1.0 - beta1**group['step']
            bias_correction2 = 1.0 - beta2**group['step']
            bias_correction3 = 1.0 - beta3**group['step']

            for p in group['params']:
                if p.grad is None:
                    continue
                params_with_grad.append(p)
                grads.append(p.grad)

                state = self.state[p]
                if len(state) == 0:
                    state['exp_avg'] = np.zeros_like(p.data)
                    state['exp_avg_sq'] = np.zeros_like(p.data)
                    state['exp_avg_diff'] = np.zeros_like(p.data)

                if 'neg_pre_grad' not in state or group['step'] == 1:
                    state['neg_pre_grad'] = p.grad.copy() * -clip_global_grad_norm  # p.grad.clone().mul_(-clip)

                exp_avgs.append(state['exp_avg'])
                exp_avg_sqs.append(state['exp_avg_sq'])
                exp_avg_diffs.append(state['exp_avg_diff'])
                neg_pre_grads.append(state['neg_pre_grad'])

            if not params_with_grad:
                continue

            _single_tensor_adan(
                params=[p.data for p in params_with_grad],
                grads=grads,
                exp_avgs=exp_avgs,
                exp_avg_sqs=exp_avg_sqs,
                exp_avg_diffs=exp_avg_diffs,
                neg_pre_grads=neg_pre_grads,
                beta1=beta1,
                beta2=beta2,
                beta3=beta3,
                bias_correction1=bias_correction1,
                bias_correction2=bias_correction2,
                bias_correction3_sqrt=math.sqrt(bias_correction3),
                lr=group['lr'],
                weight_decay=group['weight_decay'],
                eps=group['eps'],
                no_prox=group['no_prox'],
                clip_global_grad_norm=clip_global_grad_norm,
            )


def _single_tensor_adan(params, grads, exp_avgs, exp_avg_sqs, exp_avg_diffs, neg_pre_grads, *, beta1, beta2, beta3,
                        bias_correction1, bias_correction2, bias_correction3_sqrt, lr, weight_decay, eps, no_prox,
                        clip_global_grad_norm):
    for i, param in enumerate(params):
        grad = grads[i]
        exp_avg = exp_avgs[i]
        exp_avg_sq = exp_avg_sqs[i]
        exp_avg_diff = exp_avg_diffs[i]
        neg_grad_or_diff = neg_pre_grads[i]

        grad *= clip_global_grad_norm  # grad.mul_(clip_global_grad_norm)

        # for memory saving, we use `neg_grad_or_diff`
        # to get some temp variable in a inplace way
        neg_grad_or_diff += grad  # neg_grad_or_diff.add_(grad)

        exp_avg *= beta1  # exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)  # m_t
        exp_avg += (1 - beta1) * grad
        exp_avg_diff *= beta2  # exp_avg_diff.mul_(beta2).add_(neg_grad_or_diff, alpha=1 - beta2)  # diff_t
        exp_avg_diff += (1 - beta2) * neg_grad_or_diff

        neg_grad_or_diff *= beta2  # neg_grad_or_diff.mul_(beta2).add_(grad)
        neg_grad_or_diff += grad
        exp_avg_sq *= beta3  # exp_avg_sq.mul_(beta3).addcmul_(neg_grad_or_diff, neg_grad_or_diff, value=1 - beta3)
        exp_avg_sq += (1 - beta3) * neg_grad_or_diff * neg_grad_or_diff  # n_t

        denom = np.sqrt(exp_avg_sq) / bias_correction3_sqrt + eps  # ((exp_avg_sq).sqrt() / ...).add_(eps)
        step_size_diff = lr * beta2 / bias_correction2
        step_size = lr / bias_correction1

        if no_prox:
            param *= 1 - lr * weight_decay  # param.mul_(1 - lr * weight_decay)
            param += -step_size * (exp_avg / denom)  # param.addcdiv_(exp_avg, denom, value=-step_size)
            param += -step_size_diff * (exp_avg_diff / denom)  # param.addcdiv_(exp_avg_diff, denom, value=...)
        else:
            param += -step_size * (exp_avg / denom)  # param.addcdiv_(exp_avg, denom, value=-step_size)
            param += -step_size_diff * (exp_avg_diff / denom)  # param.addcdiv_(exp_avg_diff, denom, value=...)
            param /= 1 + lr * weight_decay  # param.div_(1 + lr * weight_decay)

        neg_grad_or_diff[...] = -1.0 * grad  # neg_grad_or_diff.zero_().add_(grad, alpha=-1.0)


# ---- AdEMAMix -----------------------------------------------------------------------------------
# Transcribed from apple/ml-ademamix, pytorch/ademamix.py at commit
# c3d73c09f1287e5c33b95189bb0aa7de0a5a7667 (the file unchanged since the first commit,
# e7327151bbf2c812ae2c080de5491c685b6eb509, 2024-09-25): linear_warmup_scheduler,
# linear_hl_warmup_scheduler and class AdEMAMix (__init__, step). (The repository's
# optax/ademamix.py differs: alpha defaults to 5, its schedules take the step before the
# increment and f(beta) has no + 1e-8; the spec follows the PyTorch class.)

ADEMAMIX_SOURCE = ("apple/ml-ademamix pytorch/ademamix.py at c3d73c09f1287e5c33b95189bb0aa7de0a5a7667 "
                   "(class AdEMAMix, linear_warmup_scheduler, linear_hl_warmup_scheduler), transcribed with numpy")


def linear_warmup_scheduler(step, alpha_end, alpha_start=0, warmup=1):
    if step < warmup:
        a = step / float(warmup)
        return (1.0 - a) * alpha_start + a * alpha_end
    return alpha_end


def linear_hl_warmup_scheduler(step, beta_end, beta_start=0, warmup=1):

    def f(beta, eps=1e-8):
        return math.log(0.5) / math.log(beta + eps) - 1

    def f_inv(t):
        return math.pow(0.5, 1 / (t + 1))

    if step < warmup:
        a = step / float(warmup)
        return f_inv((1.0 - a) * f(beta_start) + a * f(beta_end))
    return beta_end


class AdEMAMix(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999, 0.9999), alpha=2.0, beta3_warmup=None, alpha_warmup=None,
                 eps=1e-8, weight_decay=0):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        for i in range(3):
            if not 0.0 <= betas[i] < 1.0:
                raise ValueError("Invalid beta parameter at index {}: {}".format(i, betas[i]))
        if not 0.0 <= weight_decay:
            raise ValueError("Invalid weight_decay value: {}".format(weight_decay))
        if not 0.0 <= alpha:
            raise ValueError("Invalid alpha value: {}".format(alpha))
        defaults = dict(lr=lr, betas=betas, eps=eps, alpha=alpha, beta3_warmup=beta3_warmup,
                        alpha_warmup=alpha_warmup, weight_decay=weight_decay)
        super().__init__(params, defaults)

    def step(self):
        for group in self.param_groups:

            lr = group["lr"]
            lmbda = group["weight_decay"]
            eps = group["eps"]
            beta1, beta2, beta3_final = group["betas"]
            beta3_warmup = group["beta3_warmup"]
            alpha_final = group["alpha"]
            alpha_warmup = group["alpha_warmup"]

            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad

                state = self.state[p]

                # State initialization
                if len(state) == 0:
                    state['step'] = 0
                    # Exponential moving average of gradient values
                    if beta1 != 0.0:  # save memory in case beta1 is 0.0
                        state['exp_avg_fast'] = np.zeros_like(p.data)
                    else:
                        state['exp_avg_fast'] = None
                    state['exp_avg_slow'] = np.zeros_like(p.data)
                    # Exponential moving average of squared gradient values
                    state['exp_avg_sq'] = np.zeros_like(p.data)

                exp_avg_fast, exp_avg_slow, exp_avg_sq = state['exp_avg_fast'], state['exp_avg_slow'], state['exp_avg_sq']

                state['step'] += 1
                bias_correction1 = 1 - beta1 ** state['step']
                bias_correction2 = 1 - beta2 ** state['step']

                # Compute the effective alpha and beta3 in case warmup is used
                if alpha_warmup is not None:
                    alpha = linear_warmup_scheduler(state["step"], alpha_end=alpha_final, alpha_start=0,
                                                    warmup=alpha_warmup)
                else:
                    alpha = alpha_final

                if beta3_warmup is not None:
                    beta3 = linear_hl_warmup_scheduler(state["step"], beta_end=beta3_final, beta_start=beta1,
                                                       warmup=beta3_warmup)
                else:
                    beta3 = beta3_final

                # Decay the first and second moment running average coefficient
                if beta1 != 0.0:
                    exp_avg_fast *= beta1  # exp_avg_fast.mul_(beta1).add_(grad, alpha=1 - beta1)
                    exp_avg_fast += (1 - beta1) * grad
                else:
                    exp_avg_fast = grad
                exp_avg_slow *= beta3  # exp_avg_slow.mul_(beta3).add_(grad, alpha=1 - beta3)
                exp_avg_slow += (1 - beta3) * grad
                exp_avg_sq *= beta2  # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                exp_avg_sq += (1 - beta2) * grad * grad

                denom = np.sqrt(exp_avg_sq) / math.sqrt(bias_correction2) + eps  # (...).add_(eps)

                update = (exp_avg_fast / bias_correction1 + alpha * exp_avg_slow) / denom

                # decay
                update += lmbda * p.data  # update.add_(p, alpha=lmbda)

                p.data += -lr * update  # p.add_(-lr * update)


# ---- Cautious AdamW -----------------------------------------------------------------------------
# Transcribed from kyleliang919/C-Optim, c_adamw.py at commit 2c0517c4db2e50b56d389ba4803eab1f4b3b8ae3:
# class AdamW (__init__, and step with foreach=False: its loop over the parameters, as of
# ccadd1847bf1f35ccb3ab296d71a117167bc2e99, 2025-01-14, when it was the class's only step). The
# DTensor branch of the mask is not transcribed (it computes the same mask on the full tensor), nor
# the deprecation warning. foreach=True, the default since c5550a7d, runs another implementation
# (c_adamw_update_foreach_async: bias correction whatever correct_bias says, eps added after it,
# states named momentum and variance): the recording passes foreach=False.

CAUTIOUS_ADAMW_SOURCE = ("kyleliang919/C-Optim c_adamw.py at 2c0517c4db2e50b56d389ba4803eab1f4b3b8ae3 (class AdamW, "
                         "AdamW.step with foreach=False), transcribed with numpy")


class CautiousAdamW(Optimizer):
    published_name = "AdamW"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, correct_bias=True,
                 no_deprecation_warning=False, foreach=True, fused=False):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr} - should be >= 0.0")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter: {betas[0]} - should be in [0.0, 1.0)")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter: {betas[1]} - should be in [0.0, 1.0)")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps} - should be >= 0.0")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "correct_bias": correct_bias}
        super().__init__(params, defaults)
        self.init_lr = lr
        self._foreach = foreach

    def step(self):
        if self._foreach:
            raise NotImplementedError("the foreach=True step (c_adamw_update_foreach_async) is not transcribed")

        for group in self.param_groups:
            for i, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if "step" not in state:
                    state["step"] = 0
                # State initialization
                if "exp_avg" not in state:
                    state["exp_avg"] = np.zeros_like(grad)
                    state["exp_avg_sq"] = np.zeros_like(grad)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                beta1, beta2 = group["betas"]
                state["step"] += 1
                # apply weight decay
                if group["weight_decay"] > 0.0:
                    p.data += (-group["lr"] * group["weight_decay"]) * p.data  # p.add_(p, alpha=(-lr * wd))
                exp_avg *= beta1  # exp_avg.mul_(beta1).add_(grad, alpha=(1.0 - beta1))
                exp_avg += (1.0 - beta1) * grad
                exp_avg_sq *= beta2  # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
                exp_avg_sq += (1.0 - beta2) * (grad * grad)
                denom = np.sqrt(exp_avg_sq) + group["eps"]  # exp_avg_sq.sqrt().add_(group["eps"])
                step_size = group["lr"]
                if group["correct_bias"]:  # No bias correction for Bert
                    bias_correction1 = 1.0 - beta1 ** state["step"]
                    bias_correction2 = 1.0 - beta2 ** state["step"]
                    step_size = step_size * math.sqrt(bias_correction2) / bias_correction1
                # compute norm gradient
                mask = (exp_avg * grad > 0).astype(grad.dtype)  # (exp_avg * grad > 0).to(grad.dtype)
                mask /= max(mask.mean(), 1e-3)  # mask.div_(mask.mean().clamp_(min=1e-3))
                norm_grad = (exp_avg * mask) / denom
                p.data += -step_size * norm_grad  # p.add_(norm_grad, alpha=-step_size)


# ---- Cautious Lion ------------------------------------------------------------------------------
# Transcribed from kyleliang919/C-Optim, c_lion.py at commit 2c0517c4db2e50b56d389ba4803eab1f4b3b8ae3
# (the file as last changed by 4828df503074580e0530b79a63c2f0b11b9c11af, 2025-03-30): update_fn and
# class Lion (__init__, step).

CAUTIOUS_LION_SOURCE = ("kyleliang919/C-Optim c_lion.py at 2c0517c4db2e50b56d389ba4803eab1f4b3b8ae3 (class Lion, "
                        "update_fn), transcribed with numpy")


def cautious_lion_update_fn(p, grad, exp_avg, lr, wd, beta1, beta2):
    # stepweight decay

    p.data *= 1 - lr * wd  # p.data.mul_(1 - lr * wd)

    # weight update
    update = np.sign(exp_avg * beta1 + (1 - beta1) * grad)  # exp_avg.clone().mul_(beta1).add(grad, alpha=...).sign_()
    mask = (update * grad > 0).astype(grad.dtype)  # (update * grad > 0).to(grad.dtype)
    mask = mask * (mask.size / (mask.sum() + 1))  # mask * (mask.numel() / (mask.sum() + 1))
    p.data += -lr * (update * mask)  # p.add_(update * mask, alpha=-lr)

    # decay the momentum running average coefficient

    exp_avg *= beta2  # exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)
    exp_avg += (1 - beta2) * grad


class CautiousLion(Optimizer):
    published_name = "Lion"

    def __init__(self, params, lr: float = 1e-4, betas: Tuple[float, float] = (0.95, 0.98), weight_decay: float = 0.0):
        assert lr > 0.
        assert all([0. <= beta <= 1. for beta in betas])

        defaults = dict(lr=lr, betas=betas, weight_decay=weight_decay)

        super().__init__(params, defaults)

        self.update_fn = cautious_lion_update_fn

    def step(self):
        for group in self.param_groups:
            for p in filter(lambda p: p.grad is not None, group['params']):

                grad, lr, wd, beta1, beta2, state = p.grad, group['lr'], group['weight_decay'], *group['betas'], \
                    self.state[p]

                # init state - exponential moving average of gradient values

                if len(state) == 0:
                    state['exp_avg'] = np.zeros_like(p.data)

                exp_avg = state['exp_avg']

                self.update_fn(p, grad, exp_avg, lr, wd, beta1, beta2)


# ---- LARS ---------------------------------------------------------------------------------------
# Transcribed from huggingface/pytorch-image-models, timm/optim/lars.py at commit
# aa4b5850c1543fa488abf260f18390eda46cf85d (the file as last changed by
# 9d8ccd2ba73b82aaf1537ed2a21e839cb262e1fa, 2024-11-07): class Lars (__init__, step). Lars modifies
# p.grad in place (grad.add_, grad.mul_), so its grad is a copy of the recorded gradient.

LARS_SOURCE = ("huggingface/pytorch-image-models timm/optim/lars.py at aa4b5850c1543fa488abf260f18390eda46cf85d "
               "(class Lars), transcribed with numpy")


class Lars(Optimizer):
    def __init__(self, params, lr=1.0, momentum=0, dampening=0, weight_decay=0, nesterov=False, trust_coeff=0.001,
                 eps=1e-8, trust_clip=False, always_adapt=False):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                        trust_coeff=trust_coeff, eps=eps, trust_clip=trust_clip, always_adapt=always_adapt)
        super().__init__(params, defaults)

    def step(self):
        for group in self.param_groups:
            weight_decay = group['weight_decay']
            momentum = group['momentum']
            dampening = group['dampening']
            nesterov = group['nesterov']
            trust_coeff = group['trust_coeff']
            eps = group['eps']

            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad

                # apply LARS LR adaptation, LARC clipping, weight decay
                # ref: https://github.com/NVIDIA/apex/blob/master/apex/parallel/LARC.py
                if weight_decay != 0 or group['always_adapt']:
                    w_norm = np.linalg.norm(p.data.reshape(-1))  # p.norm(2.0)
                    g_norm = np.linalg.norm(grad.reshape(-1))  # grad.norm(2.0)
                    trust_ratio = trust_coeff * w_norm / (g_norm + w_norm * weight_decay + eps)
                    # FIXME nested where required since logical and/or not working in PT XLA
                    # Set the ratio to 1.0 (no change) if either weight norm or grad norm is zero
                    trust_ratio = np.where(  # torch.where(
                        w_norm > 0,
                        np.where(g_norm > 0, trust_ratio, 1.0),
                        1.0,
                    )
                    if group['trust_clip']:
                        trust_ratio = np.minimum(trust_ratio / group['lr'], 1.0)  # torch.clamp(..., max=1.0)
                    grad += weight_decay * p.data  # grad.add_(p, alpha=weight_decay)
                    grad *= trust_ratio  # grad.mul_(trust_ratio)

                # apply SGD update https://github.com/pytorch/pytorch/blob/1.7/torch/optim/sgd.py#L100
                if momentum != 0:
                    param_state = self.state[p]
                    if 'momentum_buffer' not in param_state:
                        buf = param_state['momentum_buffer'] = grad.copy()  # torch.clone(grad).detach()
                    else:
                        buf = param_state['momentum_buffer']
                        buf *= momentum  # buf.mul_(momentum).add_(grad, alpha=1. - dampening)
                        buf += (1. - dampening) * grad
                    if nesterov:
                        grad = grad + momentum * buf  # grad.add(buf, alpha=momentum)
                    else:
                        grad = buf

                p.data += -group['lr'] * grad  # p.add_(grad, alpha=-group['lr'])


# ---- DAdaptAdam ---------------------------------------------------------------------------------
# Transcribed from dadaptation 3.2 (PyPI, the release of facebookresearch/dadaptation),
# dadaptation/dadapt_adam.py: class DAdaptAdam (__init__, step), with fsdp_in_use False (one
# process) and every group's layer_scale 1 (the defaults' value; no constructor argument sets it).
# DAdaptAdam modifies p.grad in place (coupled weight decay), so its grad is a copy of the recorded
# gradient. Its D and numerator_weighted are shared by every param group, as optgen's (scope:
# optimizer); the two-group case differs in per-group values only. log_every only prints, and is
# left out.

DADAPT_ADAM_SOURCE = ("dadaptation 3.2 (PyPI; facebookresearch/dadaptation) dadaptation/dadapt_adam.py "
                      "(class DAdaptAdam), transcribed with numpy")


class DAdaptAdam(Optimizer):
    def __init__(self, params, lr=1.0, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, log_every=0, decouple=False,
                 use_bias_correction=False, d0=1e-6, growth_rate=float('inf'), fsdp_in_use=False):
        if not 0.0 < d0:
            raise ValueError("Invalid d0 value: {}".format(d0))
        if not 0.0 < lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 < eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, d=d0, k=0, layer_scale=1.0,
                        numerator_weighted=0.0, log_every=log_every, growth_rate=growth_rate,
                        use_bias_correction=use_bias_correction, decouple=decouple, fsdp_in_use=fsdp_in_use)
        self.d0 = d0
        super().__init__(params, defaults)

    def step(self):
        sk_l1 = 0.0

        group = self.param_groups[0]
        use_bias_correction = group['use_bias_correction']
        numerator_weighted = group['numerator_weighted']
        beta1, beta2 = group['betas']
        k = group['k']

        d = group['d']
        lr = max(group['lr'] for group in self.param_groups)

        if use_bias_correction:
            bias_correction = ((1 - beta2**(k + 1))**0.5) / (1 - beta1**(k + 1))
        else:
            bias_correction = 1

        dlr = d * lr * bias_correction

        growth_rate = group['growth_rate']
        decouple = group['decouple']

        sqrt_beta2 = beta2**(0.5)

        numerator_acum = 0.0

        for group in self.param_groups:
            decay = group['weight_decay']
            k = group['k']
            eps = group['eps']
            group_lr = group['lr']
            r = group['layer_scale']

            if group_lr not in [lr, 0.0]:
                raise RuntimeError("Setting different lr values in different parameter groups is only supported "
                                   "for values of 0.")

            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad

                # Apply weight decay (coupled variant)
                if decay != 0 and not decouple:
                    grad += decay * p.data  # grad.add_(p.data, alpha=decay)

                state = self.state[p]

                # State initialization
                if 'step' not in state:
                    state['step'] = 0
                    state['s'] = np.zeros_like(p.data)
                    # Exponential moving average of gradient values
                    state['exp_avg'] = np.zeros_like(p.data)
                    # Exponential moving average of squared gradient values
                    state['exp_avg_sq'] = np.zeros_like(p.data)

                exp_avg, exp_avg_sq = state['exp_avg'], state['exp_avg_sq']

                s = state['s']

                if group_lr > 0.0:
                    denom = np.sqrt(exp_avg_sq) + eps  # exp_avg_sq.sqrt().add_(eps)
                    # torch.dot(grad.flatten(), s.div(denom).flatten()).item()
                    numerator_acum += r * dlr * float(np.dot(grad.reshape(-1), (s / denom).reshape(-1)))

                    # Adam EMA updates
                    exp_avg *= beta1  # exp_avg.mul_(beta1).add_(grad, alpha=r*dlr*(1-beta1))
                    exp_avg += r * dlr * (1 - beta1) * grad
                    exp_avg_sq *= beta2  # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
                    exp_avg_sq += (1 - beta2) * (grad * grad)

                    s *= sqrt_beta2  # s.mul_(sqrt_beta2).add_(grad, alpha=dlr*(1-sqrt_beta2))
                    s += dlr * (1 - sqrt_beta2) * grad
                    sk_l1 += r * float(np.abs(s).sum())  # r * s.abs().sum().item()

        numerator_weighted = sqrt_beta2 * numerator_weighted + (1 - sqrt_beta2) * numerator_acum
        d_hat = d

        # if we have not done any progres, return
        # if we have any gradients available, will have sk_l1 > 0 (unless \|g\|=0)
        if sk_l1 == 0:
            return

        if lr > 0.0:
            global_numerator_weighted = numerator_weighted
            global_sk_l1 = sk_l1

            d_hat = global_numerator_weighted / ((1 - sqrt_beta2) * global_sk_l1)
            d = max(d, min(d_hat, d * growth_rate))

        for group in self.param_groups:
            group['numerator_weighted'] = numerator_weighted
            group['d'] = d

            decay = group['weight_decay']
            k = group['k']
            eps = group['eps']

            for p in group['params']:
                if p.grad is None:
                    continue

                state = self.state[p]

                exp_avg, exp_avg_sq = state['exp_avg'], state['exp_avg_sq']

                state['step'] += 1

                denom = np.sqrt(exp_avg_sq) + eps  # exp_avg_sq.sqrt().add_(eps)

                # Apply weight decay (decoupled variant)
                if decay != 0 and decouple:
                    p.data += (-decay * dlr) * p.data  # p.data.add_(p.data, alpha=-decay * dlr)

                # Take step
                p.data += -1 * (exp_avg / denom)  # p.data.addcdiv_(exp_avg, denom, value=-1)

            group['k'] = k + 1


# ---- Prodigy ------------------------------------------------------------------------------------
# Transcribed from prodigyopt 1.1.2 (PyPI, the release of konstmish/prodigy), prodigyopt/prodigy.py:
# class Prodigy (__init__, step), with slice_p=1 (every element in the D estimate; larger values
# approximate it) and fsdp_in_use False (one process). Prodigy modifies p.grad in place (coupled
# weight decay), so its grad is a copy of the recorded gradient. Its D, d_max and d_numerator are
# shared by every param group (and betas, beta3, decouple read from the first), as optgen's
# (scope: optimizer); the two-group case differs in per-group values only.

PRODIGY_SOURCE = ("prodigyopt 1.1.2 (PyPI; konstmish/prodigy) prodigyopt/prodigy.py (class Prodigy, slice_p=1), "
                  "transcribed with numpy")


class Prodigy(Optimizer):
    def __init__(self, params, lr=1.0, betas=(0.9, 0.999), beta3=None, eps=1e-8, weight_decay=0, decouple=True,
                 use_bias_correction=False, safeguard_warmup=False, d0=1e-6, d_coef=1.0, growth_rate=float('inf'),
                 fsdp_in_use=False, slice_p=1):
        if not 0.0 < d0:
            raise ValueError("Invalid d0 value: {}".format(d0))
        if not 0.0 < lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 < eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))
        defaults = dict(lr=lr, betas=betas, beta3=beta3, eps=eps, weight_decay=weight_decay, d=d0, d0=d0, d_max=d0,
                        d_numerator=0.0, d_coef=d_coef, k=0, growth_rate=growth_rate,
                        use_bias_correction=use_bias_correction, decouple=decouple,
                        safeguard_warmup=safeguard_warmup, fsdp_in_use=fsdp_in_use, slice_p=slice_p)
        self.d0 = d0
        super().__init__(params, defaults)

    def step(self):
        d_denom = 0.0

        group = self.param_groups[0]
        use_bias_correction = group['use_bias_correction']
        beta1, beta2 = group['betas']
        beta3 = group['beta3']
        if beta3 is None:
            beta3 = math.sqrt(beta2)
        k = group['k']

        d = group['d']
        d_max = group['d_max']
        d_coef = group['d_coef']
        lr = max(group['lr'] for group in self.param_groups)

        if use_bias_correction:
            bias_correction = ((1 - beta2**(k + 1))**0.5) / (1 - beta1**(k + 1))
        else:
            bias_correction = 1

        dlr = d * lr * bias_correction

        growth_rate = group['growth_rate']
        decouple = group['decouple']

        d_numerator = group['d_numerator']
        d_numerator *= beta3
        delta_numerator = 0.0

        for group in self.param_groups:
            decay = group['weight_decay']
            group_lr = group['lr']
            d0 = group['d0']
            safeguard_warmup = group['safeguard_warmup']
            slice_p = group['slice_p']

            if group_lr not in [lr, 0.0]:
                raise RuntimeError("Setting different lr values in different parameter groups is only supported "
                                   "for values of 0")

            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad

                # Apply weight decay (coupled variant)
                if decay != 0 and not decouple:
                    grad += decay * p.data  # grad.add_(p.data, alpha=decay)

                state = self.state[p]

                # State initialization
                if 'step' not in state:
                    state['step'] = 0
                    state['s'] = np.zeros_like(p.data.reshape(-1)[::slice_p])
                    if p.data.any():
                        state['p0'] = p.data.reshape(-1)[::slice_p].copy()
                    else:
                        # All values are zero, so save VRAM with a zero-tensor
                        state['p0'] = np.zeros(())  # torch.tensor(0, device=p.device, dtype=p.dtype)
                    # Exponential moving average of gradient values
                    if beta1 > 0:
                        state['exp_avg'] = np.zeros_like(p.data)
                    # Exponential moving average of squared gradient values
                    state['exp_avg_sq'] = np.zeros_like(p.data)

                exp_avg_sq = state['exp_avg_sq']

                s = state['s']
                p0 = state['p0']

                if group_lr > 0.0:
                    # we use d / d0 instead of just d to avoid getting values that are too small
                    sliced_grad = grad.reshape(-1)[::slice_p]
                    # torch.dot(sliced_grad, p0.data - p.data.flatten()[::slice_p]).item()
                    delta_numerator += (d / d0) * dlr * float(np.dot(sliced_grad, p0 - p.data.reshape(-1)[::slice_p]))

                    # Adam EMA updates
                    if beta1 > 0:
                        exp_avg = state['exp_avg']
                        exp_avg *= beta1  # exp_avg.mul_(beta1).add_(grad, alpha=d * (1-beta1))
                        exp_avg += d * (1 - beta1) * grad
                    exp_avg_sq *= beta2  # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=d * d * (1-beta2))
                    exp_avg_sq += d * d * (1 - beta2) * (grad * grad)

                    if safeguard_warmup:
                        s *= beta3  # s.mul_(beta3).add_(sliced_grad, alpha=((d / d0) * d))
                        s += ((d / d0) * d) * sliced_grad
                    else:
                        s *= beta3  # s.mul_(beta3).add_(sliced_grad, alpha=((d / d0) * dlr))
                        s += ((d / d0) * dlr) * sliced_grad
                    d_denom += float(np.abs(s).sum())  # s.abs().sum().item()

        d_hat = d

        # if we have not done any progres, return
        # if we have any gradients available, will have d_denom > 0 (unless \|g\|=0)
        if d_denom == 0:
            return

        if lr > 0.0:
            global_d_numerator = d_numerator + delta_numerator
            global_d_denom = d_denom

            d_hat = d_coef * global_d_numerator / global_d_denom
            if d == group['d0']:
                d = max(d, d_hat)
            d_max = max(d_max, d_hat)
            d = min(d_max, d * growth_rate)

        for group in self.param_groups:
            group['d_numerator'] = global_d_numerator
            group['d_denom'] = global_d_denom
            group['d'] = d
            group['d_max'] = d_max
            group['d_hat'] = d_hat

            decay = group['weight_decay']
            k = group['k']
            eps = group['eps']

            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad

                state = self.state[p]

                exp_avg_sq = state['exp_avg_sq']

                state['step'] += 1

                denom = np.sqrt(exp_avg_sq) + d * eps  # exp_avg_sq.sqrt().add_(d * eps)

                # Apply weight decay (decoupled variant)
                if decay != 0 and decouple:
                    p.data += (-decay * dlr) * p.data  # p.data.add_(p.data, alpha=-decay * dlr)

                # Take step
                if beta1 > 0:
                    exp_avg = state['exp_avg']
                    p.data += -dlr * (exp_avg / denom)  # p.data.addcdiv_(exp_avg, denom, value=-dlr)
                else:
                    p.data += (-dlr * d) * (grad / denom)  # p.data.addcdiv_(grad, denom, value=-dlr * d)

            group['k'] = k + 1


# ---- Adam-mini -----------------------------------------------------------------------------------
# Transcribed from adam-mini 1.1.1 (PyPI; zyushun/Adam-mini), adam_mini/adam_mini.py: class
# Adam_mini (__init__, step). Adam_mini takes model.named_parameters() and makes a param group of
# each parameter, named by it (weight_decay 0 for names holding "norm", "ln" or "bias"); here the
# parameters come in the harness's groups, each Param named by Published.names, and the groups
# are checked to hold the weight decay the name rule gives. world_size is 1 (one process: Adam_mini
# reads torch.cuda.device_count() and all-gathers a norm's numel when it is more). The embedding,
# output, value, projection and MLP rules are one rule in step (a mean over each row).

ADAM_MINI_SOURCE = ("adam-mini 1.1.1 (PyPI; zyushun/Adam-mini) adam_mini/adam_mini.py (class Adam_mini, "
                    "__init__ and step), transcribed with numpy")


class AdamMini(Optimizer):
    published_name = "Adam_mini"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *, dim=2048, n_heads=32,
                 n_kv_heads=None):
        self.dim = dim
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads if n_kv_heads is not None else n_heads
        self.world_size = 1
        self.head_numel = self.dim * self.dim // self.n_heads
        self.embd_names = {"embed", "embd", "wte"}
        self.output_names = {"lm_head", "output", "final_layer"}
        self.wqk_names = {"k_proj", "q_proj", "wq", "wk", "query", "key"}
        self.wv_names = {"v_proj", "wv", "value"}
        self.attn_proj_names = {"o_proj", "wo", "attn.proj"}
        self.mlp_names = {"feed_forward", "linear", "mlp"}
        self.adam_block_names = {"bias"}
        groups = []
        for group in params:
            for param in group["params"]:
                name = param.name.lower()
                decay = 0.0 if "norm" in name or "ln" in name or "bias" in name else weight_decay
                if group.get("weight_decay", weight_decay) != decay:
                    raise ValueError(f"{name}: the harness's group has weight_decay {group['weight_decay']}, "
                                     f"Adam_mini's rule {decay}")
                groups.append({"name": name, "params": [param], "weight_decay": decay})
        defaults = dict(lr=lr, beta1=betas[0], beta2=betas[1], eps=eps)
        super().__init__(groups, defaults)

    def _adam_step(self, p, group, beta1, beta2, lr, eps):  # bias terms
        state = self.state[p]
        if len(state) == 0:
            state["m"] = np.zeros_like(p.data)
            state["step"] = 0
            state["v"] = np.zeros_like(p.data)
        grad = p.grad
        state["v"] *= beta2  # state["v"].mul_(beta2).addcmul_(grad, grad.conj(), value=1 - beta2)
        state["v"] += (1 - beta2) * (grad * grad)
        state["step"] += 1
        if group["weight_decay"] > 0.0:
            p.data *= 1 - lr * group["weight_decay"]
        state["m"] += (1 - beta1) * (grad - state["m"])  # state["m"].lerp_(grad, 1 - beta1)
        bias_correction_1 = 1 - beta1 ** state["step"]
        bias_correction_2 = 1 - beta2 ** state["step"]
        bias_correction_2_sqrt = math.sqrt(bias_correction_2)
        h = np.sqrt(state["v"]) / bias_correction_2_sqrt + eps  # (state["v"].sqrt() / ...).add_(eps)
        stepsize = lr / bias_correction_1
        p.data += -stepsize * (state["m"] / h)  # p.addcdiv_(state["m"], h, value=-stepsize)

    def _rows_step(self, p, group, beta1, beta2, lr, eps, rows):  # a second moment per row of `rows` rows
        state = self.state[p]
        if len(state) == 0:
            state["m"] = np.zeros_like(p.data).reshape(rows, -1)
            state["step"] = 0
            state["vmean"] = np.zeros((rows, 1))
        grad = p.grad.reshape(rows, -1)
        tmp_lr = np.mean(grad * grad, axis=1, keepdims=True)  # torch.mean(grad * grad, dim=1, keepdim=True)
        state["vmean"] *= beta2  # state["vmean"].mul_(beta2).add_(tmp_lr, alpha=1 - beta2)
        state["vmean"] += (1 - beta2) * tmp_lr
        state["step"] += 1
        if group["weight_decay"] > 0.0:
            p.data *= 1 - lr * group["weight_decay"]
        state["m"] += (1 - beta1) * (grad - state["m"])
        bias_correction_1 = 1 - beta1 ** state["step"]
        bias_correction_2 = 1 - beta2 ** state["step"]
        bias_correction_2_sqrt = math.sqrt(bias_correction_2)
        h = np.sqrt(state["vmean"]) / bias_correction_2_sqrt + eps
        stepsize = ((1 / bias_correction_1) / h).reshape(rows, 1)
        update = (state["m"] * stepsize).reshape(p.data.shape)
        update *= lr  # update.mul_(lr)
        p.data += -update  # p.add_(-update)

    def _block_step(self, p, group, beta1, beta2, lr, eps):  # other blocks (norms): one for the tensor
        state = self.state[p]
        if len(state) == 0:
            state["m"] = np.zeros_like(p.data)
            state["step"] = 0
            state["reduced"] = False
            state["vmean"] = np.zeros(())
            state["block_numel"] = float(p.data.size)
        grad = p.grad
        tmp_lr = float(np.sum(grad * grad)) / state["block_numel"]
        if group["weight_decay"] > 0.0:
            p.data *= 1 - lr * group["weight_decay"]
        state["step"] += 1
        state["m"] += (1 - beta1) * (grad - state["m"])
        bias_correction_1 = 1 - beta1 ** state["step"]
        bias_correction_2 = 1 - beta2 ** state["step"]
        bias_correction_2_sqrt = math.sqrt(bias_correction_2)
        state["vmean"] = beta2 * state["vmean"] + (1 - beta2) * tmp_lr
        h = np.sqrt(state["vmean"]) / bias_correction_2_sqrt + eps
        stepsize = (1 / bias_correction_1) / h
        update = state["m"] * stepsize
        update *= lr
        p.data += -update

    def step(self):
        for group in self.param_groups:
            beta1, beta2, lr, name, eps = group["beta1"], group["beta2"], group["lr"], group["name"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if any(n in name for n in self.adam_block_names):
                    self._adam_step(p, group, beta1, beta2, lr, eps)
                elif any(n in name for n in self.wqk_names):
                    self._rows_step(p, group, beta1, beta2, lr, eps, p.data.size // self.head_numel)
                elif any(n in name for names in (self.embd_names, self.output_names, self.wv_names, self.mlp_names,
                                                 self.attn_proj_names) for n in names):
                    self._rows_step(p, group, beta1, beta2, lr, eps, p.data.shape[0])
                else:
                    self._block_step(p, group, beta1, beta2, lr, eps)


# ---- the optimizers recorded --------------------------------------------------------------------


# ---- AdamWScheduleFree ---------------------------------------------------------------------------
# Transcribed from facebookresearch/schedule_free, schedulefree/adamw_schedulefree.py at commit
# 70785b53e778d0e872c0bbb75ff4ee54ee10c291 with inner_momentum=0, its default: the arithmetic of
# PyPI schedulefree 1.4.1 (c752e61; the later commit 43e5c2d only added inner_momentum): class
# AdamWScheduleFree (__init__, eval, train, step with foreach=False; foreach=True runs the same
# operations on lists). The class divides p.grad in place by the denominator; here the gradient
# is a copy, as optgen leaves it unchanged.

SCHEDULE_FREE_SOURCE = ("facebookresearch/schedule_free schedulefree/adamw_schedulefree.py at "
                        "70785b53e778d0e872c0bbb75ff4ee54ee10c291 (class AdamWScheduleFree: __init__, eval, train, "
                        "step with foreach=False; inner_momentum=0, as schedulefree 1.4.1), transcribed with numpy")


def lerp_(start, end, weight):  # torch.Tensor.lerp_: start + weight * (end - start), in place
    start += weight * (end - start)


class AdamWScheduleFree(Optimizer):
    def __init__(self, params, lr=0.0025, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, warmup_steps=0, r=0.0,
                 weight_lr_power=2.0):
        defaults = dict(lr=lr, betas=betas, eps=eps, r=r, k=0, warmup_steps=warmup_steps, train_mode=False,
                        weight_sum=0.0, lr_max=-1.0, scheduled_lr=0.0, weight_lr_power=weight_lr_power,
                        weight_decay=weight_decay)
        super().__init__(params, defaults)

    def eval(self):
        for group in self.param_groups:
            train_mode = group['train_mode']
            beta1, _ = group['betas']
            if train_mode:
                for p in group['params']:
                    state = self.state[p]
                    if 'z' in state:
                        lerp_(p.data, state['z'], 1 - 1 / beta1)  # p.lerp_(end=state['z'].to(p.device), weight=1-1/beta1)
                group['train_mode'] = False

    def train(self):
        for group in self.param_groups:
            train_mode = group['train_mode']
            beta1, _ = group['betas']
            if not train_mode:
                for p in group['params']:
                    state = self.state[p]
                    if 'z' in state:
                        lerp_(p.data, state['z'], 1 - beta1)  # p.lerp_(end=state['z'].to(p.device), weight=1-beta1)
                group['train_mode'] = True

    def step(self):
        if not self.param_groups[0]['train_mode']:
            raise Exception("Optimizer was not in train mode when step is called. "
                            "Please insert .train() and .eval() calls on the "
                            "optimizer. See documentation for details.")
        for group in self.param_groups:
            eps = group['eps']
            beta1, beta2 = group['betas']
            decay = group['weight_decay']
            k = group['k']
            r = group['r']
            warmup_steps = group['warmup_steps']
            weight_lr_power = group['weight_lr_power']

            if k < warmup_steps:
                sched = (k + 1) / warmup_steps
            else:
                sched = 1.0

            bias_correction2 = 1 - beta2 ** (k + 1)
            lr = group['lr'] * sched
            group['scheduled_lr'] = lr  # For logging purposes

            lr_max = group['lr_max'] = max(lr, group['lr_max'])

            weight = ((k + 1) ** r) * (lr_max ** weight_lr_power)
            weight_sum = group['weight_sum'] = group['weight_sum'] + weight

            try:
                ckp1 = weight / weight_sum
            except ZeroDivisionError:
                ckp1 = 0

            active_p = [p for p in group['params'] if p.grad is not None]

            for p in active_p:
                if 'z' not in self.state[p]:
                    self.state[p]['z'] = p.data.copy()  # torch.clone(p, memory_format=torch.preserve_format)
                    self.state[p]['exp_avg_sq'] = np.zeros_like(p.data)

            for p in active_p:
                y = p.data  # Notation to match theory
                grad = p.grad.copy()  # p.grad, divided in place below

                state = self.state[p]

                z = state['z']
                exp_avg_sq = state['exp_avg_sq']

                exp_avg_sq *= beta2  # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
                exp_avg_sq += (1 - beta2) * (grad * grad)
                denom = np.sqrt(exp_avg_sq / bias_correction2) + eps  # exp_avg_sq.div(bias_correction2).sqrt_().add_(eps)

                # Reuse grad buffer for memory efficiency
                grad_normalized = grad  # grad.div_(denom)
                grad_normalized /= denom

                # Weight decay calculated at y
                if decay != 0:
                    grad_normalized += decay * y  # grad_normalized.add_(y, alpha=decay)

                # These operations update y in-place,
                # without computing x explicitly.
                lerp_(y, z, ckp1)  # y.lerp_(end=z, weight=ckp1)
                y += (lr * (beta1 * (1 - ckp1) - 1)) * grad_normalized  # y.add_(grad_normalized, alpha=lr*(beta1*(1-ckp1)-1))

                # z step
                z -= lr * grad_normalized  # z.sub_(grad_normalized, alpha=lr)

            group['k'] = k + 1



# ---- Muon (torch.optim.Muon) ----------------------------------------------------------------------
# Transcribed from torch 2.11's torch/optim/_muon.py: class Muon (__init__, step), _single_tensor_muon,
# _zeropower_via_newtonschulz and _adjust_lr. torch casts each matrix to bf16 before the Newton–Schulz
# iteration; this transcription computes it in the recording's dtype (float64), the iteration the
# GPU's bf16 products approximate (optgen's CPU reference computes the same). torch refuses a param
# of other than two dimensions; the transcription steps a tensor of more as a batch of matrices over
# its last two, each as torch steps a matrix, as optgen does.

MUON_SOURCE = ("torch 2.11 torch/optim/_muon.py (class Muon, _single_tensor_muon, _zeropower_via_newtonschulz, "
               "_adjust_lr), transcribed with numpy; Newton-Schulz in float64 rather than bf16")


def _zeropower_via_newtonschulz(grad, ns_coefficients, ns_steps, eps):
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    a, b, c = ns_coefficients
    ortho_grad = grad.copy()  # grad.bfloat16(): kept in the recording's dtype
    if grad.shape[0] > grad.shape[1]:
        ortho_grad = ortho_grad.T
    ortho_grad = ortho_grad / max(np.linalg.norm(ortho_grad), eps)  # ortho_grad.div_(ortho_grad.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram_matrix = ortho_grad @ ortho_grad.T
        gram_update = b * gram_matrix + c * (gram_matrix @ gram_matrix)  # torch.addmm(gram_matrix, gram_matrix, gram_matrix, beta=b, alpha=c)
        ortho_grad = a * ortho_grad + gram_update @ ortho_grad  # torch.addmm(ortho_grad, gram_update, ortho_grad, beta=a)
    if grad.shape[0] > grad.shape[1]:
        ortho_grad = ortho_grad.T
    return ortho_grad


def _adjust_lr(lr, adjust_lr_fn, param_shape):
    A, B = param_shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        adjusted_ratio = math.sqrt(max(1, A / B))
    elif adjust_lr_fn == "match_rms_adamw":
        adjusted_ratio = 0.2 * math.sqrt(max(A, B))
    else:
        adjusted_ratio = 1.0
    return lr * adjusted_ratio


class Muon(Optimizer):
    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=(3.4445, -4.775, 2.0315), eps=1e-7, ns_steps=5, adjust_lr_fn=None):
        defaults = {"lr": lr, "weight_decay": weight_decay, "momentum": momentum, "nesterov": nesterov,
                    "ns_coefficients": ns_coefficients, "eps": eps, "ns_steps": ns_steps,
                    "adjust_lr_fn": adjust_lr_fn}
        super().__init__(params, defaults)

    def step(self):
        for group in self.param_groups:
            lr, weight_decay, momentum = group["lr"], group["weight_decay"], group["momentum"]
            for p in group["params"]:
                grad = p.grad
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = np.zeros_like(grad)
                buf = state["momentum_buffer"]
                lerp_(buf, grad, 1 - momentum)  # buf.lerp_(grad, 1 - momentum)
                update = grad + momentum * (buf - grad) if group["nesterov"] else buf  # grad.lerp(buf, momentum)
                # A batch of matrices over the last two dimensions, each as torch's one matrix.
                matrices = update.reshape((-1,) + update.shape[-2:])
                ortho = np.stack([_zeropower_via_newtonschulz(m, group["ns_coefficients"], group["ns_steps"],
                                                              group["eps"]) for m in matrices])
                adjusted_lr = _adjust_lr(lr, group["adjust_lr_fn"], update.shape[-2:])
                p.data *= 1 - lr * weight_decay  # p.mul_(1 - lr * weight_decay)
                p.data -= adjusted_lr * ortho.reshape(p.data.shape)  # p.add_(update, alpha=-adjusted_lr)


class Published(NamedTuple):
    cls: type  # the transcription
    source: str
    hyperparameters: List[str]  # the spec's, in order (without max_grad_norm, which every spec has)
    tuples: Dict[str, Tuple[str, ...]]  # the class's tuple keywords split into the spec's names
    none_is: Dict[str, object]  # keywords whose None is this spec value (and that value is None)
    ints: List[str]  # int hyperparameters (the others are floats or bools)
    bools: List[str]
    base: Dict[str, object]
    cases: List[Dict[str, object]]  # overrides of base, one group of every tensor
    # overrides for tensors [0, 1] and [2]; None: no two-group case
    two_groups: Optional[Tuple[Dict[str, object], Dict[str, object]]]
    states: Callable[[Dict, Dict], List[str]]  # (hyperparameters, a param's state) -> names to record
    fixed: Dict[str, object] = {}  # keywords passed to the class besides the hyperparameters
    # The tensors' shapes (default SHAPES): as optgen binds them, where the class's blocks follow
    # its parameters' names (Adam-mini: a row per block).
    shapes: Optional[List[List[int]]] = None
    names: Optional[List[str]] = None  # Param.name of each tensor, for a class that reads names
    # (case hyperparameters) -> [(tensor indices, hyperparameters)]: a case's groups when the class
    # decides some hyperparameters per parameter (Adam-mini's weight decay by name); the class
    # checks them. Default: one group of every tensor.
    groups: Optional[Callable[[Dict], List[Tuple[List[int], Dict]]]] = None
    # The spec's hyperparameters the class takes as another keyword and value: name -> (keyword,
    # the spec's value to the class's, the class's to the spec's).
    renamed: Dict[str, Tuple[str, Callable, Callable]] = {}


PUBLISHED = {
    "adan": Published(
        cls=Adan,
        source=ADAN_SOURCE,
        hyperparameters=["lr", "beta1", "beta2", "beta3", "eps", "weight_decay", "no_prox"],
        tuples={"betas": ("beta1", "beta2", "beta3")},
        none_is={},
        ints=[],
        bools=["no_prox"],
        base=dict(lr=0.02, beta1=0.98, beta2=0.92, beta3=0.99, eps=1e-8, weight_decay=0.0, no_prox=False),
        cases=[
            {},
            {"weight_decay": 0.1},  # proximal: param / (1 + lr * weight_decay) after the step
            {"weight_decay": 0.1, "no_prox": True},  # decoupled: param * (1 - lr * weight_decay) before it
            {"lr": 0.1, "weight_decay": 0.5, "no_prox": True},
            {"beta1": 0.5, "beta2": 0.7, "beta3": 0.9, "eps": 1e-3},
            {"lr": 0.05, "beta2": 0.5, "weight_decay": 0.05, "eps": 1e-4},
        ],
        two_groups=({}, {"lr": 0.05, "beta2": 0.8, "weight_decay": 0.1, "no_prox": True}),
        states=lambda h, state: ["exp_avg", "exp_avg_sq", "exp_avg_diff", "neg_pre_grad"],
    ),
    "ademamix": Published(
        cls=AdEMAMix,
        source=ADEMAMIX_SOURCE,
        hyperparameters=["lr", "beta1", "beta2", "beta3", "alpha", "beta3_warmup", "alpha_warmup", "eps",
                         "weight_decay"],
        tuples={"betas": ("beta1", "beta2", "beta3")},
        # `if step < warmup` never holds for warmup 0 (nor 1): the spec's 0 is the class's None.
        none_is={"beta3_warmup": 0, "alpha_warmup": 0},
        ints=["beta3_warmup", "alpha_warmup"],
        bools=[],
        base=dict(lr=0.01, beta1=0.9, beta2=0.999, beta3=0.9999, alpha=2.0, beta3_warmup=0, alpha_warmup=0, eps=1e-8,
                  weight_decay=0.0),
        cases=[
            {},
            {"weight_decay": 0.1},
            # both warmups end within the 10 steps: the schedules' both branches
            {"beta3_warmup": 6, "alpha_warmup": 6},
            {"beta3_warmup": 8, "alpha_warmup": 4, "beta3": 0.99, "alpha": 5.0, "weight_decay": 0.1},
            # warmups longer than the run: every step on the schedule
            {"beta3_warmup": 1000, "alpha_warmup": 1000, "beta3": 0.999},
            # a warmup of 1 is never in its warmup either (step counts from 1), as None
            {"beta3_warmup": 1, "alpha_warmup": 1},
            # beta1 = 0: no fast buffer, the gradient instead; beta3's warmup starts from beta1 = 0
            {"beta1": 0.0, "beta3_warmup": 5, "alpha_warmup": 5},
            {"beta1": 0.5, "beta2": 0.9, "beta3": 0.99, "alpha": 8.0, "eps": 1e-3},
        ],
        two_groups=({"beta3_warmup": 4}, {"lr": 0.03, "beta1": 0.0, "alpha": 8.0, "alpha_warmup": 7,
                                          "weight_decay": 0.1}),
        states=lambda h, state: [name for name in ("exp_avg_fast", "exp_avg_slow", "exp_avg_sq")
                                 if state.get(name) is not None],
    ),
    "cautious_adamw": Published(
        cls=CautiousAdamW,
        source=CAUTIOUS_ADAMW_SOURCE,
        hyperparameters=["lr", "beta1", "beta2", "eps", "weight_decay", "correct_bias"],
        tuples={"betas": ("beta1", "beta2")},
        none_is={},
        ints=[],
        bools=["correct_bias"],
        base=dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0, correct_bias=True),
        cases=[
            {},  # the one-element tensor's mask is all zero now and then: the mean's 1e-3 floor
            {"weight_decay": 0.1},
            {"correct_bias": False, "weight_decay": 0.5, "lr": 0.05},
            {"beta1": 0.5, "beta2": 0.9, "eps": 1e-3},
            {"beta1": 0.0},  # exp_avg is the gradient: the mask is all ones, the mean 1
            # zero gradients: a mask with nothing in it on five and twelve elements
            {"weight_decay": 0.1, "zero_grads": [[1, 1], [4, 2]]},
        ],
        two_groups=({"weight_decay": 0.05}, {"lr": 0.03, "beta1": 0.8, "correct_bias": False}),
        states=lambda h, state: ["exp_avg", "exp_avg_sq"],
        fixed={"foreach": False},  # the step transcribed
    ),
    "cautious_lion": Published(
        cls=CautiousLion,
        source=CAUTIOUS_LION_SOURCE,
        hyperparameters=["lr", "beta1", "beta2", "weight_decay"],
        tuples={"betas": ("beta1", "beta2")},
        none_is={},
        ints=[],
        bools=[],
        base=dict(lr=0.01, beta1=0.95, beta2=0.98, weight_decay=0.0),
        cases=[
            {},
            {"weight_decay": 0.1},
            {"beta1": 0.5, "beta2": 0.9, "lr": 0.03},
            {"beta1": 0.0},  # the update is sign(grad): the mask is all ones, scaled by numel / (numel + 1)
            # zero gradients: a sign of zero (step 1, exp_avg still zero), a mask with nothing in it
            {"weight_decay": 0.5, "zero_grads": [[1, 1], [4, 2]]},
        ],
        two_groups=({"weight_decay": 0.1}, {"lr": 0.003, "beta1": 0.9, "beta2": 0.99}),
        states=lambda h, state: ["exp_avg"],
    ),
    "prodigy": Published(
        cls=Prodigy,
        source=PRODIGY_SOURCE,
        hyperparameters=["lr", "beta1", "beta2", "beta3", "eps", "weight_decay", "decouple", "use_bias_correction",
                         "safeguard_warmup", "d0", "d_coef", "growth_rate"],
        tuples={"betas": ("beta1", "beta2")},
        none_is={"beta3": -1.0},
        ints=[],
        bools=["decouple", "use_bias_correction", "safeguard_warmup"],
        base=dict(lr=1.0, beta1=0.9, beta2=0.999, beta3=-1.0, eps=1e-8, weight_decay=0.0, decouple=True,
                  use_bias_correction=False, safeguard_warmup=False, d0=1e-6, d_coef=1.0, growth_rate=math.inf),
        cases=[
            {},
            {"weight_decay": 0.1},  # decoupled: param * (1 - weight_decay * dlr) before the step
            {"weight_decay": 0.1, "decouple": False},  # coupled: in the gradient, and so in the D estimate
            {"use_bias_correction": True, "beta1": 0.8, "beta2": 0.95},
            {"safeguard_warmup": True, "lr": 0.5},
            {"d0": 1e-3, "d_coef": 0.5, "growth_rate": 1.02},  # D's growth capped
            {"beta3": 0.9, "beta1": 0.5, "beta2": 0.9, "eps": 1e-4},
            {"beta1": 0.0, "weight_decay": 0.1, "decouple": False},  # no first moment: the step reads the gradient
            {"d0": 0.3, "lr": 0.1},  # an estimate below d0: D stays d0 (the d == d0 rule)
            # no gradient at step 1: the D estimate's denominator is 0 and Prodigy leaves D and the params
            {"zero_grads": [[1, 0], [1, 1], [1, 2]], "weight_decay": 0.1},
            {"zero_params0": [1]},  # a zero tensor: p0 is a zero scalar in Prodigy
        ],
        # One D for both groups, from sums over both; weight decay, eps and safeguard_warmup per group.
        two_groups=({"weight_decay": 0.1}, {"eps": 1e-4, "safeguard_warmup": True}),
        states=lambda h, state: [n for n in ("exp_avg", "exp_avg_sq", "s") if n in state],
    ),
    "dadapt_adam": Published(
        cls=DAdaptAdam,
        source=DADAPT_ADAM_SOURCE,
        hyperparameters=["lr", "beta1", "beta2", "eps", "weight_decay", "decouple", "use_bias_correction", "d0",
                         "growth_rate"],
        tuples={"betas": ("beta1", "beta2")},
        none_is={},
        ints=[],
        bools=["decouple", "use_bias_correction"],
        base=dict(lr=1.0, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, decouple=False,
                  use_bias_correction=False, d0=1e-6, growth_rate=math.inf),
        cases=[
            {},
            {"weight_decay": 0.1},  # coupled: in the gradient, and so in the D estimate
            {"weight_decay": 0.1, "decouple": True},  # decoupled: param * (1 - weight_decay * dlr)
            {"use_bias_correction": True, "beta1": 0.8, "beta2": 0.95},
            {"d0": 1e-3, "growth_rate": 1.02, "lr": 0.5},  # D's growth capped
            {"beta1": 0.5, "beta2": 0.9, "eps": 1e-4},
            # no gradient at step 1: sk_l1 is 0 and DAdaptAdam leaves D and the params
            {"zero_grads": [[1, 0], [1, 1], [1, 2]], "weight_decay": 0.1, "decouple": True},
            {"zero_params0": [1]},
        ],
        # One D for both groups, from sums over both; weight decay and eps per group.
        two_groups=({"weight_decay": 0.1}, {"eps": 1e-4, "weight_decay": 0.0}),
        states=lambda h, state: ["exp_avg", "exp_avg_sq", "s"],
    ),
    "adam_mini": Published(
        cls=AdamMini,
        source=ADAM_MINI_SOURCE,
        hyperparameters=["lr", "beta1", "beta2", "eps", "weight_decay"],
        tuples={"betas": ("beta1", "beta2")},
        none_is={},
        ints=[],
        bools=[],
        base=dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0),
        cases=[
            {},
            {"weight_decay": 0.1},
            {"beta1": 0.5, "beta2": 0.9, "eps": 1e-3, "weight_decay": 0.5, "lr": 0.05},
            {"beta1": 0.0},
            {"weight_decay": 0.1, "zero_grads": [[1, 2], [4, 3]]},  # a row mean of zero: h is eps
        ],
        two_groups=None,
        states=lambda h, state: ["m"],  # vmean (per row or block) and v (a bias's) differ between tensors
        fixed={"dim": 4, "n_heads": 2},
        # A bias (Adam, per element), a norm's weight (one block: bound as one row), an MLP weight (a
        # row per neuron) and a 4 x 4 query of 2 heads (a row of 8 per head).
        names=["bias", "ln.weight", "mlp.weight", "wq.weight"],
        shapes=[[3], [1, 5], [3, 4], [2, 8]],
        groups=lambda h: [([2, 3], h), ([0, 1], {**h, "weight_decay": 0.0})],
    ),
    "adamw_schedule_free": Published(
        cls=AdamWScheduleFree,
        source=SCHEDULE_FREE_SOURCE,
        hyperparameters=["lr", "beta1", "beta2", "eps", "weight_decay", "warmup_steps", "r", "weight_lr_power"],
        tuples={"betas": ("beta1", "beta2")},
        none_is={},
        ints=["warmup_steps"],
        bools=[],
        base=dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, warmup_steps=0, r=0.0,
                  weight_lr_power=2.0),
        cases=[
            {},
            {"weight_decay": 0.1},
            # the programs between steps: eval (y to x) and train (x to y) mid-run, and eval last
            {"programs": [[3, "eval"], [3, "train"], [7, "eval"], [7, "train"], [10, "eval"]]},
            {"warmup_steps": 4, "weight_decay": 0.05, "programs": [[2, "eval"], [2, "train"], [10, "eval"]]},
            # a warmup longer than the run, the averaging weight growing with step ** r
            {"warmup_steps": 20, "r": 1.0, "weight_lr_power": 1.0},
            {"beta1": 0.5, "beta2": 0.9, "eps": 1e-3, "lr": 0.05, "programs": [[5, "eval"], [5, "train"]]},
            # eval and train before the first step move nothing (z is the parameter then)
            {"programs": [[0, "eval"], [0, "train"], [4, "eval"], [4, "train"]]},
        ],
        two_groups=({"programs": [[6, "eval"], [6, "train"]]}, {"lr": 0.02, "beta1": 0.8, "weight_decay": 0.1}),
        states=lambda h, state: ["z", "exp_avg_sq"],
    ),
    "muon": Published(
        cls=Muon,
        source=MUON_SOURCE,
        hyperparameters=["lr", "weight_decay", "momentum", "nesterov", "ns_a", "ns_b", "ns_c", "eps", "ns_steps",
                         "match_rms_adamw"],
        tuples={"ns_coefficients": ("ns_a", "ns_b", "ns_c")},
        none_is={},
        ints=["ns_steps"],
        bools=["nesterov", "match_rms_adamw"],
        base=dict(lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True, ns_a=3.4445, ns_b=-4.775, ns_c=2.0315,
                  eps=1e-7, ns_steps=5, match_rms_adamw=False),
        cases=[
            {},
            {"nesterov": False},
            {"match_rms_adamw": True},
            {"ns_steps": 3, "ns_a": 2.0, "ns_b": -1.5, "ns_c": 0.5, "momentum": 0.9, "weight_decay": 0.0},
            {"ns_steps": 0, "lr": 0.1},  # the normalised momentum alone
            {"zero_grads": [[1, 0], [1, 2]]},  # a zero matrix: divided by eps, it stays zero
        ],
        two_groups=({"lr": 0.05}, {"nesterov": False, "match_rms_adamw": True, "ns_steps": 2, "weight_decay": 0.0}),
        states=lambda h, state: ["momentum_buffer"],
        # Tall, wide, and a batch of two one-row matrices (torch steps 2-D params only).
        shapes=[[4, 3], [3, 5], [2, 1, 6]],
        renamed={"match_rms_adamw": ("adjust_lr_fn", lambda v: "match_rms_adamw" if v else None,
                                     lambda v: v == "match_rms_adamw")},
    ),
    "lars": Published(
        cls=Lars,
        source=LARS_SOURCE,
        hyperparameters=["lr", "momentum", "dampening", "weight_decay", "nesterov", "trust_coeff", "eps", "trust_clip",
                         "always_adapt"],
        tuples={},
        none_is={},
        ints=[],
        bools=["nesterov", "trust_clip", "always_adapt"],
        base=dict(lr=1.0, momentum=0.9, dampening=0.0, weight_decay=0.01, nesterov=False, trust_coeff=0.02, eps=1e-8,
                  trust_clip=False, always_adapt=False),
        cases=[
            {},
            {"weight_decay": 0.0, "lr": 0.1},  # no adaptation: SGD with momentum
            {"weight_decay": 0.0, "always_adapt": True},  # the trust ratio without weight decay
            {"nesterov": True},
            {"momentum": 0.5, "dampening": 0.3, "weight_decay": 0.05},
            {"momentum": 0.0},  # no momentum buffer
            {"trust_clip": True, "lr": 0.02},  # LARC's clipping, binding for some tensors and steps
            # zero norms: the trust ratio is 1 (w_norm of a zero parameter at step 1, g_norm of a zero gradient)
            {"zero_params0": [1], "zero_grads": [[3, 2]]},
            # ... and clipped: min(1 / lr, 1)
            {"trust_clip": True, "lr": 2.0, "zero_params0": [0], "zero_grads": [[4, 1]]},
        ],
        two_groups=({"nesterov": True, "trust_clip": True, "lr": 0.05},
                    {"lr": 0.5, "momentum": 0.5, "weight_decay": 0.0, "always_adapt": True, "trust_coeff": 0.001}),
        states=lambda h, state: ["momentum_buffer"] if "momentum_buffer" in state else [],
    ),
}


# ---- recording ----------------------------------------------------------------------------------


def fail(msg):
    sys.exit(f"record_published.py: error: {msg}")


def normalize(spec, entry, hps):
    """The full, ordered, typed hyperparameters of the spec."""
    unknown = set(hps) - set(entry.hyperparameters)
    if unknown:
        fail(f"{spec}: unknown hyperparameters {sorted(unknown)}")
    out = {}
    for name in entry.hyperparameters:
        if name not in hps:
            fail(f"{spec}: hyperparameter {name} missing")
        v = hps[name]
        out[name] = bool(v) if name in entry.bools else int(v) if name in entry.ints else float(v)
    return out


def split_names(entry):
    return {n: (key, i) for key, names in entry.tuples.items() for i, n in enumerate(names)}


def to_kwargs(spec, entry, hps):
    """The spec's hyperparameters -> the published class's keywords (tuples joined, None restored)."""
    signature = inspect.signature(entry.cls.__init__).parameters
    splits = split_names(entry)
    kwargs = {}
    for name, v in hps.items():
        if name in entry.none_is and v == entry.none_is[name]:
            v = None
        if name in entry.renamed:
            key, to_class, _ = entry.renamed[name]
            kwargs[key] = to_class(v)
        elif name in splits:
            key, i = splits[name]
            values = list(kwargs.get(key, [None] * len(entry.tuples[key])))
            values[i] = v
            kwargs[key] = tuple(values)
        else:
            kwargs[name] = v
    for key in kwargs:
        if key not in signature:
            fail(f"{entry.cls.__name__}.__init__ has no keyword '{key}' (needed for optgen spec {spec})")
    return kwargs


def published_defaults(spec, entry):
    """The class's defaults for the spec's hyperparameters, under the spec's names."""
    signature = inspect.signature(entry.cls.__init__).parameters
    splits = split_names(entry)
    out = {}
    for name in entry.hyperparameters:
        if name in entry.renamed:
            key, _, from_class = entry.renamed[name]
            out[name] = from_class(signature[key].default)
            continue
        key, i = splits.get(name, (name, None))
        d = signature[key].default
        if d is inspect.Parameter.empty:
            fail(f"{entry.cls.__name__}.__init__ keyword '{key}' has no default")
        if i is not None:
            d = d[i]
        if d is None:
            if name not in entry.none_is:
                fail(f"{spec}: {name} defaults to None, which the spec cannot say")
            d = entry.none_is[name]
        out[name] = bool(d) if name in entry.bools else int(d) if name in entry.ints else float(d)
    return out


def fmt_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v)


def case_name(overrides):  # as record_trajectories.py
    if not overrides:
        return "base"
    return ",".join(f"{k}={fmt_value(v)}" for k, v in overrides.items())


def flat(a):
    return [float(x) for x in np.asarray(a, dtype=np.float64).reshape(-1)]


def run_case(spec, entry, index, groups, steps, edges, dtype=np.float64):
    """groups: list of (tensor indices, the spec's full hyperparameters); edges: the case's
    zero_params0 and zero_grads (EDGES); dtype: what the transcription computes in (the same
    draws, rounded to float32 for float32_deviation)."""
    rng = np.random.default_rng(zlib.crc32(f"{spec}:{index}".encode("ascii")))
    shapes = entry.shapes or SHAPES
    params = [Param(rng.standard_normal(s).astype(dtype)) for s in shapes]
    for param, name in zip(params, entry.names or []):
        param.name = name
    for t in edges.get("zero_params0", []):
        params[t].data[...] = 0.0
    params0 = [flat(p.data) for p in params]

    published_groups = []
    for idxs, hps in groups:
        g = {"params": [params[i] for i in idxs]}
        g.update(to_kwargs(spec, entry, hps))
        published_groups.append(g)
    opt = entry.cls(published_groups, **to_kwargs(spec, entry, groups[0][1]), **entry.fixed)
    for (idxs, hps), group in zip(groups, opt.param_groups if entry.groups is None else []):
        for k, v in to_kwargs(spec, entry, hps).items():  # every hyperparameter kept as given
            if group[k] != v:
                fail(f"{spec} case {index}: the group has {k}={group[k]!r}, expected {v!r}")

    group_of = {t: hps for idxs, hps in groups for t in idxs}
    grads_rec, params_rec, states_rec = [], [], {}
    if hasattr(opt, "train"):
        opt.train()  # a class with programs starts in eval mode (AdamWScheduleFree's train_mode=False)

    def run_programs(after_step):
        for at, name in edges.get("programs", []):
            if at == after_step:
                getattr(opt, name)()

    run_programs(0)
    for step in range(steps):
        grads = [rng.standard_normal(s).astype(dtype) for s in shapes]
        for zero_step, t in edges.get("zero_grads", []):
            if zero_step == step + 1:
                grads[t][...] = 0.0
        for p, g in zip(params, grads):
            p.grad = g.copy()
        opt.step()
        run_programs(step + 1)
        grads_rec.append([flat(g) for g in grads])
        params_rec.append([flat(p.data) for p in params])
        names = [entry.states(group_of[t], opt.state[p]) for t, p in enumerate(params)]
        for name in sorted(set(sum(names, []))):
            if not all(name in n for n in names):
                # The C++ test compares a recorded state in every tensor: a buffer only some groups
                # have cannot be recorded.
                continue
            states_rec.setdefault(name, [None] * steps)[step] = [flat(opt.state[p][name]) for p in params]

    case = {
        "groups": [{"tensors": list(idxs), "hyperparameters": hps} for idxs, hps in groups],
        "shapes": shapes,
        "params0": params0,
        "grads": grads_rec,
        "params": params_rec,
    }
    if states_rec:
        case["state"] = states_rec
    if edges.get("programs"):
        case["programs"] = edges["programs"]
    return case


def float32_deviation(exact, rounded):
    """How far the transcription run in float32 strays from its float64 run, as the C++ test
    measures its reference: the largest difference over each tensor's largest magnitude (for a
    state, the largest it has had so far). An optimizer whose update reads a quantity float32
    resolves poorly (Prodigy's p0 - param, a millionth of the parameter at first) strays by far more
    than float32's rounding, and the test allows its float reference as much."""
    worst, scale = 0.0, {}

    def compare(a, b, key, running):
        nonlocal worst
        b, a = np.asarray(b), np.asarray(a)
        if b.size == 0:
            return
        top = float(np.abs(b).max())
        if running:
            top = scale[key] = max(scale.get(key, 0.0), top)
        if top > 0:
            worst = max(worst, float(np.abs(a - b).max()) / top)

    for step, (pa, pb) in enumerate(zip(exact["params"], rounded["params"])):
        for t, (a, b) in enumerate(zip(pb, pa)):
            compare(a, b, None, False)
        for name, steps in exact.get("state", {}).items():
            for t, (b, a) in enumerate(zip(steps[step], rounded["state"][name][step])):
                compare(a, b, (name, t), True)
    return float(f"{worst:.3g}")


# Case keys that are not hyperparameters: zeroed initial parameters and gradients (module docstring).
# "programs": [[step, name], ...]: after step `step` (0: before the first), in order, call the
# optimizer's method `name` (a spec's program: schedule-free's eval and train); the step's recorded
# params are those after them.
EDGES = ("zero_params0", "zero_grads", "programs")


def split_edges(spec, overrides, tensors):
    """A case's overrides -> (hyperparameters, edges)."""
    edges = {k: v for k, v in overrides.items() if k in EDGES}
    for t in edges.get("zero_params0", []):
        if not 0 <= t < tensors:
            fail(f"{spec}: zero_params0 names tensor {t}; there are {tensors}")
    for step, t in edges.get("zero_grads", []):
        if not (0 <= t < tensors and step >= 1):
            fail(f"{spec}: zero_grads names step {step} (from 1) of tensor {t}; there are {tensors} tensors")
    for step, name in edges.get("programs", []):
        if step < 0:
            fail(f"{spec}: programs names step {step}; a program runs after a step (0: before the first)")
    return {k: v for k, v in overrides.items() if k not in EDGES}, edges


def build_cases(spec, entry):
    """[(name, groups, edges)]: the single-group cases, then the two-group case."""
    out = []
    tensors = len(entry.shapes or SHAPES)
    for ov in entry.cases:
        hps, edges = split_edges(spec, ov, tensors)
        h = normalize(spec, entry, {**entry.base, **hps})
        groups = entry.groups(h) if entry.groups else [(list(range(tensors)), h)]
        out.append((case_name(ov), groups, edges))
    if entry.two_groups is not None:
        (ov0, edges0), (ov1, edges1) = (split_edges(spec, ov, tensors) for ov in entry.two_groups)
        h0 = normalize(spec, entry, {**entry.base, **ov0})
        h1 = normalize(spec, entry, {**entry.base, **ov1})
        name = "two_groups:[0,1]:" + case_name(entry.two_groups[0]) + ";[2]:" + case_name(entry.two_groups[1])
        edges = {k: edges0.get(k, []) + edges1.get(k, []) for k in EDGES if k in edges0 or k in edges1}
        out.append((name, [([0, 1], h0), ([2], h1)], edges))
    names = [n for n, _, _ in out]
    if len(set(names)) != len(names):
        fail(f"{spec}: duplicate case names")
    return out


def infinities_as_yaml(obj):
    """JSON has no infinity: an infinite float becomes the string ".inf" or "-.inf", which the C++
    tests read (with yaml-cpp, as YAML) as the float it names (Prodigy's growth_rate)."""
    if isinstance(obj, float) and math.isinf(obj):
        return ".inf" if obj > 0 else "-.inf"
    if isinstance(obj, dict):
        return {k: infinities_as_yaml(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [infinities_as_yaml(v) for v in obj]
    return obj


def dump(obj):
    return json.dumps(infinities_as_yaml(obj), separators=(",", ":"), allow_nan=False)


def write_file(path, doc):
    """As record_trajectories.py: deterministic, compact-but-readable JSON, one line per case array."""
    lines = ["{"]
    for k, v in doc.items():
        if k != "cases":
            lines.append(f"  {dump(k)}: {json.dumps(infinities_as_yaml(v), allow_nan=False)},")
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
    ap.add_argument("--out", required=True, help="output directory (e.g. tests/data/published)")
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps per case (default 10)")
    ap.add_argument("--only", default="", help="comma-separated subset of specs")
    args = ap.parse_args()
    if args.steps < 1:
        fail("--steps must be >= 1")
    specs = [s.strip() for s in args.only.split(",") if s.strip()] or list(PUBLISHED)
    for s in specs:
        if s not in PUBLISHED:
            fail(f"unknown spec {s}; known: {', '.join(PUBLISHED)}")

    os.makedirs(args.out, exist_ok=True)
    print(f"numpy {np.__version__}")
    for spec in specs:
        entry = PUBLISHED[spec]
        cases = []
        for index, (name, groups, edges) in enumerate(build_cases(spec, entry)):
            case = run_case(spec, entry, index, groups, args.steps, edges)
            rounded = run_case(spec, entry, index, groups, args.steps, edges, np.float32)
            cases.append({"name": name, **case, "float32_deviation": float32_deviation(case, rounded)})
        doc = {
            "source": entry.source,
            "numpy_version": np.__version__,
            "spec": spec,
            "published_class": getattr(entry.cls, "published_name", entry.cls.__name__),
            "implementation": f"{entry.cls.__name__} in tests/record_published.py, float64, CPU",
            "steps": args.steps,
            "published_defaults": published_defaults(spec, entry),
            "cases": cases,
        }
        path = os.path.join(args.out, f"{spec}.json")
        print(f"{spec}: {len(cases)} cases ({entry.cls.__name__}) -> {path} ({write_file(path, doc)} bytes)")


if __name__ == "__main__":
    main()

// Each pass on small programs: CHECK_PASS(pass, spec body, IR expected right after that pass).

#include <catch2/catch.hpp>

#include "check.h"

TEST_CASE("lower: statements become one data-flow DAG", "[passes]") {
  CHECK_PASS("lower", R"ir(
hyperparameters:
  lr: {type: float, default: 0.1}
update:
  - g = grad * 2
  - g = g + 1
  - param = param - lr * g
)ir",
             R"ir(program test
update:
  let g = grad * 2
  let g_1 = g + 1
  let param_next = param - lr * g_1
  param <- param_next
)ir");
}

TEST_CASE("specialize: flags become constants, absent states leave", "[passes]") {
  const char* spec = R"ir(
hyperparameters:
  lr: {type: float, default: 0.1}
  fast: {type: bool, default: false, specialize: true}
state:
  buffer: {init: zeros, when: fast}
update:
  - when: fast
    do:
      - buffer = buffer + grad
  - "param = param - (fast ? lr * buffer : lr * grad)"
)ir";
  CHECK(optgen::test::ir_after("specialize", spec, {{"fast", false}}) == R"ir(program test (fast=false)
update:
  let buffer_next = buffer + grad
  let buffer_next_1 = false ? buffer_next : buffer
  let param_next = param - (false ? lr * buffer_next_1 : lr * grad)
  param <- param_next
  buffer <- buffer_next_1
)ir");
  CHECK(optgen::test::ir_after("dce", spec, {{"fast", false}}) == R"ir(program test (fast=false)
group:
  $lr = lr
update:
  let param_next = param - $lr * grad
  param <- param_next
)ir");
  CHECK(optgen::test::ir_after("dce", spec, {{"fast", true}}) == R"ir(program test_fast (fast=true)
group:
  $lr = lr
update:
  let buffer_next = buffer + grad
  let param_next = param - $lr * buffer_next
  param <- param_next
  buffer <- buffer_next
)ir");
}

TEST_CASE("constant_fold: constants, identities and selects", "[passes]") {
  CHECK_PASS("constant_fold", R"ir(
hyperparameters:
  lr: {type: float, default: 0.1}
update:
  - scale = 2 * 3 - 5
  - "g = true ? grad * scale : grad"
  - g = g + 0 - 0
  - param = param - lr * g ** 1 / 1
)ir",
             R"ir(program test
update:
  let param_next = param - lr * grad
  param <- param_next
)ir");
  CHECK_PASS("constant_fold", R"ir(
update:
  - param = param + 1 / 0 + sqrt(4) + -(-grad)
)ir",
             R"ir(program test
update:
  let param_next = param + 1 / 0 + 2.0 + grad
  param <- param_next
)ir");
}

TEST_CASE("cse: equal subexpressions become one node", "[passes]") {
  CHECK_PASS("cse", R"ir(
hyperparameters:
  beta: {type: float, default: 0.9}
update:
  - a = (1 - beta) * grad
  - b = (1 - beta) * grad
  - param = param - a * b
)ir",
             R"ir(program test
update:
  let a = (1 - beta) * grad
  let param_next = param - a * a
  param <- param_next
)ir");
}

TEST_CASE("assign_levels: per-group subtrees become group values, named after what they compute", "[passes]") {
  CHECK_PASS("assign_levels", R"ir(
hyperparameters:
  lr: {type: float, default: 0.1}
  weight_decay: {type: float, default: 0.01}
  beta1: {type: float, default: 0.9}
per_step:
  - bias_correction1 = 1 - beta1 ** step
update:
  - param = param * (1 - lr * weight_decay)
  - param = param - lr / bias_correction1 * grad
)ir",
             R"ir(program test
group:
  $one_minus_lr_times_weight_decay = 1 - lr * weight_decay
  let bias_correction1 = 1 - beta1 ** step
  $lr_over_bias_correction1 = lr / bias_correction1
update:
  let param_next = param * $one_minus_lr_times_weight_decay
  let param_next_1 = param_next - $lr_over_bias_correction1 * grad
  param <- param_next_1
)ir");
}

TEST_CASE("assign_levels: per-tensor subtrees become tensor values, their per-group parts group values", "[passes]") {
  CHECK_PASS("assign_levels", R"ir(
hyperparameters:
  lr: {type: float, default: 0.1}
  beta1: {type: float, default: 0.9}
per_step:
  - bias_correction1 = 1 - beta1 ** step
update:
  - scale = lr / bias_correction1 / sqrt(numel)
  - param = param - scale * grad * grad
)ir",
             R"ir(program test
group:
  let bias_correction1 = 1 - beta1 ** step
  $lr_over_bias_correction1 = lr / bias_correction1
tensor:
  let scale = $lr_over_bias_correction1 / sqrt(numel)
  @scale = scale
update:
  let param_next = param - @scale * grad * grad
  param <- param_next
)ir");
  CHECK(optgen::test::ir_after("plan_stages", R"ir(
update:
  - param = param - grad / numel
)ir")
            .find("stages: update (update)\n") != std::string::npos);
}

TEST_CASE("dce: a state write that stores the old value is dropped", "[passes]") {
  const char* spec = R"ir(
hyperparameters:
  lr: {type: float, default: 0.1}
  fast: {type: bool, default: false, specialize: true}
state:
  buffer: {init: zeros, when: fast}
update:
  - "buffer = fast ? buffer + grad : buffer"
  - param = param - lr * grad
)ir";
  CHECK(optgen::test::ir_after("assign_levels", spec, {{"fast", false}}) == R"ir(program test (fast=false)
group:
  $lr = lr
update:
  let param_next = param - $lr * grad
  param <- param_next
  buffer <- buffer
)ir");
  CHECK(optgen::test::ir_after("dce", spec, {{"fast", false}}) == R"ir(program test (fast=false)
group:
  $lr = lr
update:
  let param_next = param - $lr * grad
  param <- param_next
)ir");
}

TEST_CASE("scalar state: per_step reads old values, later statements the new", "[passes]") {
  CHECK_PASS("assign_levels", R"ir(
hyperparameters:
  beta: {type: float, default: 0.9}
scalar_state:
  product: {init: 1.0}
per_step:
  - old = product
  - product = product * beta
update:
  - param = param - (product - old) * grad
)ir",
             R"ir(program test
scalar_state:
  let product_next = product * beta
  product <- product_next
group:
  $product_next_minus_product = product_next - product
update:
  let param_next = param - $product_next_minus_product * grad
  param <- param_next
)ir");
}

TEST_CASE("lower: param may be assigned a leaf, and states may swap", "[passes]") {
  CHECK_PASS("lower", R"ir(
update:
  - m = grad
  - param = m
)ir",
             R"ir(program test
update:
  param <- grad
)ir");
  CHECK_PASS("dce", R"ir(
state:
  a: {init: zeros}
  b: {init: 1.0}
update:
  - swap = a
  - a = b
  - b = swap
  - param = param - a * grad
)ir",
             R"ir(program test
update:
  let param_next = param - b * grad
  param <- param_next
  a <- b
  b <- a
)ir");
}

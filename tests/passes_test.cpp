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
  // The remainder of a floored division, with the divisor's sign (Python's %).
  CHECK_PASS("constant_fold", R"ir(
update:
  - param = param - (7 % 3) * (-7 % 3) * (7 % -3) * grad + (-6 % 3) * grad
)ir",
             R"ir(program test
update:
  let param_next = param - -4 * grad + 0 * grad
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

TEST_CASE("plan_stages: a reduction runs one stage after the reductions it reads", "[passes]") {
  // Clipping by the group's gradient norm, then a centred update: three reduce stages, because
  // mean(g) needs the clip factor and norm(centered) needs mean(g); max(abs(g)) shares stage 2.
  CHECK_PASS("plan_stages", R"ir(
hyperparameters:
  lr: {type: float, default: 0.1}
  max_norm: {type: float, default: 1.0}
update:
  - clip = min(1, max_norm / (group_norm(grad) + 1e-6))
  - g = grad * clip
  - centered = g - mean(g)
  - param = param - lr * centered / (norm(centered) + 1) - lr * max(abs(g))
)ir",
             R"ir(program test
group:
  $lr = lr
  $max_norm = max_norm
reduce:
  %group_sum_grad_times_grad = (stage 1) sum over each group of grad * grad
  let g = grad * @clip
  %sum_g = (stage 2) sum over each tensor of g
  let centered = g - @sum_g_over_numel
  %sum_centered_times_centered = (stage 3) sum over each tensor of centered * centered
  %max_abs_g = (stage 2) max over each tensor of abs(g)
tensor:
  let clip = min(1, $max_norm / (sqrt(%group_sum_grad_times_grad) + 1e-06))
  @clip = clip
  @sum_g_over_numel = %sum_g / numel
  @sqrt_sum_centered_times_centered_plus_one = sqrt(%sum_centered_times_centered) + 1
  @lr_times_max_abs_g = $lr * %max_abs_g
update:
  let param_next = param - $lr * centered / @sqrt_sum_centered_times_centered_plus_one - @lr_times_max_abs_g
  param <- param_next
stages: reduce1 (reduce) reduce2 (reduce) reduce3 (reduce) update (update)
)ir");
}

TEST_CASE("reductions: equal ones are computed once, unread ones not at all", "[passes]") {
  // norm(grad) twice is one reduction (cse); sum(param) is read only by a value no output uses.
  CHECK_PASS("plan_stages", R"ir(
update:
  - unused = sum(param)
  - param = param - grad / (norm(grad) + 1) * norm(grad)
)ir",
             R"ir(program test
reduce:
  %sum_grad_times_grad = (stage 1) sum over each tensor of grad * grad
tensor:
  let sqrt_sum_grad_times_grad = sqrt(%sum_grad_times_grad)
  @sqrt_sum_grad_times_grad_plus_one = sqrt_sum_grad_times_grad + 1
  @sqrt_sum_grad_times_grad = sqrt_sum_grad_times_grad
update:
  let param_next = param - grad / @sqrt_sum_grad_times_grad_plus_one * @sqrt_sum_grad_times_grad
  param <- param_next
stages: reduce (reduce) update (update)
)ir");
}

TEST_CASE("rows and columns: levels, per-tensor states and the stages of Adafactor", "[passes]") {
  // torch.optim.Adafactor's factored second moment: the row and column means of g * g (stage 1),
  // the new row_var and col_var and each matrix's mean of row_var (stage 2), the update's norm
  // (stage 3), the update. Row and column values are their own levels; a row state is written per
  // row; `factored` is per tensor, and the states that exist for some tensors only stay in the
  // variant. The lines that finish the row, column and matrix values store them (stored:), a new
  // state in the slot of the value it equals for the tensors that have it.
  CHECK_PASS("plan_stages", R"ir(
hyperparameters:
  beta: {type: float, default: 0.5}
state:
  row_var:  {init: zeros, shape: rows, when: factored}
  col_var:  {init: zeros, shape: cols, when: factored}
  variance: {init: zeros, when: "!factored"}
update:
  - v = 0
  - when: factored
    do:
      - row_var = lerp(row_var, row_mean(grad * grad), beta)
      - col_var = lerp(col_var, col_mean(grad * grad), beta)
      - v = row_var * col_var / max(mean(row_var), 1e-30)
  - when: "!factored"
    do:
      - variance = lerp(variance, grad * grad, beta)
      - v = variance
  - u = grad / sqrt(v + 1e-8)
  - param = param - u / max(1, norm(u))
)ir",
             R"ir(program test
group:
  $beta = beta
reduce:
  let grad_times_grad = grad * grad
  %sum_grad_times_grad = (stage 1) sum over each row of grad_times_grad
  %sum_grad_times_grad_1 = (stage 1) sum over each column of grad_times_grad
  let row_var_next = lerp(row_var[row], %sum_grad_times_grad / @cols, $beta)
  %sum_row_var_next = (stage 2) sum over each matrix of row_var_next
  let variance_next = lerp(variance, grad_times_grad, $beta)
  let v = @row.row_var_next * @col.col_var_next / @matrix.max_sum_row_var_next_over_rows_c1em30
  let v_1 = @factored ? v : 0
  let variance_next_1 = @not_factored ? variance_next : v_1
  let u = grad / sqrt(variance_next_1 + 1e-08)
  %sum_u_times_u = (stage 3) sum over each tensor of u * u
tensor:
  @not_factored = !factored
  @factored = factored
  @cols = cols
  @rows = rows
  @max_one_sqrt_sum_u_times_u = max(1, sqrt(%sum_u_times_u))
matrix:
  @matrix.max_sum_row_var_next_over_rows_c1em30 = max(%sum_row_var_next / @rows, 1e-30)
row:
  @row.row_var_next = row_var_next
col:
  let col_var_next = lerp(col_var[col], %sum_grad_times_grad_1 / @rows, $beta)
  @col.col_var_next = col_var_next
update:
  let param_next = param - u / @max_one_sqrt_sum_u_times_u
  param <- param_next
  let row_var_next_1 = @factored ? row_var_next : row_var[row]
  row_var[row] <- row_var_next_1
  let col_var_next_1 = @factored ? col_var_next : col_var[col]
  col_var[col] <- col_var_next_1
  let variance_next_2 = @not_factored ? variance_next : variance
  variance <- variance_next_2
stages: reduce1 (reduce) reduce2 (reduce) reduce3 (reduce) update (update)
stored: matrix max_sum_row_var_next_over_rows_c1em30 by stage 2
stored: row row_var_next by stage 1
stored: row row_var (new state, in slot 0) by stage 1
stored: column col_var_next by stage 1
stored: column col_var (new state, in slot 0) by stage 1
)ir");
}

TEST_CASE("plan_stages: a variant that reduces over every group stores no state in a Reduce stage", "[passes]") {
  // The momentum feeds a matrix function, so its Reduce stage stores it for the update (Muon's
  // rule); a reduction over every group stops that: the CPU reference's first pass over the groups
  // runs the Reduce stages and must change nothing (reference::step_groups).
  const std::string body = R"ir(
hyperparameters:
  lr: {type: float, default: 0.1}
state:
  m: {init: zeros}
update:
  - m = 0.9 * m + grad
  - o = newton_schulz(m, 5, 3.4445, -4.7750, 2.0315, 1e-7)
  - param = param - lr * o%s
)ir";
  auto with = [&](const std::string& tail) {
    std::string text = body;
    text.replace(text.find("%s"), 2, tail);
    return optgen::test::ir_after("plan_stages", text);
  };
  CHECK_THAT(with(""), Catch::Contains("m <- (by stage 1)"));
  const std::string over_groups = with(" / optimizer_norm(grad)");
  INFO(over_groups);
  CHECK_THAT(over_groups, !Catch::Contains("(by stage"));
}

TEST_CASE("uq8's sign analysis: a remainder has its divisor's sign", "[passes]") {
  auto spec = [](const std::string& k) {
    return optgen::test::spec_text("hyperparameters:\n  k: {type: int, default: " + k +
                                   "}\nstate:\n  v: {init: zeros}\nstorage: [\"f32:uq8\"]\nupdate:\n"
                                   "  - v = v + (step % k) * grad * grad\n"
                                   "  - param = param - grad / (sqrt(v) + 1)\n");
  };
  CHECK(optgen::test::spec_error("mod.yaml", spec("3")).empty());  // k at least 0: step % k too
  CHECK_THAT(optgen::test::spec_error("mod.yaml", spec("-3")),
             Catch::Contains("the value assigned to state 'v' here can be negative"));
}

TEST_CASE("specialize: a state's when may compute with numbers", "[passes]") {
  // `1 + 1 == 2` was an internal error: the condition's evaluator knew bools only.
  auto spec = [](const std::string& when) {
    return optgen::test::spec_text("state:\n  b: {init: zeros, when: \"" + when +
                                   "\"}\nupdate:\n  - b = grad\n  - param = param - b\n");
  };
  CHECK(optgen::test::spec_error("when.yaml", spec("1 + 1 == 2")).empty());
  // False in every variant: the state is in none (refused before its use is).
  CHECK_THAT(optgen::test::spec_error("when.yaml", spec("3 % 2 == 0")),
             Catch::Contains("state 'b' is in no variant: its 'when' is never true"));
}

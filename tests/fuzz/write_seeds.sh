#!/usr/bin/env bash
# Writes the fuzzer's generated seeds into tests/fuzz/seeds/ (committed; run again after editing):
# long sums and chains of each kind of operation, a DAG of shared operands, and storage lists over
# state names that run together once joined with '_'. Coverage does not reward length, so the
# mutator rarely grows a sum to where a printer that doubles its work per operand takes minutes;
# from these seeds it starts there. Usage: tests/fuzz/write_seeds.sh
set -euo pipefail
cd "$(dirname "$0")/seeds"

spec() {  # spec NAME UPDATE-LINES...
  local name=$1
  shift
  {
    echo "optimizer: Seed"
    echo "summary: a generated seed (tests/fuzz/write_seeds.sh)"
    echo "hyperparameters:"
    echo "  lr: {type: float, default: 0.01}"
    echo "  beta: {type: float, default: 0.9}"
    echo "update:"
    printf '  - %s\n' "$@"
  } > "$name.yaml"
}

joined() {  # joined COUNT SEPARATOR TERM-WITH-%d
  local out="" i
  for ((i = 1; i <= $1; i++)); do out+="${out:+$2}$(printf "$3" "$i")"; done
  echo "$out"
}

spec chain_sum_32 "param = param - lr * ($(joined 32 ' + ' 'grad * %d'))"
spec chain_mixed_24 "param = param - lr * ($(joined 24 ' - ' '(grad + %d) / (beta + %d)'))"
spec chain_calls_16 "param = param - lr * $(joined 16 '' 'max(grad, ')0$(printf ')%.0s' {1..16})"
spec chain_ternary_16 "\"param = param - lr * ($(joined 16 ' : ' 'grad > %d ? grad * beta') : grad)\""
spec chain_power_12 "param = param - lr * ($(joined 12 ' * ' '(1 - beta ** %d)')) * grad"
dag=("x1 = grad + grad")
for ((i = 2; i <= 40; i++)); do dag+=("x$i = x$((i - 1)) * x$((i - 1)) + x$((i - 1))"); done
spec dag_shared_40 "${dag[@]}" "param = param - lr * x40"

# States whose names run together in kernel set names: a, b and a_bf16_b.
cat > storage_names_run_together.yaml <<'SPEC'
optimizer: Seed
summary: a generated seed (tests/fuzz/write_seeds.sh)
hyperparameters:
  lr: {type: float, default: 0.01}
state:
  a: {init: zeros}
  b: {init: zeros}
  a_bf16_b: {init: zeros}
  b_f16: {init: zeros}
storage: [f32, "f32:f32:a=bf16", "f32:f32:a_bf16_b=f16:b=q8", "bf16:q8:b_f16=uq8"]
update:
  - a = grad
  - b = lerp(b, grad, 0.1)
  - a_bf16_b = grad * grad
  - b_f16 = max(b_f16, grad * grad)
  - param = param - lr * (a + b + a_bf16_b + b_f16)
SPEC

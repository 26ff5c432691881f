#!/usr/bin/env bash
# Runs the Python examples on a GPU machine (README.md beside this file says what each one does).
#
#   run_gpu.sh [DIR]         train_gpt.py and train_cnn.py with each optimizer (optgen, torch fused, torch foreach),
#                            train_gpt.py with Muon (muon-torch, muon-optgen), then compare.py: DIR/<model>_<optimizer>.json and DIR/run.log (one H200: about 3 minutes)
#   run_gpu.sh fsdp2 [DIR]   fsdp2_check.py on 2 GPUs through torchrun: DIR/fsdp2.log
#
# DIR defaults to $OUT. optgen's Python package is taken from python/ at the top of the repository, or with
# OPTGEN_INSTALLED=1 the one python3 has installed (scripts/test_wheel.sh --examples: a wheel's). Every run is
# made even when one fails; the exit status is 1 when any failed (or the curves do not match), else 0.
set -uo pipefail  # no -e: a failed run must not stop the others

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
if [[ ${OPTGEN_INSTALLED:-0} != 1 ]]; then
  export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
status=0

run() {  # a command, echoed first; a failure is remembered, not fatal
  echo "+ $*"
  "$@" || { echo "FAILED ($?): $*"; status=1; }
}

train_all() {
  local dir=$1 model optimizer
  # torch first: its results stay useful should optgen fail.
  for model in gpt cnn; do
    for optimizer in torch torch-foreach optgen; do
      run python3 "$here/train_$model.py" --optimizer "$optimizer" --out "$dir/${model}_$optimizer.json"
    done
  done
  # Muon for the GPT's hidden matrices, AdamW for the rest: torch's, then optgen's.
  for optimizer in muon-torch muon-optgen; do
    run python3 "$here/train_gpt.py" --optimizer "$optimizer" --out "$dir/gpt_$optimizer.json"
  done
  run python3 "$here/compare.py" "$dir"
  return $status
}

fsdp2() {
  # NVLink multicast stays off (it can take a shared host's GPUs out of service): NCCL, PyTorch, NVSHMEM.
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  run torchrun --standalone --nproc_per_node 2 "$here/fsdp2_check.py"
  return $status
}

# Each function runs in the pipeline's subshell: its return value carries the status out.
if [[ ${1:-} == fsdp2 ]]; then
  dir=${2:-${OUT:?give a directory or set OUT}}
  mkdir -p "$dir"
  fsdp2 2>&1 | tee "$dir/fsdp2.log"
else
  dir=${1:-${OUT:?give a directory or set OUT}}
  mkdir -p "$dir"
  train_all "$dir" 2>&1 | tee "$dir/run.log"
fi
exit "${PIPESTATUS[0]}"

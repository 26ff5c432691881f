#!/usr/bin/env bash
# Device call: Nsight Compute pipe and stall metrics of the 8-bit AdamW Update stage, per build.
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out"
B=${BUILDS:-base}
for b in $B; do [ -d $b ] || { mkdir -p $b && tar -C $b -xJf .carry/$b.tar.xz; }; done
export OPTGEN_CACHE_DIR=/tmp/kcache
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
M=smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,sm__warps_active.avg.per_cycle_active
M=$M,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fmaheavy.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
M=$M,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_active
M=$M,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed_op_shared_ld.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second
M=$M,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio
for b in $B; do
  for s in ${S:-bf16:q8:exp_avg_sq=uq8}; do
    tag=$(echo $s | cut -d: -f1)
    OPTGEN_TUNING=${TAB:-tuning/nvidia-h100-80gb-hbm3.json} LD_LIBRARY_PATH=$PWD/base timeout 300 $NCU --clock-control none --kernel-name regex:q8_exp_avg_sq_uq8_update --launch-skip 5 --launch-count 1 --metrics $M \
      $b/optgen_bench --workload-dir base/workloads --workloads ${WL:-gpt2} --optimizers adamw --storage "$s" --modes eager --steps 8 > "$out/ncu_${b}_$tag.txt" 2>&1
    echo "== $b $s rc=$?"; grep -E "^\s+(sm|smsp|l1tex|launch|dram|gpu)__" "$out/ncu_${b}_$tag.txt" | awk '{print $1, $NF}'
  done
done

#!/usr/bin/env bash
# Nsight Compute on gpt2's 8-bit Update stages: Adam-mini's (rows) beside AdamW's (elements).
tar -xJf build-pack/new.tar.xz -C /tmp; export LD_LIBRARY_PATH=/tmp/new
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M=smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,launch__registers_per_thread,sm__warps_active.avg.per_cycle_active,launch__grid_size,launch__block_size
M=$M,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
M=$M,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
M=$M,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio
for o in "adam_mini bf16:q8:vmean=f32:v=uq8" "adamw bf16:q8:exp_avg_sq=uq8" "adam_mini f32:q8:vmean=f32:v=uq8"; do
  set -- $o
  timeout 200 $NCU --clock-control none --kernel-name regex:'q8.*_update$' --launch-skip 5 --launch-count 1 --metrics $M \
    /tmp/new/optgen_bench --workload-dir /tmp/new/workloads --workloads gpt2 --optimizers $1 --storage "$2" --modes eager --steps 8 --host-tensors 0 > $OUT/ncu_$1_${2%%:*}.txt 2>&1
  echo "== $1 $2 rc=$?"; grep -E "^\s+(sm|smsp|launch|dram|gpu)__|q8.*update" $OUT/ncu_$1_${2%%:*}.txt | awk '{print $1, $NF}'
done

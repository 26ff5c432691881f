#pragma once
/// optgen's device library, what every generated kernel source includes: the kernel ABI shared with
/// the runtime, the random stream of stochastic rounding, 8-bit blockwise states and element
/// arithmetic (optgen/*.h, compiled on the host too), and the device code by concept:
///   math.cuh              storage number types, the spec language's functions
///   operands.cuh          loading and storing operands of every codec
///   group.cuh             the group table, the group kernel, stage overlap
///   reduce.cuh            reductions and the Reduce stage's chunk runs
///   shape.cuh             where an element is among rows, columns and matrices
///   shaped.cuh            a Reduce stage's lines, column segments and snapshot
///   reduce_stage.cuh      the Reduce stage: its blocks of each kind
///   update.cuh            what every Update stage does; its element walk (with rows and columns)
///   blockwise_update.cuh  the Update stage's walk of 8-bit quantisation blocks
///   update_stage.cuh      the Update stage: its walk, between the ticket and the commit
/// The runtime compiles these headers in (nvrtc::device_library) and hands them to NVRTC as
/// in-memory headers, so a kernel source needs no include path. A source defines OPTGEN_BLOCK_SIZE,
/// OPTGEN_ELEMENTS_PER_THREAD and the OPTGEN_*_LAUNCH_BOUNDS macros before it includes this.

#include "optgen/device/reduce_stage.cuh"
#include "optgen/device/update_stage.cuh"

#pragma once
/// The CUDA emitter: `<name>_kernels.cu`. For each variant and storage type, one kernel per stage of
/// the variant's plan (one, the Update stage, for every elementwise optimizer), each updating every
/// tensor bound to it in one launch; and per variant its group kernel, which recomputes the values
/// the next step reads after a setter. The per-step, per-tensor and per-element code comes from the
/// variant's IR; the stage drivers, the indexing and the group table from optgen's device library
/// (runtime/include/optgen/device/), which the file includes.

#include <string>
#include <vector>

#include "ir.h"
#include "spec.h"
#include "optgen/storage.h"

namespace optgen {

/// Parameters of the emitted kernels, chosen per build (`optgen emit --block-size ...`).
struct KernelTuning {
  int block_size = 256;  ///< threads per block
  /// Threads per block of a spec whose every variant has rows and columns (Adafactor, Adam-mini):
  /// their blocks end unevenly (each thread finds its elements' rows, a row line ends with its
  /// row), and half as many threads per block, with as many per SM, finish sooner (bench/RESULTS.md,
  /// 2026-11-29: Adafactor on llama-1b 10% faster, ghostnet_100 11%; Adam-mini 5% on llama-1b).
  /// block_size_for picks.
  int shaped_block_size = 128;
  int elements_per_thread = 8;  ///< elements a thread has in flight per loop iteration
  /// Blocks each SM must fit (the second argument of __launch_bounds__): it caps the registers of
  /// the stage kernels at 65536 / (block_size * min_blocks_per_sm), as many threads per SM at any
  /// other block size (shaped_block_size, a launch shape's). 0 leaves it to ptxas, which may then
  /// spill.
  int min_blocks_per_sm = 3;
  /// The same for the Reduce stages' kernels: their loop holds only the operands of their
  /// reductions, and four blocks per SM keep more of them in flight (bench/RESULTS.md, 2026-11-24).
  int reduce_min_blocks_per_sm = 4;
  /// The same for every stage of a variant with rows and columns, whose code indexes each element's
  /// row, column and matrix and computes their values in double: three blocks per SM spill.
  int shaped_min_blocks_per_sm = 2;
  /// The same for a Reduce stage of a spec with rows and columns whose blocks are all chunk runs
  /// (Adafactor's norm of the update), in blocks of shaped_block_size (7: 896 threads per SM, 72
  /// registers, where the shaped budget left it 96 and five blocks): bound by the latency of its
  /// loop, it gains from more threads where no row line or column segment shares its budget
  /// (bench/RESULTS.md, 2026-12-01).
  int shaped_runs_min_blocks_per_sm = 7;
  /// The same for the Update stages of kernel sets with 8-bit states, whose warps hold the block
  /// they update and the next one's loads: three blocks (80 registers), bound by the latency of
  /// their dependent math as much as by the integer pipe, gain from the warps more than they lose
  /// to the cap (bench/RESULTS.md, 2026-12-05; two, 2026-11-26). A kernel whose next block's
  /// operands take more registers than AdamW's with f32 params is built for one block fewer
  /// (emit_cuda.cpp's blockwise_threads), as is one that spills at its blocks (compile_kernels,
  /// kernel_abi::kFewerBlocksMacro).
  int blockwise_min_blocks_per_sm = 3;
  long long chunk_size = 2048;  ///< elements per block of f32 kernel sets (a multiple of 64)
  /// Elements per block of every other kernel set (narrower params or states, a master copy): each
  /// block moves fewer bytes per element, and more elements per block keep as many bytes in flight
  /// (bench/RESULTS.md, 2026-11-25: bf16 AdamW on gpt2 at 82% of its floor with 2048, 96% with 8192).
  long long narrow_chunk_size = 8192;
  /// Elements per block of kernel sets with 8-bit states, a multiple of 256 (their blocks are whole
  /// in a chunk): each block copies the quantiser's tables into shared memory and takes a ticket
  /// first, which longer chunks amortise (bench/RESULTS.md, 2026-11-26: 8-bit AdamW on gpt2 at 57%
  /// of its floor with 8192, 64% with 32768).
  long long blockwise_chunk_size = 32768;
  /// Elements per block of f32 kernel sets whose variant has Reduce stages (clipping, LAMB's
  /// norms): a Reduce stage's block reads runs of chunks, and fewer, longer chunks halve the runs
  /// and arrivals (bench/RESULTS.md, 2026-11-25: clipped AdamW on gpt2 1026 µs at 2048, 996 at 4096).
  long long reduce_chunk_size = 4096;
  /// Elements per block of every kernel set of a variant with rows and columns: each block finds
  /// its tensor's shape, results and stored values first, which longer chunks amortise
  /// (bench/RESULTS.md, 2026-11-29: Adam-mini on gpt2 840 µs with 2048, 795 with 8192; 16384 no
  /// faster there, 20% slower on ghostnet_100).
  long long shaped_chunk_size = 8192;
  // The defaults are the best of a sweep on an H200 (bench/RESULTS.md): 256 x 8 elements and
  // chunks of 2048, one loop iteration per thread.

  /// Empty when valid, else what is wrong.
  std::string check() const;
  /// Threads per block of the kernels of `variants` (those of one spec): shaped_block_size where
  /// every one has rows and columns, else block_size. The CUDA emitter compiles it in, the
  /// launcher and a spec loaded at run time report it (OptimizerInfo::block_size).
  int block_size_for(const std::vector<Program>& variants) const;
};

/// `<variant>_<param storage>_<state storage>_<stage>`, e.g. adam_amsgrad_bf16_f32_update.
std::string kernel_name(const Program& variant, const Storage& storage, const Stage& stage);
/// `<update kernel's name>_long_rows`: the Update stage of kernel set `s` of the variant in vectors
/// of kernel_abi::kLongRowVector elements a thread, which a plan of long rows launches instead
/// (KernelInfo::long_row_update). Empty where the set has none: its step's Update stage reads no
/// element's row, column or matrix (update_reads_position), or an operand is not f32 (their
/// vector is 8 already, or a master copy's registers would not hold two of them), or it is a
/// program or a step on shards.
std::string long_row_update_name(const Program& variant, const Storage& s);
/// `<update kernel's name>_unit_matrices`: the Update stage of kernel set `s` for the tensors whose
/// matrices are one element (Program::unit_matrices, KernelInfo::unit_update), launched after the
/// variant's own; empty where the variant has no such code.
std::string unit_update_name(const Program& variant, const Storage& s);
/// Elements per block of the variant's kernels in storage `s`: blockwise_chunk_size where a state
/// is 8-bit, shaped_chunk_size for a variant with rows and columns, narrow_chunk_size where any
/// other operand the variant has is not f32; else reduce_chunk_size for a variant with Reduce
/// stages, chunk_size for the others.
long long chunk_size_for(const KernelTuning& tuning, const Program& variant, const Storage& s);
/// `<variant>_group`: the variant's group kernel.
std::string group_kernel_name(const Program& variant);
/// The oldest GPU (compute capability x 10, e.g. 80) that the variant's kernels in storage `s` run
/// on: the newest minimum_compute_capability of the params' dtype and of its states' (80 where any is
/// bf16), as the runtime's minimum_compute_capability(OptimizerInfo, KernelInfo) computes it. Below
/// it those stage kernels are compiled empty, and the runtime refuses to launch them.
int minimum_arch(const Program& variant, const Storage& s);

/// A variant's group values as the fields of its GroupValues struct: floats first, then bools,
/// each in hoisting order.
struct GroupValueField {
  std::string name;
  bool is_bool;
  int index;  ///< into Program::values[Domain::Group]
};
std::vector<GroupValueField> group_value_fields(const Program& variant);
/// sizeof(GroupValues) on the device (floats 4 bytes, bools 1, padded to 4).
int group_values_size(const Program& variant);

/// The whole kernel source for a spec: the kernels of its kernel plan (optimizer_tables.h's
/// kernel_tables of `variants` in `storage`), named and sized as the plan says.
std::string emit_cuda(const Spec& spec, const std::vector<Program>& variants, const std::vector<Storage>& storage,
                      const KernelTuning& tuning);

}  // namespace optgen

#include "emit_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "clipping.h"
#include "code_writer.h"
#include "element_code.h"
#include "emit_common.h"
#include "expr_printer.h"
#include "group_code.h"
#include "optgen/blockwise8.h"
#include "optgen/kernel_abi.h"
#include "optimizer_tables.h"
#include "shapes.h"

namespace optgen {

std::string KernelTuning::check() const {
  if (!kernel_abi::valid_block_size(block_size))
    return "block size " + std::to_string(block_size) + " must be a power of two from 32 to 1024";
  if (!kernel_abi::valid_elements_per_thread(elements_per_thread))
    return "elements per thread " + std::to_string(elements_per_thread) + " must be a power of two up to 64";
  const std::pair<int, const char*> budgets[] = {
      {min_blocks_per_sm, "min blocks per SM"},
      {reduce_min_blocks_per_sm, "min blocks per SM of the Reduce stages"},
      {shaped_min_blocks_per_sm, "min blocks per SM of the Reduce stages with rows and columns"},
      {shaped_runs_min_blocks_per_sm,
       "min blocks per SM of the Reduce stages of rows and columns that are chunk runs only"},
      {blockwise_min_blocks_per_sm, "min blocks per SM of the Update stages with 8-bit states"}};
  for (const auto& [blocks, what] : budgets)
    if (blocks < 0 || blocks > 32)
      return std::string(what) + " " + std::to_string(blocks) + " must be from 0 (ptxas chooses) to 32";
  if (!kernel_abi::valid_block_size(shaped_block_size))
    return "block size " + std::to_string(shaped_block_size) +
           " of specs with rows and columns must be a power of "
           "two from 32 to 1024";
  if (blockwise_chunk_size % blockwise8::kBlockSize != 0 || blockwise_chunk_size <= 0 ||
      blockwise_chunk_size > (1LL << 30))
    return "8-bit chunk size " + std::to_string(blockwise_chunk_size) +
           " must be a multiple of 256 up to 2^30: the chunks of kernel sets with 8-bit states hold whole blocks of "
           "256";
  for (long long size : {chunk_size, narrow_chunk_size, reduce_chunk_size, shaped_chunk_size})
    if (size < 64 || size % 64 != 0 || size > (1LL << 30))
      return "chunk size " + std::to_string(size) + " must be a multiple of 64 up to 2^30";
  return "";
}

int minimum_arch(const Program& variant, const Storage& s) {
  int arch = minimum_compute_capability(s.param);
  for (const auto& state : variant.states) arch = std::max(arch, minimum_compute_capability(s.state_dtype(state)));
  // The matrix functions' kernels and products are bf16's, or f32 beside them (optgen/device/matrices.cuh).
  if (!variant.matrix_values.empty()) arch = std::max(arch, minimum_compute_capability(DType::BF16));
  return arch;
}

std::string kernel_name(const Program& variant, const Storage& storage, const Stage& stage) {
  return variant.variant + (variant.for_shards ? "_shards_" : "_") + storage.name() + "_" + stage.name;
}

std::string group_kernel_name(const Program& variant) { return variant.variant + "_group"; }

std::string long_row_update_name(const Program& variant, const Storage& s) {
  if (!variant.is_step() || variant.for_shards || !update_reads_position(variant)) return "";
  if (s.param != DType::F32 || s.param_write != ParamWrite::Nearest) return "";
  for (const auto& state : variant.states)
    if (s.state_dtype(state) != DType::F32) return "";
  return kernel_name(variant, s, variant.stages.back()) + "_long_rows";
}

std::string unit_update_name(const Program& variant, const Storage& s) {
  if (!variant.unit_matrices) return "";
  return kernel_name(variant, s, variant.stages.back()) + "_unit_matrices";
}

long long chunk_size_for(const KernelTuning& tuning, const Program& variant, const Storage& s) {
  bool f32 = s.param == DType::F32 && s.param_write == ParamWrite::Nearest;
  for (const auto& state : variant.states) {
    if (is_blockwise(s.state_dtype(state))) return tuning.blockwise_chunk_size;
    f32 = f32 && s.state_dtype(state) == DType::F32;
  }
  if (uses_shapes(variant)) return tuning.shaped_chunk_size;
  if (!f32) return tuning.narrow_chunk_size;
  return variant.stages.size() > 1 ? tuning.reduce_chunk_size : tuning.chunk_size;
}

int KernelTuning::block_size_for(const std::vector<Program>& variants) const {
  const bool shaped = !variants.empty() && std::all_of(variants.begin(), variants.end(), uses_shapes);
  return shaped ? shaped_block_size : block_size;
}

std::vector<GroupValueField> group_value_fields(const Program& variant) {
  std::vector<GroupValueField> fields;
  for (bool bools : {false, true})
    for (size_t i = 0; i < variant.values[Domain::Group].size(); ++i) {
      const auto& v = variant.values[Domain::Group][i];
      if ((v.value->type == ValueType::Bool) == bools) fields.push_back({v.name, bools, static_cast<int>(i)});
    }
  return fields;
}

int group_values_size(const Program& variant) {
  int floats = 0, bools = 0;
  for (const auto& f : group_value_fields(variant)) (f.is_bool ? bools : floats) += 1;
  if (floats + bools == 0) return 4;  // the placeholder field
  int size = 4 * floats + bools;
  return floats > 0 ? (size + 3) / 4 * 4 : size;
}

namespace {

/// CUDA spelling of expressions: in float (tensor and element code) or double (group code).
class CudaPrinter : public ExprPrinter {
 public:
  /// `program`: where Reduced leaves find their index (tensor code only).
  explicit CudaPrinter(bool double_precision, const Program* program = nullptr)
      : double_(double_precision), program_(program) {}

  /// Where the shaped code of a variant with rows and columns finds an element's row, column and
  /// matrix (`ix_.p`, or `p_` in row code); empty where that code has none. `order`: the stage
  /// whose code it is (shapes.h's loaded_value), which loads the values earlier stages stored.
  struct ShapedIndices {
    std::string row, col, matrix;
    int order = 0;
  };
  void set_shaped(const ShapedIndices& indices) {
    shaped_ = indices;
    stored_ = program_ && indices.order > 0 ? stored_values(*program_) : std::vector<StoredValue>();
  }
  /// A value an earlier stage stored: sh_.row_value(slot, row), ... (Shaped).
  std::string load(const StoredValue& v) const {
    const std::string slot = std::to_string(v.slot);
    std::string value;
    switch (v.level) {
      case Domain::Row: value = "sh_.row_value(" + slot + ", " + index(shaped_.row, *v.value) + ")"; break;
      case Domain::Column: value = "sh_.col_value(" + slot + ", " + index(shaped_.col, *v.value) + ")"; break;
      case Domain::Matrix: value = "sh_.matrix_value(" + slot + ", " + index(shaped_.matrix, *v.value) + ")"; break;
      default: throw InternalError("emit_cuda: stored value '" + v.name + "' of a domain without values");
    }
    return double_ ? "static_cast<double>(" + value + ")" : value;
  }

  /// Prints float division and square root as calls of `object`'s div and sqrt (element_math.h's
  /// IeeeMath or CheckedMath: the Update stage's `m_`) rather than `/` and `::sqrtf`.
  void set_math(std::string object) { math_ = std::move(object); }

 protected:
  std::string constant(const Node& c) const override {
    if (c.type == ValueType::Bool) return c.value != 0 ? "true" : "false";
    return double_ ? cuda_double_literal(c.value) : cuda_float_literal(c.value);
  }
  std::string leaf(const Node& var) const override {
    if (var.var == VarKind::Step) return "static_cast<double>(step)";
    if (var.var == VarKind::Numel) return double_ ? "static_cast<double>(numel_)" : "static_cast<float>(numel_)";
    if (var.var == VarKind::Factored) return "factored_";
    if (var.var == VarKind::Rows) return double_ ? "static_cast<double>(rows_)" : "static_cast<float>(rows_)";
    if (var.var == VarKind::Cols) return double_ ? "static_cast<double>(cols_)" : "static_cast<float>(cols_)";
    if (var.var == VarKind::Reduced) return reduced(var);
    if (var.var == VarKind::State && var.level == Domain::Tensor) return tensor_state(var);
    if (var.var == VarKind::State && var.level != Domain::Element) return shaped_state(var);
    if (var.var == VarKind::Hoisted)
      if (const StoredValue* v = loaded_value(stored_, var.name, var.level, shaped_.order)) return load(*v);
    return var.name;
  }
  std::string call(Builtin fn, const std::vector<std::string>& args) const override {
    if (fn == Builtin::Sqrt && !double_ && !math_.empty()) return math_ + ".sqrt(" + args.at(0) + ")";
    std::string out = cuda_function(builtin_info(fn), double_) + "(";
    for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + args[i];
    return out + ")";
  }
  std::optional<std::string> binary_as_call(BinaryOp op, const std::string& a, const std::string& b) const override {
    if (op == BinaryOp::Div && !double_ && !math_.empty()) return math_ + ".div(" + a + ", " + b + ")";
    if (op == BinaryOp::Mod) return "::optgen::mod(" + a + ", " + b + ")";
    if (op != BinaryOp::Pow) return std::nullopt;
    return (double_ ? "::pow(" : "::powf(") + a + ", " + b + ")";
  }

 private:
  /// A reduction's result: results_.of_tensor(r) or of_group(r) (optgen/device/reduce.cuh's Results) in
  /// tensor code; sh_.row_result(s, row), ... for one per row, column or matrix (Shaped).
  std::string reduced(const Node& var) const {
    if (program_)
      for (size_t r = 0; r < program_->reductions.size(); ++r) {
        const auto& reduction = program_->reductions[r];
        if (reduction.name != var.name) continue;
        const std::string s = std::to_string(scope_index(*program_, r));
        std::string value;
        switch (reduction.scope) {
          case Domain::Group: return "results_.of_group(" + std::to_string(r) + ")";
          case Domain::Optimizer:
            return "results_.of_optimizer(" + std::to_string(r) + ", " +
                   (reduction.op == ReduceOp::Max ? "true" : "false") + ")";
          case Domain::Tensor: return "results_.of_tensor(" + std::to_string(r) + ")";
          case Domain::Row: value = "sh_.row_result(" + s + ", " + index(shaped_.row, var) + ")"; break;
          case Domain::Column: value = "sh_.col_result(" + s + ", " + index(shaped_.col, var) + ")"; break;
          case Domain::Matrix: value = "sh_.matrix_result(" + s + ", " + index(shaped_.matrix, var) + ")"; break;
          case Domain::Element: throw InternalError("emit_cuda: reduction '" + var.name + "' into the element domain");
        }
        return double_ ? "static_cast<double>(" + value + ")" : value;
      }
    throw InternalError("emit_cuda: reduction '" + var.name + "' read outside tensor or shaped code");
  }

  /// A state of one value per tensor, read by tensor code: ts_.load(operand) (device/operands.cuh's
  /// TensorStates).
  std::string tensor_state(const Node& var) const {
    if (!program_) throw InternalError("emit_cuda: state '" + var.name + "' read outside tensor code");
    const auto& states = program_->states;
    const size_t op = std::find(states.begin(), states.end(), var.name) - states.begin();
    if (op == states.size()) throw InternalError("emit_cuda: '" + var.name + "' is not a state of the variant");
    const std::string value = "ts_.load(" + std::to_string(op + 2) + ")";
    return double_ ? "static_cast<double>(" + value + ")" : value;
  }

  /// A row or column state, read by the code of its level: sh_.row_state(operand, j, row).
  std::string shaped_state(const Node& var) const {
    if (!program_) throw InternalError("emit_cuda: state '" + var.name + "' read outside shaped code");
    const bool row = var.level == Domain::Row;
    const auto list = states_of_shape(*program_, row ? StateShape::Rows : StateShape::Cols);
    const size_t j = std::find(list.begin(), list.end(), var.name) - list.begin();
    const size_t op = std::find(program_->states.begin(), program_->states.end(), var.name) - program_->states.begin();
    if (j == list.size() || op == program_->states.size())
      throw InternalError("emit_cuda: '" + var.name + "' is not a row or column state of the variant");
    const std::string value = std::string(row ? "sh_.row_state(" : "sh_.col_state(") + std::to_string(op + 2) + ", " +
                              std::to_string(j) + ", " + index(row ? shaped_.row : shaped_.col, var) + ")";
    return double_ ? "static_cast<double>(" + value + ")" : value;
  }

  static const std::string& index(const std::string& text, const Node& var) {
    if (text.empty()) throw InternalError("emit_cuda: '" + var.name + "' read where its row or column is unknown");
    return text;
  }

  ShapedIndices shaped_;
  std::vector<StoredValue> stored_;
  std::string math_;

  bool double_;
  const Program* program_;
};

class CudaEmitter {
 public:
  CudaEmitter(const Spec& spec, const KernelTuning& tuning) : spec_(spec), tuning_(tuning) {}

  /// `tables`: the kernel plan of `variants` in `storage` (kernel_tables), whose kernels it emits.
  std::string emit(const std::vector<Program>& variants, const std::vector<Storage>& storage,
                   const KernelTables& tables) {
    CodeWriter w;
    w.line("// Tuning: parameters of the emitted code (optgen emit --block-size, --shaped-block-size,");
    w.line("// --elements-per-thread, --min-blocks-per-sm, --reduce-min-blocks-per-sm, --shaped-min-blocks-per-sm,");
    w.line("// --shaped-runs-min-blocks-per-sm, --blockwise-min-blocks-per-sm); the launcher launches with the");
    w.line("// same values. The runtime may compile this source for another launch shape (kernel_abi.h,");
    w.line("// \"Launch shape\"): defined beforehand, the block size and elements per thread are that shape's.");
    define_unless_given(w, kernel_abi::kBlockSizeMacro, tables.block_size, "threads per block");
    define_unless_given(w, kernel_abi::kElementsPerThreadMacro, tuning_.elements_per_thread,
                        "elements in flight per thread and iteration");
    w.line("// Blocks per SM a stage kernel must fit, given as threads per SM so that another block size");
    w.line("// keeps as many threads (at least one block): __launch_bounds__ caps the registers at 65536 /");
    w.line("// (threads per block * blocks).");
    w.line("#define OPTGEN_BLOCKS_PER_SM(threads) \\");
    w.line("  ((threads) >= 2 * OPTGEN_BLOCK_SIZE ? (threads) / OPTGEN_BLOCK_SIZE : 1)");
    launch_bounds(w, "OPTGEN_LAUNCH_BOUNDS", tuning_.min_blocks_per_sm, tuning_.block_size);
    launch_bounds(w, "OPTGEN_REDUCE_LAUNCH_BOUNDS", tuning_.reduce_min_blocks_per_sm, tuning_.block_size);
    launch_bounds(w, "OPTGEN_SHAPED_LAUNCH_BOUNDS", tuning_.shaped_min_blocks_per_sm, tuning_.block_size);
    launch_bounds(w, "OPTGEN_SHAPED_RUNS_LAUNCH_BOUNDS", tuning_.shaped_runs_min_blocks_per_sm,
                  tuning_.shaped_block_size);
    if (std::any_of(variants.begin(), variants.end(), uses_shapes)) {
      // A lean kernel set's (lean_operands) Update stage and shaped Reduce stage of chunk runs only.
      launch_bounds(w, "OPTGEN_LEAN_LAUNCH_BOUNDS", tuning_.min_blocks_per_sm, tuning_.block_size,
                    tuning_.shaped_block_size);
      launch_bounds(w, "OPTGEN_LEAN_SHAPED_RUNS_LAUNCH_BOUNDS", tuning_.shaped_runs_min_blocks_per_sm,
                    tuning_.shaped_block_size, tuning_.shaped_block_size);
    }
    blockwise_launch_bounds(w);
    w.line();
    w.line("#include \"optgen/device/kernels.cuh\"");
    const bool matrices =
        std::any_of(variants.begin(), variants.end(), [](const Program& v) { return !v.matrix_values.empty(); });
    if (matrices) {
      // bf16 matrices: empty on older GPUs, as the kernel sets that use them (minimum_arch).
      w.line("#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= " +
             std::to_string(minimum_compute_capability(DType::BF16) * 10));
      w.line("#include \"optgen/device/matrices.cuh\"  // its matrix functions' kernels");
      w.line("#endif");
    }
    w.line();
    for (const auto& v : variants) variant(w, v, storage);
    for (std::size_t i = 0; i < variants.size(); ++i) {
      for (const KernelRow* k : tables.kernels_of(static_cast<int>(i))) {
        for (std::size_t s = 0; s < k->stages.size(); ++s)
          stage_kernel(w, variants[i], *k, variants[i].stages[s], k->stages[s]);
        if (!k->long_row_update.empty())
          stage_kernel(w, variants[i], *k, variants[i].stages.back(), k->long_row_update, true);
        if (!k->unit_update.empty())
          stage_kernel(w, *variants[i].unit_matrices, *k, variants[i].stages.back(), k->unit_update);
        for (std::size_t j = 0; j < k->programs.size(); ++j) {
          const Program& program = variants[i].programs[j];
          stage_kernel(w, program, *k, program.stages.back(), k->programs[j]);
        }
        for (std::size_t s = 0; s < k->shard_stages.size(); ++s)
          stage_kernel(w, *variants[i].shard_step, *k, variants[i].shard_step->stages[s], k->shard_stages[s]);
      }
      group_kernel(w, variants[i], tables.variants[i].group_kernel);
    }
    return w.str();
  }

 private:
  /// Whether a state of the variant is 8-bit under storage `s` (its Update stage is blockwise).
  static bool has_blockwise_state(const Program& p, const Storage& s) {
    for (const auto& state : p.states)
      if (is_blockwise(s.state_dtype(state))) return true;
    return false;
  }

  /// `#define NAME value  // what`, unless NAME is defined already.
  static void define_unless_given(CodeWriter& w, const std::string& name, int value, const std::string& what) {
    w.line("#ifndef " + name);
    w.line("#define " + name + " " + std::to_string(value) + "  // " + what);
    w.line("#endif");
  }

  /// `#define NAME __launch_bounds__(OPTGEN_BLOCK_SIZE, blocks)`, which caps the registers: at
  /// `block_size` `min_blocks` blocks per SM, at any other block size (the spec's own,
  /// block_size_for; a launch shape's) as many threads (OPTGEN_BLOCKS_PER_SM).
  /// `extra`: threads per SM beyond min_blocks * block_size (a lean kernel set's block).
  void launch_bounds(CodeWriter& w, const std::string& name, int min_blocks, int block_size, int extra = 0) const {
    if (min_blocks == 0) {
      w.line("#define " + name + " __launch_bounds__(OPTGEN_BLOCK_SIZE)  // ptxas chooses the registers");
      return;
    }
    const int threads = min_blocks * block_size + extra;
    w.line("#define " + name + " __launch_bounds__(OPTGEN_BLOCK_SIZE, OPTGEN_BLOCKS_PER_SM(" + std::to_string(threads) +
           "))  // " + std::to_string(threads) + " threads per SM");
  }

  /// OPTGEN_BLOCKWISE_LAUNCH_BOUNDS(kernel, threads): an Update stage with 8-bit states fits
  /// `threads` per SM (blockwise_threads), or one block fewer where the compilation names it in
  /// kernel_abi::kFewerBlocksMacro, having seen it spill there (compile_kernels).
  void blockwise_launch_bounds(CodeWriter& w) const {
    const std::string macro = kernel_abi::kFewerBlocksMacro;
    const std::string bounds = kernel_abi::kBlockwiseLaunchBoundsMacro;
    if (tuning_.blockwise_min_blocks_per_sm == 0) {
      w.line("#define " + bounds + "(kernel, threads) __launch_bounds__(OPTGEN_BLOCK_SIZE)  // ptxas chooses");
      return;
    }
    const std::string block = std::to_string(tuning_.block_size);
    w.line("// An Update stage with 8-bit states: `threads` per SM, " + block + " fewer where it spills there");
    w.line("// (the compilation names it in " + macro + ", kernel_abi.h).");
    w.line("#define " + bounds + "(kernel, threads) \\");
    w.line("  __launch_bounds__(OPTGEN_BLOCK_SIZE,                    \\");
    w.line("                    OPTGEN_BLOCKS_PER_SM((threads) - (::optgen::kernel_abi::named_in(" + macro +
           ", #kernel) ? " + block + " : 0)))");
  }

  /// The 32-bit registers a lane's BlockTile (device/blockwise_update.cuh) holds for the next block
  /// while the 8-bit Update stage of `p` in storage `s` updates the one in hand: a lane's share of
  /// the block of each operand the stage loads (update_loads), an 8-bit state's codes and its
  /// block's absmax.
  static int block_tile_registers(const Program& p, const Storage& s) {
    constexpr int kLaneElements = blockwise8::kBlockSize / 32;  // BlockTile's V
    const unsigned loads = update_loads(update_stage_view(p));
    const std::vector<DType> dtypes = operand_dtypes(p, s);
    int registers = 0;
    for (std::size_t op = 0; op < dtypes.size(); ++op)
      if ((loads >> op) & 1u)
        registers += is_blockwise(dtypes[op]) ? kLaneElements / 4 + 1 : kLaneElements * size_of(dtypes[op]) / 4;
    return registers;
  }

  /// Threads per SM an Update stage with 8-bit states is built for, given its block_tile_registers:
  /// --blockwise-min-blocks-per-sm blocks, one fewer (at least one) where the tile takes more
  /// registers than AdamW's with f32 params (22), the largest measured to fit three blocks without
  /// spills on sm_90: AMSGrad's with f32 params (25) spilled there, and the second compilation that
  /// found it cost as much as the first (bench/RESULTS.md, 2026-12-05, "8-bit Update kernels with a
  /// heavy next block built for two blocks from the start": of 18 kernels this rule gives two
  /// blocks at sm_90, 16 spilled at three). A kernel it misses (bf16 params with four 8-bit states:
  /// Adan's) still spills in the first compilation and is built for one block fewer by the second.
  int blockwise_threads(int tile_registers) const {
    constexpr int kRegistersThatFit = 22;
    const int blocks = tuning_.blockwise_min_blocks_per_sm;
    return std::max(1, tile_registers > kRegistersThatFit ? blocks - 1 : blocks) * tuning_.block_size;
  }

  void variant(CodeWriter& w, const Program& p, const std::vector<Storage>& storage) {
    w.line(variant_banner(p));
    auto ns = w.block("namespace variants::" + p.variant, "}  // namespace variants::" + p.variant);
    w.line();
    group_values_struct(w, p);
    w.line();
    group_struct(w, p);
    if (p.unit_matrices) {
      const Program& unit = *p.unit_matrices;
      w.line();
      w.line("/// The step's code for tensors whose matrices are one element (a 1x1 convolution's weight): each");
      w.line("/// row, column and matrix value its element's, computed where it is read. The Reduce stages whose");
      w.line("/// chunk runs read rows or columns run it for those tensors (kernel_abi::kUnitMatrices), which have");
      w.line("/// no lines, and its Update stage is a kernel of its own, launched after the step's.");
      auto inner = w.block("namespace unit", "}  // namespace unit");
      for (const auto& stage : unit.stages)
        if (has_unit_reduce(p, stage)) {
          reduce_struct(w, unit, stage);
          w.line();
        }
      update_struct(w, unit);
    }
    for (const auto& stage : p.stages) {
      if (stage.kind != StageKind::Reduce) continue;
      w.line();
      reduce_struct(w, p, stage);
    }
    w.line();
    update_struct(w, p);
    for (const auto& s : storage) {
      w.line();
      operands_struct(w, p, s);
    }
    for (const Program& program : p.programs) {
      w.line();
      w.line("/// Program '" + program.entry + "' (the spec's `programs:`): beside the step, over its operands.");
      auto inner = w.block("namespace " + program.entry, "}  // namespace " + program.entry);
      group_values_struct(w, program);
      w.line();
      group_struct(w, program);
      w.line();
      update_struct(w, program);
    }
    if (p.shard_step) {
      w.line();
      w.line("/// The step on shards (Program::shard_step): its stages store no matrix, row or column value.");
      auto inner = w.block("namespace shards", "}  // namespace shards");
      for (const auto& stage : p.shard_step->stages)
        if (stage.kind == StageKind::Reduce) {
          reduce_struct(w, *p.shard_step, stage);
          w.line();
        }
      update_struct(w, *p.shard_step);
    }
  }

  static const char* element_type(DType dtype) {
    switch (dtype) {
      case DType::F32: return "float";
      case DType::BF16: return "optgen::bf16";
      case DType::F16: return "optgen::f16";
      case DType::Q8:
      case DType::UQ8: break;  // states only: never a param's
    }
    throw InternalError("element_type: no element type for " + std::string(to_string(dtype)));
  }

  static const char* param_write(ParamWrite write) {
    switch (write) {
      case ParamWrite::Nearest: return "optgen::ParamWrite::Nearest";
      case ParamWrite::Master: return "optgen::ParamWrite::Master";
      case ParamWrite::Stochastic: return "optgen::ParamWrite::Stochastic";
    }
    throw InternalError("param_write: unknown param write");
  }

  /// The operand table of the variant's kernels in storage `s` (optgen/storage.h): each operand's
  /// codec, the parameter's element type and how it is written.
  static void operands_struct(CodeWriter& w, const Program& p, const Storage& s) {
    const auto names = operand_names(p);
    const std::vector<DType> dtypes = operand_dtypes(p, s);
    std::string list;
    for (size_t op = 0; op < names.size(); ++op) {
      list += (op ? ", " : "") + names[op] + " " + to_string(dtypes[op]);
      if (op == 0 && s.param_write == ParamWrite::Master)
        list += std::string(" (its master copy; the param ") + to_string(s.param) + ")";
      if (op == 0 && s.param_write == ParamWrite::Stochastic) list += " (rounded stochastically)";
    }
    w.line("/// Storage " + s.text() + ": " + list + ".");
    auto st = w.block("struct " + operands_struct_name(s), "};");
    // Bit masks of operand indices, as Reduce::loads: folded once the operand loops are unrolled
    // (a chain of comparisons was not always, and cost registers).
    unsigned bf16 = 0, f16 = 0, q8 = 0, uq8 = 0;
    for (size_t op = 0; op < names.size(); ++op) {
      if (dtypes[op] == DType::BF16) bf16 |= 1u << op;
      if (dtypes[op] == DType::F16) f16 |= 1u << op;
      if (dtypes[op] == DType::Q8) q8 |= 1u << op;
      if (dtypes[op] == DType::UQ8) uq8 |= 1u << op;
    }
    w.line(std::string("typedef ") + element_type(s.param) + " Param;");
    if (q8 | uq8)
      w.line("static constexpr int kVector = 8;  // elements per thread and access: a lane's share of an 8-bit block");
    else
      w.line("static constexpr int kVector = " + std::to_string(16 / size_of(dtypes[0])) +
             ";  // elements per thread and access: 16 bytes of operand 0");
    w.line(std::string("static constexpr optgen::ParamWrite kParamWrite = ") + param_write(s.param_write) + ";");
    std::size_t bytes = s.param_write == ParamWrite::Master ? size_of(s.param) : 0;  // the param, also written
    for (DType d : dtypes) bytes += size_of(d);
    w.line("static constexpr int kBytesPerElement = " + std::to_string(bytes) +
           ";  // one access of each operand (update_tiles)");
    w.line("static constexpr unsigned kBlockwise = " + hex(q8 | uq8) + ";  // operands in 8-bit blocks");
    w.line("static __device__ __forceinline__ constexpr bool blockwise(int op_) { return (kBlockwise >> op_) & 1u; }");
    w.line("static __device__ __forceinline__ constexpr optgen::DType codec(int op_) {");
    std::string chain = "  return ((" + hex(bf16) + " >> op_) & 1u) ? optgen::DType::BF16 : ((" + hex(f16) +
                        " >> op_) & 1u) ? optgen::DType::F16 : ";
    if (q8 | uq8)
      chain += "((" + hex(q8) + " >> op_) & 1u) ? optgen::DType::Q8 : ((" + hex(uq8) +
               " >> op_) & 1u) ? optgen::DType::UQ8 : ";
    w.line(chain + "optgen::DType::F32;");
    w.line("}");
  }

  static std::string operands_struct_name(const Storage& s) { return "Operands_" + s.name(); }

  /// The codec of each operand (operand_names) in storage `s`: a master copy's param is f32.
  static std::vector<DType> operand_dtypes(const Program& p, const Storage& s) {
    std::vector<DType> dtypes = {s.param_write == ParamWrite::Master ? DType::F32 : s.param, s.param};
    for (const auto& state : p.states) dtypes.push_back(s.state_dtype(state));
    for (const auto& m : p.matrix_values) dtypes.push_back(s.matrix_dtype(m.name));
    return dtypes;
  }

  void group_values_struct(CodeWriter& w, const Program& p) {
    if (p.is_step()) {
      w.line("/// Computed once per step and param group by Group::step, kept in the group table, read by the");
      w.line("/// tensor and element code.");
    } else {
      w.line("/// Computed by each block of the program from its group's hyperparameters and scalar state");
      w.line("/// (Group::step), read by the element code.");
    }
    {
      auto s = w.block("struct GroupValues", "};");
      auto fields = group_value_fields(p);
      ExprPrinter ir;  // the IR's notation, for the comments
      for (const auto& f : fields)
        w.line(std::string(f.is_bool ? "bool " : "float ") + f.name + ";  // " +
               ir.print(p.values[Domain::Group][f.index].value));
      if (fields.empty()) w.line("float unused;  // this variant reads no per-group value");
    }
    if (p.is_step())
      w.line("static_assert(sizeof(GroupValues) == " + std::to_string(group_values_size(p)) +
             ", \"the launcher's values_stride holds this\");");
  }

  void group_struct(CodeWriter& w, const Program& p) {
    w.line(p.is_step() ? "/// The group code: the spec's per_step, in double, once per step and param group."
                       : "/// The program's group code, in double: the values its element code reads.");
    auto s = w.block("struct Group", "};");
    w.line("typedef GroupValues Values;");
    w.line("static constexpr int kScalarStates = " + std::to_string(spec_.scalar_states.size()) + ";");
    const bool commits = !p.scalar_state_commits.empty();
    w.line(std::string("static constexpr bool kCommits = ") + (commits ? "true" : "false") +
           ";  // 'update' assigns scalar state (advance)");
    w.line();
    w.line("/// Advances `scalar_state_` (the values the previous step left) and computes the values of step");
    w.line("/// `step` (counting from 1) from the hyperparameters `h_`.");
    {
      auto fn = w.block(
          "static __device__ __forceinline__ GroupValues step([[maybe_unused]] const double* h_, [[maybe_unused]] "
          "double* scalar_state_, "
          "[[maybe_unused]] long long step)");
      CudaPrinter printer(true);
      auto values = write_group_code(w, p, printer, {"step"});
      w.line("GroupValues result_;");
      for (const auto& f : group_value_fields(p)) {
        const std::string& value = values[f.index];
        w.line("result_." + f.name + " = " + (f.is_bool ? value : "static_cast<float>(" + value + ")") + ";");
      }
      if (group_value_fields(p).empty()) w.line("result_.unused = 0.0f;");
      w.line("return result_;");
    }
    if (!commits) return;
    w.line();
    w.line("/// The scalar state after step `step`, once the Reduce stages are done: per_step's, then what");
    w.line("/// 'update' assigns from the results of the reductions over the group; from the scalar state");
    w.line("/// `old_state_` the step started from, into `scalar_state_` (the Update stage's commit).");
    auto advance = w.block(
        "static __device__ __forceinline__ void advance([[maybe_unused]] const double* h_, [[maybe_unused]] const "
        "double* old_state_, [[maybe_unused]] long long step, [[maybe_unused]] const optgen::Results& results_, "
        "double* scalar_state_)");
    CudaPrinter advance_printer(true, &p);
    write_advance_code(w, p, advance_printer, {"step"});
  }

  /// The operands every stage kernel of the variant indexes: param, grad, then its states.
  static std::vector<std::string> operand_names(const Program& p) {
    std::vector<std::string> names = {"param", "grad"};
    names.insert(names.end(), p.states.begin(), p.states.end());
    for (const auto& m : p.matrix_values) names.push_back(m.name);  // the runtime's buffers (bf16 or f32)
    return names;
  }

  /// The names every stage's code must not declare.
  static std::set<std::string> taken_names(const Program& p) {
    std::set<std::string> taken = {"numel", "param", "grad"};
    for (const auto& s : p.states) taken.insert(s);
    for (const auto& f : group_value_fields(p)) taken.insert(f.name);
    for (const auto& t : p.values[Domain::Tensor]) taken.insert(t.name);
    for (const auto& r : p.reductions) taken.insert(r.name);
    for (const auto& m : p.matrix_values) taken.insert(m.name);  // read as operands (read_operands)
    return taken;
  }

  /// `const float param = v_[0];` for each operand `roots` read.
  static void read_operands(CodeWriter& w, const Program& p, const std::vector<Expr>& roots) {
    std::set<std::string> read;
    for (const auto& r : roots)
      for_each_node(r, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->level == Domain::Element) read.insert(e->name);
      });
    const auto names = operand_names(p);
    for (size_t i = 0; i < names.size(); ++i)
      if (read.count(names[i])) w.line("const float " + names[i] + " = v_[" + std::to_string(i) + "];");
  }

  /// `kGradNormSlot`: the result that holds the squared global gradient norm of a variant that clips
  /// (clipping.h), which the stages publish; -1 for none.
  static void grad_norm_slot(CodeWriter& w, const Program& p) {
    const int slot = clipping::grad_norm_slot(p);
    w.line("static constexpr int kGradNormSlot = " + std::to_string(slot) + ";" +
           (slot >= 0 ? "  // grad_norm_squared: this variant clips" : ""));
  }

  /// `kFirstStage`: no Reduce stage comes before the Update stage, which then waits for the kernel
  /// before it on the stream before it reads anything (optgen/device/update.cuh).
  static void first_stage(CodeWriter& w, const Program& p) {
    w.line(std::string("static constexpr bool kFirstStage = ") + (p.stages.size() == 1 ? "true" : "false") +
           ";  // no Reduce stage before this one");
  }

  /// An Update stage's operand masks (read by update.cuh's update_stage): the element operands
  /// its code reads (update_loads), those it writes back (its element outputs), and the read-only
  /// states that start as the parameter, written at the group's first step only.
  static void operand_masks(CodeWriter& w, const Program& p) {
    const auto names = operand_names(p);
    w.line("static __device__ __forceinline__ constexpr bool loads(int op_) { return (" + hex(update_loads(p)) +
           " >> op_) & 1u; }");
    unsigned stores = 0, first_step_stores = 0;
    std::string stored, first_step_stored;
    for (const auto& o : p.element_outputs) {
      if (o.level != Domain::Element) continue;  // a row or column state: stored by apply
      const unsigned bit = 1u << (std::find(names.begin(), names.end(), o.name) - names.begin());
      (o.first_step_only ? first_step_stores : stores) |= bit;
      std::string& list = o.first_step_only ? first_step_stored : stored;
      list += (list.empty() ? "" : ", ") + o.name;
    }
    w.line("static constexpr unsigned kStores = " + hex(stores) + ";  // written back: " + stored);
    w.line("static constexpr unsigned kFirstStepStores = " + hex(first_step_stores) + ";  // " +
           (first_step_stored.empty() ? std::string("no read-only state starts as the parameter")
                                      : "written at the group's first step only: " + first_step_stored));
  }

  /// The reductions of Reduce stage `stage`, in the program's order, with their index r.
  static std::vector<std::pair<int, const ReductionValue*>> stage_reductions(const Program& p, const Stage& stage) {
    std::vector<std::pair<int, const ReductionValue*>> list;
    for (size_t r = 0; r < p.reductions.size(); ++r)
      if (p.reductions[r].stage == stage.number) list.push_back({static_cast<int>(r), &p.reductions[r]});
    return list;
  }

  /// The constants the stage drivers read of a list of reductions whose operands are `roots`: their
  /// count, the operands they load, which are maxima (else sums), where each result goes
  /// (kernel_abi::ReductionTable's r for reductions over tensors and groups, the scope's own index
  /// for rows, columns and matrices); `over_tensors` (runs of chunks, finished by finish_tensor):
  /// also which are over the group, and the clipping's slot.
  void reduction_constants(CodeWriter& w, const Program& p,
                           const std::vector<std::pair<int, const ReductionValue*>>& list,
                           const std::vector<Expr>& roots, bool over_tensors) {
    unsigned is_max = 0, is_group = 0;
    std::string slots;
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].second->op == ReduceOp::Max) is_max |= 1u << i;
      if (has_group_results(list[i].second->scope)) is_group |= 1u << i;
      slots += "i_ == " + std::to_string(i) + " ? " + std::to_string(scope_index(p, list[i].first)) + " : ";
    }
    w.line("static constexpr int kOperands = " + std::to_string(operand_names(p).size()) + ";");
    w.line("static constexpr int kReductions = " + std::to_string(list.size()) + ";");
    if (over_tensors) {
      w.line(std::string("static constexpr bool kGroupScope = ") + (is_group ? "true" : "false") +
             ";  // a reduction over the whole group");
      grad_norm_slot(w, p);
    }
    for (size_t i = 0; i < list.size(); ++i)
      w.line("// " + std::to_string(i) + ": " + list[i].second->name + ", " + to_string(list[i].second->op) +
             (list[i].second->scope == Domain::Optimizer
                  ? std::string(" over the optimizer (its groups' results combined)")
                  : " over each " + std::string(to_string(list[i].second->scope))) +
             " (result " + std::to_string(scope_index(p, list[i].first)) + ")");
    w.line("/// Whether operand `op` is read; whether reduction `i_` is a maximum (else a sum)" +
           std::string(over_tensors ? ", over the group" : "") + ";");
    w.line("/// where its result goes (kernel_abi::ReductionTable's r" +
           std::string(over_tensors ? "" : "; for rows, columns and matrices, ShapeTable's s") + ").");
    w.line("static __device__ __forceinline__ constexpr bool loads(int op_) { return (" + hex(element_loads(p, roots)) +
           " >> op_) & 1u; }");
    w.line("static __device__ __forceinline__ constexpr bool is_max(int i_) { return (" + hex(is_max) +
           " >> i_) & 1u; }");
    if (over_tensors)
      w.line("static __device__ __forceinline__ constexpr bool is_group(int i_) { return (" + hex(is_group) +
             " >> i_) & 1u; }");
    w.line("static __device__ __forceinline__ constexpr int slot(int i_) { return " + slots + "-1; }");
  }

  /// The name of a Reduce stage's struct: Reduce, or Reduce1, Reduce2, ... when there are several.
  static std::string reduce_struct_name(const Stage& stage) {
    return stage.name == "reduce" ? "Reduce" : "Reduce" + std::to_string(stage.number);
  }

  /// The reads of a stage's element code: the group values, tensor values and operands `roots` use.
  void element_prologue(CodeWriter& w, const Program& p, const std::vector<Expr>& roots) {
    read_group_values(w, p, roots);
    for (const HoistedValue* t : tensor_values_read(p, roots))
      w.line(std::string(t->value->type == ValueType::Bool ? "const bool " : "const float ") + t->name + " = tv_." +
             t->name + ";");
    read_operands(w, p, roots);
  }

  /// `const float name = k_.name;` for each group value `roots` read.
  void read_group_values(CodeWriter& w, const Program& p, const std::vector<Expr>& roots) {
    std::set<std::string> read;
    for (const auto& r : roots)
      for_each_node(r, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->var == VarKind::Hoisted && e->level == Domain::Group) read.insert(e->name);
      });
    for (const auto& f : group_value_fields(p))
      if (read.count(f.name))
        w.line(std::string(f.is_bool ? "const bool " : "const float ") + f.name + " = k_." + f.name + ";");
  }

  /// The per-tensor values a stage reads, computed once per block from the group values, the
  /// tensor's numel and the results of earlier reductions, in double, and handed to the element
  /// code as floats.
  void tensor_values(CodeWriter& w, const Program& p, const std::vector<const HoistedValue*>& list,
                     const std::set<std::string>& taken, bool shaped = false) {
    {
      auto s = w.block("struct TensorValues", "};");
      for (const HoistedValue* t : list)
        w.line(std::string(t->value->type == ValueType::Bool ? "bool " : "float ") + t->name + ";");
      if (list.empty()) w.line("// (this stage reads nothing computed per tensor)");
    }
    w.line("template <typename Ts_>");
    auto fn = w.block("static __device__ __forceinline__ TensorValues tensor(" + tensor_parameters(shaped) + ")");
    std::vector<Expr> roots;
    for (const HoistedValue* t : list) roots.push_back(t->value);
    CudaPrinter printer(true, &p);  // once per block: in double, so that numel is exact
    auto values = tensor_code(w, p, roots, printer, taken);
    w.line("TensorValues tv_;");
    for (size_t i = 0; i < values.size(); ++i) {
      const bool is_bool = list[i]->value->type == ValueType::Bool;
      w.line("tv_." + list[i]->name + " = " + (is_bool ? values[i] : "static_cast<float>(" + values[i] + ")") + ";");
    }
    w.line("return tv_;");
  }

  /// The parameters of tensor code: the group's values, the tensor's numel (and, with rows and
  /// columns, its shape), the results of earlier stages, and its states of one value per tensor.
  static std::string tensor_parameters(bool shaped) {
    return "[[maybe_unused]] const GroupValues& k_, [[maybe_unused]] long long numel_, [[maybe_unused]] const "
           "optgen::Results& results_, " +
           std::string(shaped ? "[[maybe_unused]] bool factored_, [[maybe_unused]] long long rows_, [[maybe_unused]] "
                                "long long cols_, "
                              : "") +
           "[[maybe_unused]] const Ts_& ts_";
  }

  /// Tensor code for `roots`, in double: the group values they read, then their temporaries;
  /// returns each root's text.
  static std::vector<std::string> tensor_code(CodeWriter& w, const Program& p, const std::vector<Expr>& roots,
                                              CudaPrinter& printer, const std::set<std::string>& taken) {
    std::set<std::string> group_read;
    for (const auto& r : roots)
      for_each_node(r, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->var == VarKind::Hoisted && e->level == Domain::Group)
          group_read.insert(e->name);
      });
    for (const auto& f : group_value_fields(p))
      if (group_read.count(f.name))
        w.line(std::string(f.is_bool ? "const bool " : "const double ") + f.name + " = k_." + f.name + ";");
    return write_level_code(w, roots, Domain::Tensor, printer, "double", taken);
  }

  /// The Update stage's states of one value per tensor (`shape: tensor`): their new values,
  /// computed as tensor values are and stored by the tensor's last block (device/update.cuh's
  /// end_update), each computed before any is stored.
  void tensor_state_stores(CodeWriter& w, const Program& p, const std::vector<const Output*>& outputs,
                           const std::set<std::string>& taken, bool shaped) {
    std::string names;
    for (const Output* o : outputs) names += (names.empty() ? "" : ", ") + o->name;
    w.line(std::string("static constexpr bool kTensorStates = ") + (outputs.empty() ? "false" : "true") + ";  // " +
           (outputs.empty() ? "no state of one value per tensor" : "stores a value per tensor: " + names));
    if (outputs.empty()) return;
    w.line();
    w.line("/// Each state of one value per tensor, stored once: by the tensor's last block.");
    w.line("template <typename Ts_>");
    auto fn = w.block("static __device__ __forceinline__ void store_tensor_states(" + tensor_parameters(shaped) + ")");
    std::vector<Expr> roots;
    for (const Output* o : outputs) roots.push_back(o->value);
    CudaPrinter printer(true, &p);
    auto values = tensor_code(w, p, roots, printer, taken);
    const auto operands = operand_names(p);
    for (size_t j = 0; j < outputs.size(); ++j)
      w.line("const float " + outputs[j]->name + "_next_ = static_cast<float>(" + values[j] + ");");
    for (const Output* o : outputs) {
      const size_t op = std::find(operands.begin(), operands.end(), o->name) - operands.begin();
      w.line("ts_.store(" + std::to_string(op) + ", " + o->name + "_next_);");
    }
  }

  // ---- The Reduce and Update structs of every variant, which reduce_stage (optgen/device/reduce_stage.cuh)
  // and update_stage (update.cuh, through its Position) drive; most of what follows is for variants with rows and
  // columns (uses_shapes), whose element code sees its row, column and
  // matrix (ix_.p, ix_.q, ix_.b); the matrix, column and row values it reads are loaded where an earlier stage stored
  // them (shapes.h's stored_values; Position loads them, kRowValues, ...), else computed where they are read, in float,
  // from the results of earlier stages and the row and column states. ----

  /// The names a shaped stage's code must not declare.
  static std::set<std::string> shaped_taken_names(const Program& p) {
    std::set<std::string> taken = taken_names(p);
    for (Domain d : {Domain::Matrix, Domain::Row, Domain::Column})
      for (const auto& v : p.values[d]) taken.insert(v.name);
    for (const char* name : {"k_", "tv_", "sh_", "ix_", "v_", "r_", "p_", "q_", "b_", "factored_", "rows_", "cols_",
                             "numel_", "results_", "ts_"})
      taken.insert(name);
    return taken;
  }

  /// Every root `roots` computes with in code of stage `order`, through the matrix, row and column
  /// values they read (but those it loads).
  static std::vector<Expr> with_shaped_values(const Program& p, const std::vector<Expr>& roots, int order) {
    std::vector<Expr> all = roots;
    for (const auto& [level, list] : shaped_values_read(p, roots, order))
      for (const HoistedValue* v : list) all.push_back(v->value);
    return all;
  }

  /// The code of `roots` (of `level`: Element, Row or Column) in a shaped stage: reads of group values,
  /// tensor values and operands, the matrix, column and row values read, then the roots'
  /// temporaries, all in float; returns the roots' values.
  std::vector<std::string> shaped_code(CodeWriter& w, const Program& p, const std::vector<Expr>& roots, Domain level,
                                       const CudaPrinter::ShapedIndices& indices, std::set<std::string>& taken,
                                       const std::string& math = "") {
    element_prologue(w, p, with_shaped_values(p, roots, indices.order));
    shaped_values(w, p, roots, indices, taken);
    CudaPrinter printer(false, &p);
    printer.set_shaped(indices);
    if (!math.empty()) printer.set_math(math);
    auto texts = write_level_code(w, roots, level, printer, "float", taken);
    for (const auto& [node, name] : printer.names) taken.insert(name);
    return texts;
  }

  /// `const float name = ...;` for each matrix, column and row value `roots` read, in that order
  /// (a row value may read a matrix value), each after the values it reads.
  void shaped_values(CodeWriter& w, const Program& p, const std::vector<Expr>& roots,
                     const CudaPrinter::ShapedIndices& indices, std::set<std::string>& taken) {
    auto values = shaped_values_read(p, roots, indices.order);
    for (Domain at : {Domain::Matrix, Domain::Column, Domain::Row}) {
      if (values[at].empty()) continue;
      std::vector<Expr> code;
      for (const HoistedValue* v : values[at]) code.push_back(v->value);
      CudaPrinter printer(false, &p);
      printer.set_shaped(indices);
      auto texts = write_level_code(w, code, at, printer, "float", taken);
      for (const auto& [node, name] : printer.names) taken.insert(name);
      for (size_t j = 0; j < code.size(); ++j)
        w.line(std::string(code[j]->type == ValueType::Bool ? "const bool " : "const float ") + values[at][j]->name +
               " = " + texts[j] + ";");
    }
  }

  static CudaPrinter::ShapedIndices element_indices(int order) { return {"ix_.p", "ix_.q", "ix_.b", order}; }

  /// A mask of the operands that element code of `roots` loads (row and column states are not
  /// element operands: code reads them through sh_).
  static unsigned element_loads(const Program& p, const std::vector<Expr>& roots) {
    std::set<std::string> loaded;
    for (const auto& root : roots)
      for_each_node(root, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->level == Domain::Element) loaded.insert(e->name);
      });
    const auto names = operand_names(p);
    unsigned loads = 0;
    for (size_t i = 0; i < names.size(); ++i)
      if (loaded.count(names[i])) loads |= 1u << i;
    return loads;
  }

  /// The element operands the Update stage of `p` (update_stage_view) loads: those its code reads,
  /// that code being every value it computes (update_computes), with rows and columns too.
  static unsigned update_loads(const Program& p) {
    std::vector<Expr> all;
    for (const Output* o : update_computes(p, stored_values(p))) all.push_back(o->value);
    return element_loads(p, with_shaped_values(p, all, static_cast<int>(p.stages.size())));
  }

  static std::string hex(unsigned mask) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%xu", mask);
    return text;
  }

  /// A value a Reduce stage's chunk runs store into an operand, element by element: a matrix
  /// value's operand (bf16 or f32, for the runtime's matrix function), or a state's new value that the
  /// stage computes for it (Output::stage).
  struct ElementStore {
    int operand;
    Expr value;
    std::string what;  ///< for the comment
  };

  /// The code of one kind of block of a Reduce stage: its reductions' operands and where their
  /// results go (`Elements`: chunk runs, results by index r, finished by finish_tensor; the others
  /// by their index among the reductions of their scope). `level` is what its apply reads an
  /// element's operands at: Element (with the element's row, column and matrix where the variant
  /// has them), or a Row or Column of a matrix line.
  void reduction_kind(CodeWriter& w, const Program& p, const Stage& stage, int kind, const std::string& name,
                      bool specialization, const std::vector<std::pair<int, const ReductionValue*>>& list, Domain level,
                      bool elements, const std::vector<ElementStore>& stores = {}) {
    std::vector<Expr> roots;
    for (const auto& [r, reduction] : list) roots.push_back(reduction->operand);
    for (const ElementStore& store : stores) roots.push_back(store.value);
    if (!elements) roots = stored_roots_loaded(p, std::move(roots), level, stage.number);
    if (specialization) w.line("template <>");
    auto st = w.block("struct " + name, "};");
    reduction_constants(w, p, list, roots, elements);
    if (elements) stored_operand_constants(w, stores);
    const bool shaped = reduce_shaped(p, stage);
    if (elements && shaped) loaded_slot_masks(w, p, roots, stage.number, reads_position(p, roots, stage.number));
    if (!elements) stored_values_finish(w, p, stage, kind);
    w.line();
    // What apply reads besides the group and tensor values: element-wise code its operands only.
    std::string parameters = "const float (&v_)[kOperands]";
    CudaPrinter::ShapedIndices indices;
    if (shaped) {
      switch (level) {
        case Domain::Row:
          parameters = "long long p_, long long b_";
          indices = {"p_", "", "b_"};
          break;
        case Domain::Column:
          parameters = "long long q_, long long b_";
          indices = {"", "q_", "b_"};
          break;
        default:
          parameters = "const optgen::ElementIndex& ix_, " + parameters;
          indices = element_indices(stage.number);
          break;
      }
      parameters = "[[maybe_unused]] const Sh_& sh_, [[maybe_unused]] " + parameters;
      w.line("template <typename Sh_>");
    }
    indices.order = stage.number;
    auto fn = w.block(
        "static __device__ __forceinline__ void apply([[maybe_unused]] const GroupValues& k_, [[maybe_unused]] const "
        "TensorValues& tv_, " +
        parameters + ", float (&r_)[" + (elements ? "kResults" : "kReductions") + "])");
    std::set<std::string> taken = shaped_taken_names(p);
    auto values = shaped_code(w, p, roots, level, indices, taken);
    for (size_t i = 0; i < values.size(); ++i) {
      const std::string what = i < list.size() ? list[i].second->name : stores[i - list.size()].what;
      w.line("r_[" + std::to_string(i) + "] = " + values[i] + ";  // " + what);
    }
  }

  /// `roots` of line code of stage `order` at `level` (a matrix line's rows or columns), each one
  /// that is a value an earlier stage stored read as that value, one load, rather than computed
  /// again from the results and states it reads: Adafactor's mean of the new row_var loads the
  /// values its row lines stored (its matrix line of gpt2's embedding, 50,257 rows, took 84 us
  /// computing each, a division's branch between one row's loads and the next's).
  static std::vector<Expr> stored_roots_loaded(const Program& p, std::vector<Expr> roots, Domain level, int order) {
    const std::vector<StoredValue> stored = stored_values(p);
    for (Expr& root : roots)
      for (const StoredValue& v : stored)
        if (v.level == level && !v.new_state && v.stage < order && v.value == root) {
          root = Node::make_hoisted(v.name, root->type, level);
          break;
        }
    return roots;
  }

  /// What Reduce stage `stage` stores: its matrix values' operands, then the states it stores.
  static std::vector<ElementStore> stage_stores(const Program& p, const Stage& stage) {
    std::vector<ElementStore> list;
    if (stage.kind != StageKind::Reduce) return list;
    const auto names = operand_names(p);
    auto operand = [&](const std::string& name) {
      return static_cast<int>(std::find(names.begin(), names.end(), name) - names.begin());
    };
    for (const auto& m : p.matrix_values)
      if (m.stage == stage.number)
        list.push_back({operand(m.name), m.operand, m.name + ", stored for its matrix function"});
    for (const auto& o : p.element_outputs)
      if (o.stage == stage.number) list.push_back({operand(o.name), o.value, o.name + "'s new value, stored"});
    return list;
  }

  /// An Elements struct's stores (its apply's results after the reductions'), which the chunk runs
  /// store in each operand's codec, unless AMP skips the step: their count, kResults, and each
  /// one's operand.
  static void stored_operand_constants(CodeWriter& w, const std::vector<ElementStore>& stores) {
    std::string ops;
    for (size_t j = 0; j < stores.size(); ++j)
      ops += "j_ == " + std::to_string(j) + " ? " + std::to_string(stores[j].operand) + " : ";
    w.line("static constexpr int kElementStores = " + std::to_string(stores.size()) +
           ";  // values stored element by element: matrix values' operands, states");
    w.line("static constexpr int kResults = kReductions + kElementStores > 0 ? kReductions + kElementStores : 1;");
    w.line("static __device__ __forceinline__ constexpr int element_store_operand(int j_) { return " + ops + "-1; }");
  }

  /// What Position (device/shape.cuh) finds for element code of `roots` in stage `order`: whether it
  /// needs each element's index (`indexed`), and the stored values it loads for every element, by
  /// slot.
  static void loaded_slot_masks(CodeWriter& w, const Program& p, const std::vector<Expr>& roots, int order,
                                bool indexed) {
    const LoadedSlots slots = loaded_slots(p, roots, order);
    w.line(std::string("static constexpr bool kIndexed = ") + (indexed ? "true" : "false") +
           ";  // reads its element's row, column or matrix (ix_)");
    w.line("// The stored values its element code loads, by slot: Position loads them once per vector.");
    w.line("static constexpr unsigned kRowValues = " + hex(slots.row) + ", kColValues = " + hex(slots.col) +
           ", kMatrixValues = " + hex(slots.matrix) + ";");
  }

  /// `kStoredValues` and `finish`: the values (shapes.h's stored_values) that the lines of `kind` of
  /// `stage` compute once per line, where the line's first thread has stored its results, for
  /// later stages to load (shaped.cuh calls finish with the line's row, column or matrix).
  void stored_values_finish(CodeWriter& w, const Program& p, const Stage& stage, int kind) {
    std::vector<const StoredValue*> list;
    const std::vector<StoredValue> stored = stored_values(p);
    for (const auto& v : stored)
      if (v.stage == stage.number && v.kind == kind && !v.shared) list.push_back(&v);
    w.line("static constexpr int kStoredValues = " + std::to_string(list.size()) + ";  // values stored per line");
    if (list.empty()) return;
    const Domain level = list.front()->level;
    CudaPrinter::ShapedIndices indices;
    std::vector<std::string> defined;  // the line's row, column or matrix, and the matrix of a row or column
    switch (level) {
      case Domain::Row:
        indices = {"p_", "", "b_", stage.number};
        defined = {"const long long p_ = line_;", "[[maybe_unused]] const long long b_ = line_ / sh_.R;"};
        break;
      case Domain::Column:
        indices = {"", "q_", "b_", stage.number};
        defined = {"const long long q_ = line_;", "[[maybe_unused]] const long long b_ = line_ / sh_.C;"};
        break;
      default:
        indices = {"", "", "b_", stage.number};
        defined = {"const long long b_ = line_;"};
        break;
    }
    const char* prefix = level == Domain::Row ? "row" : level == Domain::Column ? "col" : "matrix";
    const char* index = level == Domain::Row ? "p_" : level == Domain::Column ? "q_" : "b_";
    w.line("template <typename Sh_>");
    auto fn = w.block(
        "static __device__ __forceinline__ void finish([[maybe_unused]] const GroupValues& k_, [[maybe_unused]] const "
        "TensorValues& tv_, const Sh_& sh_, long long line_)");
    for (const std::string& line : defined) w.line(line);
    // A hoisted value is computed as its name (once, if another stored value reads it too).
    std::vector<Expr> roots;
    for (const StoredValue* v : list)
      roots.push_back(v->new_state ? v->value : Node::make_hoisted(v->name, v->value->type, level));
    std::set<std::string> taken = shaped_taken_names(p);
    taken.insert("line_");
    auto texts = shaped_code(w, p, roots, level, indices, taken);
    for (size_t i = 0; i < list.size(); ++i)
      w.line(std::string("sh_.store_") + prefix + "_value(" + std::to_string(list[i]->slot) + ", " + index + ", " +
             texts[i] + ");  // " + list[i]->name + (list[i]->new_state ? "'s new value" : ""));
  }

  /// What Reduce stage `stage` computes: its reductions' operands, the values it stores element by
  /// element, the row, column and matrix values its lines store.
  static std::vector<Expr> reduce_roots(const Program& p, const Stage& stage) {
    std::vector<Expr> roots;
    for (const auto& item : stage_reductions(p, stage)) roots.push_back(item.second->operand);
    for (const ElementStore& store : stage_stores(p, stage)) roots.push_back(store.value);
    for (const auto& v : stored_values(p))
      if (v.stage == stage.number) roots.push_back(v.value);
    return roots;
  }

  /// Whether Reduce stage `stage` runs as code of rows and columns (kShaped: each element's
  /// position found, rows and columns handed to its tensor values, an absent state read as 0, the
  /// shaped stages' launch bounds): in a variant with shapes, where it launches blocks other than
  /// chunk runs, or its code reads a row, column or matrix value, a tensor's shape, or a state that
  /// some tensors lack (a `when:` on `factored`). Muon's first stage, which stores its matrix
  /// value's operand and its momentum, is element-wise code.
  static bool reduce_shaped(const Program& p, const Stage& stage) {
    if (!uses_shapes(p)) return false;
    if (stage_blocks(p, stage) != 1u << kernel_abi::kChunkRuns) return true;
    std::vector<Expr> code = reduce_roots(p, stage);
    if (reads_position(p, code, stage.number)) return true;
    // The tensor values it reads, and theirs.
    for (std::size_t n = 0; n != code.size();) {
      n = code.size();
      for (const HoistedValue* v : tensor_values_read(p, code))
        if (std::find(code.begin(), code.end(), v->value) == code.end()) code.push_back(v->value);
    }
    bool shape = false;
    for (const Expr& root : code)
      for_each_node(root, [&](const Expr& e) {
        if (e->kind != NodeKind::Var) return;
        shape = shape || e->var == VarKind::Factored || e->var == VarKind::Rows || e->var == VarKind::Cols ||
                (e->var == VarKind::State && state_presence(p, e->name) != StatePresence::Always);
      });
    return shape;
  }

  /// A Reduce stage's code, which reduce_stage (device/reduce_stage.cuh) drives: a struct per kind
  /// of block it launches (kBlocks, kernel_abi::BlockKind; an element-wise variant's chunk runs
  /// only), and the snapshot of the row and column states (stage 1).
  void reduce_struct(CodeWriter& w, const Program& p, const Stage& stage) {
    const bool shaped = reduce_shaped(p, stage);
    const unsigned blocks = shaped ? stage_blocks(p, stage) : 1u << kernel_abi::kChunkRuns;
    const auto list = stage_reductions(p, stage);
    const auto stores = stage_stores(p, stage);
    using Kind = kernel_abi::BlockKind;
    std::map<int, std::vector<std::pair<int, const ReductionValue*>>> by_kind;
    for (const auto& item : list) by_kind[block_kind(*item.second)].push_back(item);
    if (!stores.empty()) by_kind[Kind::kChunkRuns];  // chunk runs store them
    const std::vector<Expr> roots = reduce_roots(p, stage);
    const std::string name = reduce_struct_name(stage);
    w.line("/// Reduce stage " + std::to_string(stage.number) +
           (shaped ? " (rows and columns): per kind of block, the operands of its reductions."
                   : ": the operands of its reductions, element by element."));
    {
      auto st = w.block("struct " + name, "};");
      w.line("static constexpr int kOperands = " + std::to_string(operand_names(p).size()) + ";");
      w.line("static constexpr unsigned kBlocks = " + hex(blocks) + ";  // kernel_abi::BlockKind bits");
      w.line(std::string("static constexpr bool kShaped = ") +
             (shaped ? "true;  // rows and columns: apply reads sh_ and ix_" : "false;  // element-wise code"));
      if (has_unit_reduce(p, stage))
        w.line("typedef unit::" + name + " Unit;  // its chunk runs' code for tensors whose matrices are one element");
      w.line();
      tensor_values(w, p, tensor_values_read(p, with_shaped_values(p, roots, stage.number)), shaped_taken_names(p),
                    shaped);
      if (by_kind.count(Kind::kChunkRuns)) {
        w.line();
        w.line("/// Over each tensor or group: chunk runs.");
        reduction_kind(w, p, stage, Kind::kChunkRuns, "Elements", false, by_kind[Kind::kChunkRuns], Domain::Element,
                       true, stores);
      }
      if (by_kind.count(Kind::kColumnSegments)) {
        w.line();
        w.line("/// Over each column: column segments.");
        reduction_kind(w, p, stage, Kind::kColumnSegments, "Cols", false, by_kind[Kind::kColumnSegments],
                       Domain::Element, false);
      }
      if (shaped) {
        w.line();
        w.line("/// Lines (kRowLines: over each row; kMatrixRowLines, kMatrixColumnLines: over each matrix).");
        w.line("template <int kKind>");
        w.line("struct Lines;");
      }
      if (blocks & (1u << Kind::kSnapshot)) {
        w.line();
        snapshot_struct(w, p);
      }
    }
    const std::pair<Kind, Domain> lines[] = {{Kind::kRowLines, Domain::Element},
                                             {Kind::kMatrixRowLines, Domain::Row},
                                             {Kind::kMatrixColumnLines, Domain::Column}};
    for (const auto& [kind, level] : lines) {
      if (!by_kind.count(kind)) continue;
      w.line();
      reduction_kind(w, p, stage, kind, name + "::Lines<" + std::to_string(kind) + ">", true, by_kind[kind], level,
                     false);
    }
  }

  /// Whether the chunk runs of Reduce stage `stage` read anything of their element's row, column or
  /// matrix (reads_position): only then do tensors whose matrices are one element, which have no
  /// rows, columns or matrices of their own in a plan, need code of their own there.
  static bool runs_read_position(const Program& p, const Stage& stage) {
    std::vector<Expr> roots;
    for (const auto& [r, reduction] : stage_reductions(p, stage))
      if (block_kind(*reduction) == kernel_abi::kChunkRuns) roots.push_back(reduction->operand);
    for (const ElementStore& store : stage_stores(p, stage)) roots.push_back(store.value);
    return reads_position(p, roots, stage.number);
  }

  /// Whether variant `p` has a Reduce struct of its own in `namespace unit` for Reduce stage `stage`
  /// (its Reduce struct's Unit): the code for tensors whose matrices are one element
  /// (Program::unit_matrices) has work there (reductions over tensors or groups, or values it stores)
  /// and the stage's chunk runs read rows or columns (runs_read_position).
  static bool has_unit_reduce(const Program& p, const Stage& stage) {
    if (!p.unit_matrices || stage.kind != StageKind::Reduce) return false;
    const Program& unit = *p.unit_matrices;
    return (!stage_reductions(unit, stage).empty() || !stage_stores(unit, stage).empty()) &&
           runs_read_position(p, stage);
  }

  /// The row and column states the first Reduce stage copies for the Update stage.
  static void snapshot_struct(CodeWriter& w, const Program& p) {
    w.line("/// The row and column states the Update stage reads from the snapshot: operands.");
    auto st = w.block("struct Snapshot", "};");
    for (const auto& [shape, prefix] :
         {std::pair{StateShape::Rows, std::string("row")}, std::pair{StateShape::Cols, std::string("col")}}) {
      const auto list = states_of_shape(p, shape);
      std::string ops;
      for (size_t j = 0; j < list.size(); ++j) {
        const size_t op = std::find(p.states.begin(), p.states.end(), list[j]) - p.states.begin() + 2;
        ops += "j_ == " + std::to_string(j) + " ? " + std::to_string(op) + " : ";
      }
      const std::string kind = prefix == "row" ? "Row" : "Col";
      w.line("static constexpr int k" + kind + "States = " + std::to_string(list.size()) + ";");
      w.line("static __device__ __forceinline__ constexpr int " + prefix + "_op(int j_) { return " + ops + "-1; }");
    }
  }

  /// The Update stage's code, which update_stage (device/update.cuh) drives: the element outputs
  /// into v_; with rows and columns, each row (column) state's new value too, stored by the element
  /// at column (row) 0: loaded where the Reduce stage that finished it stored it (shapes.h's
  /// stored_values), else computed there.
  void update_struct(CodeWriter& w, const Program& variant) {
    const Program p = update_stage_view(variant);
    const bool shaped = uses_shapes(p);
    const int order = static_cast<int>(p.stages.size());
    const std::vector<StoredValue> stored = stored_values(p);
    const auto names = operand_names(p);
    std::map<Domain, std::vector<const Output*>> outputs;
    for (const auto& o : p.element_outputs) outputs[o.level].push_back(&o);
    const std::vector<const Output*> computed = update_computes(p, stored);
    std::vector<Expr> all;  // the code the stage computes
    for (const Output* o : computed) all.push_back(o->value);
    std::vector<Expr> element_roots;  // apply's: the element outputs
    for (const Output* o : outputs[Domain::Element]) element_roots.push_back(o->value);
    std::string operands;
    for (const auto& n : names) operands += (operands.empty() ? "" : ", ") + n;
    w.line(std::string("/// The Update stage's code") + (shaped ? " (rows and columns)" : "") +
           ": every output from the operands.");
    auto st = w.block("struct Update", "};");
    w.line("static constexpr int kOperands = " + std::to_string(names.size()) + ";  // " + operands);
    grad_norm_slot(w, p);
    const auto read = tensor_values_read(p, with_shaped_values(p, all, order));
    w.line(std::string("static constexpr bool kTensorValues = ") + (read.empty() ? "false" : "true") +
           ";  // reads values computed per tensor");
    first_stage(w, p);
    w.line(std::string("static constexpr bool kShaped = ") +
           (shaped ? "true;  // rows and columns: apply reads sh_ and ix_" : "false;  // element-wise code"));
    w.line(std::string("static constexpr bool kProgram = ") +
           (p.is_step() ? "false;  // the step: takes a ticket, counts the step"
                        : "true;  // a program: no ticket, no step counted"));
    if (shaped) {
      // The 8-bit block walk interleaves a lane's elements (CheckedMath) where registers allow: not
      // in the step on shards, whose code computes rows, columns and matrices per element (its
      // Adafactor spilled 88-96 bytes with f32 params and 8-bit states, sm_90).
      w.line(std::string("static constexpr bool kInterleaves = ") +
             (p.for_shards ? "false;  // computes its rows and columns per element: one at a time"
                           : "true;  // a lane's elements interleave in the 8-bit block walk"));
      loaded_slot_masks(w, p, element_roots, order, update_reads_position(variant));
    }
    // The operands it reads (row and column states go through sh_), and those it writes back: the
    // outputs, and the read-only states that start as the parameter at the group's first step only.
    operand_masks(w, p);
    w.line();
    std::set<std::string> taken = shaped_taken_names(p);
    tensor_values(w, p, read, taken, shaped);
    w.line();
    tensor_state_stores(w, p, outputs[Domain::Tensor], taken, shaped);
    w.line();
    {
      w.line("/// `m_` divides and takes square roots (optgen/element_math.h: IeeeMath, or CheckedMath, whose");
      w.line("/// caller computes the elements again with IeeeMath where it was not exact).");
      w.line(shaped ? "template <typename Sh_, typename Math>" : "template <typename Math>");
      auto fn = w.block(
          "static __device__ __forceinline__ void apply([[maybe_unused]] const GroupValues& k_, [[maybe_unused]] const "
          "TensorValues& tv_, " +
          std::string(shaped ? "[[maybe_unused]] const Sh_& sh_, [[maybe_unused]] const optgen::ElementIndex& ix_, "
                             : "") +
          "float (&v_)[kOperands], [[maybe_unused]] Math& m_)");
      std::set<std::string> names_taken = taken;
      auto texts = shaped_code(w, p, element_roots, Domain::Element, element_indices(order), names_taken, "m_");
      for (size_t j = 0; j < texts.size(); ++j) {
        const std::string& out = outputs[Domain::Element][j]->name;
        const size_t index = std::find(names.begin(), names.end(), out) - names.begin();
        if (index == names.size()) throw InternalError("emit_cuda: output '" + out + "' is not an operand");
        w.line("v_[" + std::to_string(index) + "] = " + texts[j] + ";  // " + out);
      }
    }
    if (!shaped) return;
    w.line();
    // The row and column states: apart from apply, so that a vector's elements compute with no
    // branch between them (Position::store_states calls this for each once they are stored).
    w.line("/// Each row's (column's) new state, stored once: by the element at its column 0 (row 0).");
    w.line("template <typename Sh_>");
    auto fn = w.block(
        "static __device__ __forceinline__ void store_states([[maybe_unused]] const GroupValues& k_, "
        "[[maybe_unused]] const TensorValues& tv_, [[maybe_unused]] const Sh_& sh_, [[maybe_unused]] const "
        "optgen::ElementIndex& ix_)");
    for (const auto& [at, condition, index] :
         {std::tuple{Domain::Row, "ix_.c == 0", "ix_.p"}, std::tuple{Domain::Column, "ix_.r == 0", "ix_.q"}}) {
      if (outputs[at].empty()) continue;
      auto block = w.block(std::string("if (") + condition + ")");
      std::vector<Expr> roots;  // the new values computed here; the others are loaded
      for (const Output* o : outputs[at])
        if (std::find(computed.begin(), computed.end(), o) != computed.end()) roots.push_back(o->value);
      std::set<std::string> names_taken = taken;
      auto texts = shaped_code(w, p, roots, at, element_indices(order), names_taken);
      CudaPrinter printer(false, &p);
      printer.set_shaped(element_indices(order));
      size_t next = 0;
      for (const Output* o : outputs[at]) {
        const size_t op = std::find(names.begin(), names.end(), o->name) - names.begin();
        const StoredValue* v = loaded_value(stored, o->name, at, order, true);
        w.line("sh_.store_state(" + std::to_string(op) + ", " + index + ", " + (v ? printer.load(*v) : texts[next++]) +
               ");  // " + o->name);
      }
    }
  }

  /// Whether kernel set `s` of variant `p` (with rows and columns) is lean enough for a tighter
  /// register budget: its params written as they are read, every state f32, no clipping, and for
  /// a Reduce stage (`reduce`) f32 params. Its Update stage then fits one more block per SM than the
  /// Update stage's budget, and a Reduce stage of chunk runs only one more than theirs: the norm of
  /// Adafactor's update and the Update stages of Adafactor and Adam-mini are bound by the latency of
  /// their loops, which more warps hide (bench/RESULTS.md, 2026-12-01); the other sets spill there
  /// (master copies, stochastic rounding, bf16 states, clipping; narrow params in the norm).
  static bool lean_operands(const Program& p, const Storage& s, bool reduce) {
    if (s.param_write != ParamWrite::Nearest || clipping::grad_norm_slot(p) >= 0) return false;
    if (reduce && s.param != DType::F32) return false;
    return std::all_of(p.states.begin(), p.states.end(),
                       [&](const std::string& state) { return s.state_dtype(state) == DType::F32; });
  }

  /// Stage `stage` of kernel set `k` (of variant p), named `name`; an Update stage in vectors of
  /// kernel_abi::kLongRowVector elements where `long_rows` (long_row_update_name).
  void stage_kernel(CodeWriter& w, const Program& p, const KernelRow& k, const Stage& stage, const std::string& name,
                    bool long_rows = false) {
    const Storage& s = k.storage;
    w.line();
    w.line("/// " + p.variant + ", " +
           (p.is_step() ? to_string(stage.kind) + std::string(" stage") : "program " + p.entry) +
           (p.for_shards ? " on shards" : "") + (long_rows ? " of long rows, vectors of eight" : "") +
           (p.for_unit_matrices ? " of tensors whose matrices are one element" : "") + ", storage " + s.text() + ".");
    // The step on shards' Update stage computes its row, column and matrix values per element: the
    // shaped stages' register budget (its f16 clipped Adafactor spilled at the Update stage's). A
    // shaped Reduce stage of chunk runs only (not on shards) has a budget of its own.
    // A lean kernel set of such a variant (lean_operands) takes one more block per SM in those two.
    // An Update stage with 8-bit states has the blockwise budget (per kernel: one block fewer where
    // it spills), or in code of rows and columns the shaped one: at the blockwise three blocks per
    // SM Adam-mini's 8-bit kernels spilled 160-200 bytes (sm_90).
    const bool shaped = stage.kind == StageKind::Reduce ? reduce_shaped(p, stage) : uses_shapes(p);
    const bool runs_only =
        stage.kind == StageKind::Reduce && !p.for_shards && stage_blocks(p, stage) == 1u << kernel_abi::kChunkRuns;
    const bool lean =
        (shaped || p.for_unit_matrices) && !p.for_shards && lean_operands(p, s, stage.kind == StageKind::Reduce);
    const char* bounds =
        stage.kind == StageKind::Reduce || p.for_shards
            ? (!shaped     ? "OPTGEN_REDUCE_LAUNCH_BOUNDS"
               : runs_only ? (lean ? "OPTGEN_LEAN_SHAPED_RUNS_LAUNCH_BOUNDS" : "OPTGEN_SHAPED_RUNS_LAUNCH_BOUNDS")
                           : "OPTGEN_SHAPED_LAUNCH_BOUNDS")
        : has_blockwise_state(p, s) ? (shaped ? "OPTGEN_SHAPED_LAUNCH_BOUNDS" : kernel_abi::kBlockwiseLaunchBoundsMacro)
        : lean                      ? "OPTGEN_LEAN_LAUNCH_BOUNDS"
                                    : "OPTGEN_LAUNCH_BOUNDS";
    const bool per_kernel = bounds == kernel_abi::kBlockwiseLaunchBoundsMacro;
    const int tile_registers = per_kernel ? block_tile_registers(p, s) : 0;
    const int threads = per_kernel ? blockwise_threads(tile_registers) : 0;
    if (per_kernel && threads < tuning_.blockwise_min_blocks_per_sm * tuning_.block_size)
      w.line("// " + std::to_string(threads) + " threads per SM: its next block's operands take " +
             std::to_string(tile_registers) + " registers (blockwise_threads).");
    w.line(std::string("extern \"C\" __global__ void ") + bounds +
           (per_kernel ? "(" + name + ", " + std::to_string(threads) + ")" : ""));
    auto fn =
        w.block(name +
                "(const optgen::TableView table, const optgen::GroupTable groups, const optgen::StepInputs inputs, "
                "const optgen::ReductionTable reductions)");
    // A program's Group and Update are in a namespace of its own, inside its variant's; the step on
    // shards has its Reduce and Update structs in one, and the variant's Group.
    const std::string variant = "variants::" + p.variant;
    const std::string scope = variant + (p.for_shards          ? "::shards"
                                         : p.for_unit_matrices ? "::unit"
                                         : p.is_step()         ? ""
                                                               : "::" + p.entry);
    const std::string types = (p.for_shards || p.for_unit_matrices ? variant : scope) + "::Group, " + variant +
                              "::" + operands_struct_name(s);
    // A kernel set older GPUs cannot run (bf16) is empty there, so that one source compiles for
    // every GPU; the runtime never launches it on them (FusedOptimizer::prepare refuses).
    const int arch = minimum_arch(p, s);
    const bool guarded = arch > kOldestComputeCapability;
    if (guarded) w.line("#if __CUDA_ARCH__ >= " + std::to_string(arch * 10));
    switch (stage.kind) {
      case StageKind::Reduce:
        w.line("optgen::reduce_stage<" + scope + "::" + reduce_struct_name(stage) + ", " + types +
               ">(table, groups, inputs, reductions);");
        break;
      case StageKind::Update:
        w.line("optgen::update_stage<" + scope + "::Update, " + types +
               (long_rows ? ", optgen::kernel_abi::kLongRowVector" : "") + ">(table, groups, inputs, reductions);");
        break;
    }
    if (guarded) w.line("#endif");
  }

  void group_kernel(CodeWriter& w, const Program& p, const std::string& name) {
    w.line();
    w.line("/// " + p.variant + ": writes a value into the group table and recomputes the values the next step reads.");
    w.line("extern \"C\" __global__ void __launch_bounds__(optgen::kernel_abi::kGroupKernelBlock)");
    auto fn = w.block(name + "(const optgen::GroupTable groups, const optgen::GroupWrite write)");
    w.line("optgen::group_kernel<variants::" + p.variant + "::Group>(groups, write);");
  }

  const Spec& spec_;
  KernelTuning tuning_;
};

}  // namespace

std::string emit_cuda(const Spec& spec, const std::vector<Program>& variants, const std::vector<Storage>& storage,
                      const KernelTuning& tuning) {
  if (variants.empty() || storage.empty()) throw InternalError("emit_cuda: no variants or no storage types");
  const KernelTables tables = kernel_tables(variants, storage, tuning);
  std::string kernels;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    for (const KernelRow* k : tables.kernels_of(static_cast<int>(i))) {
      for (const std::string& name : k->stages) kernels += "//   " + name + "\n";
      for (const std::string& name : k->programs) kernels += "//   " + name + "\n";
    }
    kernels += "//   " + tables.variants[i].group_kernel + "\n";
  }
  std::string body = CudaEmitter(spec, tuning).emit(variants, storage, tables);
  return render_template("kernels.cu.in", {{"spec_file", spec_file_name(spec)},
                                           {"optimizer", spec.optimizer},
                                           {"generator", generator_banner()},
                                           {"summary", comment_text(spec.summary)},
                                           {"kernels", kernels},
                                           {"body", body}});
}

}  // namespace optgen

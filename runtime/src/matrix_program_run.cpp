#include "matrix_program_run.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <cmath>
#include <cstdint>
#include <vector>

#include "optgen/driver.h"
#include "optgen/error.h"
#include "optgen/kernel_abi.h"

namespace optgen {
namespace {

constexpr std::int64_t kPartElements = 1 << 14;  // elements a block of the norm kernels sums or divides

/// A part of a matrix for the norm kernels: all of a small one, else kPartElements (a multiple of 8).
std::int64_t part_size(std::int64_t size) { return std::min<std::int64_t>(size, kPartElements); }
/// How many parts a matrix of `size` elements has (none when it has no elements).
std::int64_t part_count(std::int64_t size) { return size == 0 ? 0 : (size + part_size(size) - 1) / part_size(size); }

double value_of(const MatrixScalar& s, const double* arguments) {
  return s.factor * (s.argument < 0 ? 1.0 : arguments[s.argument]);
}

/// `program` unrolled with `arguments`; where `repeats` is given, repeat number i (in the order of
/// the code) runs repeats[i] times instead.
MatrixTrace unroll(const MatrixProgram& program, const double* arguments, const std::vector<int>* repeats = nullptr) {
  MatrixTrace t;
  t.variable.push_back(0);
  std::vector<int> current(static_cast<std::size_t>(program.num_variables), -1);
  current[0] = 0;
  auto run = [&](auto& self, int begin, int end) -> void {
    for (int n = begin; n < end; ++n) {
      const MatrixInstruction& in = program.code[n];
      if (in.op == MatrixOp::Repeat) {
        const long long times = repeats ? (*repeats)[static_cast<std::size_t>(std::count_if(
                                              program.code, program.code + n,
                                              [](const MatrixInstruction& i) { return i.op == MatrixOp::Repeat; }))]
                                        : std::llround(value_of(in.alpha, arguments));
        for (long long i = 0; i < times; ++i) self(self, n + 1, n + 1 + in.target);
        n += in.target;
        continue;
      }
      if (in.op == MatrixOp::Assign) {
        current[static_cast<std::size_t>(in.target)] = current[static_cast<std::size_t>(in.a)];
        continue;
      }
      auto read = [&](int var) {
        if (var < 0) return -1;
        if (current[static_cast<std::size_t>(var)] < 0)  // the generator assigns a name before it reads it
          throw std::logic_error(std::string("matrix program ") + program.name + " reads a variable before writing it");
        return current[static_cast<std::size_t>(var)];
      };
      const MatrixTraceStep s{in.op,
                              static_cast<int>(t.variable.size()),
                              read(in.a),
                              read(in.b),
                              read(in.c),
                              in.transpose_a,
                              in.transpose_b,
                              static_cast<float>(value_of(in.alpha, arguments)),
                              static_cast<float>(value_of(in.beta, arguments))};
      t.variable.push_back(in.target);
      current[static_cast<std::size_t>(in.target)] = s.out;
      t.steps.push_back(s);
    }
  };
  run(run, 0, program.size);
  t.result = current[static_cast<std::size_t>(program.result)];
  if (t.result < 0)
    throw std::logic_error(std::string("matrix program ") + program.name + " returns an unwritten variable");
  return t;
}

/// The view's dimensions: R and C of a program's matrices.
struct View {
  int r, c;
  bool column_major;  ///< a tall matrix seen transposed: its row-major bytes are the view column-major
  std::int64_t rows(const MatrixProgram& p, int var) const {
    return p.variables[var].rows == MatrixDimension::R ? r : c;
  }
  std::int64_t cols(const MatrixProgram& p, int var) const {
    return p.variables[var].cols == MatrixDimension::R ? r : c;
  }
};

/// Values in buffers: per value, its buffer; per buffer, the key of the values it holds.
struct Colouring {
  std::vector<int> buffer;
  std::vector<std::int64_t> key;
};

/// Each value of `t` placed in the first buffer of its key (`key_of(value)`: its size, or its shape)
/// where no other value lives while it does (buffers in the order they are made; the argument in
/// buffer 0). `pinned`: from the last computed back, the result in buffer 0 where the argument is
/// read no more by then (nothing copied, but no bound on the buffers); else in the order computed,
/// which takes as few buffers as ever live at once (interval colouring).
template <typename KeyOf>
Colouring colour(const MatrixTrace& t, KeyOf key_of, bool pinned) {
  const std::size_t values = t.variable.size();
  // A value lives from the write that makes it (2k + 1 at step k) to its last read: 2k where the
  // step may write where it reads (a norm's input, a product's C), else 2k + 1.
  std::vector<long long> first(values, -1), last(values, -1);
  for (std::size_t k = 0; k < t.steps.size(); ++k) {
    const MatrixTraceStep& s = t.steps[k];
    const long long write = 2 * static_cast<long long>(k) + 1;
    first[static_cast<std::size_t>(s.out)] = last[static_cast<std::size_t>(s.out)] = write;
    auto read = [&](int v, bool in_place) {
      if (v >= 0) last[static_cast<std::size_t>(v)] = std::max(last[static_cast<std::size_t>(v)], write - in_place);
    };
    read(s.a, s.op == MatrixOp::Normalize);
    read(s.b, false);
    read(s.c, true);
  }
  last[static_cast<std::size_t>(t.result)] = LLONG_MAX;
  Colouring c;
  c.buffer.assign(values, -1);
  std::vector<std::vector<std::size_t>> living;  // per buffer, its values
  auto fits = [&](std::size_t b, std::size_t v) {
    for (std::size_t u : living[b])
      if (first[u] <= last[v] && first[v] <= last[u]) return false;
    return true;
  };
  auto put = [&](std::size_t v, std::size_t b) {
    if (b == living.size()) {
      living.emplace_back();
      c.key.push_back(key_of(v));
    }
    c.buffer[v] = static_cast<int>(b);
    living[b].push_back(v);
  };
  put(0, 0);
  const auto result = static_cast<std::size_t>(t.result);
  if (pinned && result != 0 && key_of(result) == c.key[0] && fits(0, result)) put(result, 0);
  for (std::size_t i = 1; i < values; ++i) {
    const std::size_t v = pinned ? values - i : i;
    if (c.buffer[v] >= 0) continue;
    std::size_t b = 0;
    while (b < living.size() && !(c.key[b] == key_of(v) && fits(b, v))) ++b;
    put(v, b);
  }
  return c;
}

/// Where each value lives for a batch through cuBLAS: buffer 0 is the matrices' own (x), the
/// others are in the scratch.
struct Placement {
  std::vector<int> buffer;              ///< per value
  std::vector<std::int64_t> elements;   ///< per buffer, of each matrix
  std::vector<std::size_t> offset;      ///< per buffer, its bytes into the scratch (0 for x)
  std::size_t partials = 0, bytes = 0;  ///< where the norms' partial sums start; the scratch's size
  bool copy_result = false;             ///< the result ends in the scratch: copied to x at the end
};

/// The values of `count` matrices coloured by size (`pinned` as colour's), the result copied to x
/// where it ends elsewhere.
Placement place(const MatrixProgram& program, const MatrixTrace& t, const View& view, long long count, DType dtype,
                bool pinned) {
  auto elements_of = [&](std::size_t v) {
    const int var = t.variable[v];
    return view.rows(program, var) * view.cols(program, var);
  };
  Colouring coloured = colour(t, elements_of, pinned);
  Placement p;
  p.buffer = std::move(coloured.buffer);
  p.elements = std::move(coloured.key);
  p.copy_result = p.buffer[static_cast<std::size_t>(t.result)] != 0;
  const std::size_t element = size_of(dtype);
  p.offset.assign(p.elements.size(), 0);
  std::size_t bytes = 0;
  for (std::size_t b = 1; b < p.elements.size(); ++b) {
    p.offset[b] = bytes;
    bytes = round_up(bytes + element * static_cast<std::size_t>(count * p.elements[b]), 256);
  }
  p.partials = bytes;
  std::int64_t parts = 0;
  for (const MatrixTraceStep& s : t.steps)
    if (s.op == MatrixOp::Normalize) parts = std::max(parts, part_count(elements_of(static_cast<std::size_t>(s.a))));
  p.bytes = bytes + static_cast<std::size_t>(count * parts) * sizeof(double);
  return p;
}

View view_of(const MatrixProgram& program, long long rows, long long cols) {
  const bool tall = program.transpose_tall && rows > cols;
  return {static_cast<int>(tall ? cols : rows), static_cast<int>(tall ? rows : cols), tall};
}

/// The element size of `dtype`, which must be BF16 or F32.
void check_dtype(DType dtype, const char* call) {
  if (dtype != DType::BF16 && dtype != DType::F32)
    throw Error(call, std::string("matrix programs run in bf16 or f32, not ") + to_string(dtype));
}

/// Where matrices of `count` x rows x cols may go: 1 to 2^31 - 1 matrices of at least 1 x 1 (both
/// ways of running a program index them in int).
void check_batch(long long count, long long rows, long long cols, const char* call) {
  if (rows < 1 || cols < 1 || count < 1 || count > INT_MAX || rows > INT_MAX || cols > INT_MAX)
    throw Error(call, std::to_string(count) + " matrices of " + std::to_string(rows) + " x " + std::to_string(cols) +
                          ": give from 1 to 2^31 - 1 of at least 1 x 1");
}

/// A dimension of a value in shared memory: rounded up to 16 (matrices.cuh's padded), and a row's
/// elements 8 more (its stride an odd multiple of 16 bytes, so ldmatrix's rows fall in different
/// banks).
std::int64_t in_block_rows(std::int64_t rows) { return (rows + 15) / 16 * 16; }
std::int64_t in_block_ld(std::int64_t cols) { return in_block_rows(cols) + 8; }

/// Runs share a launch where their blocks to a multiprocessor on their own (`per_multiprocessor`)
/// are of one class, the same power of two or up to the next (4 to 7): a launch's run then keeps
/// more than half the blocks it would have alone. On an H200, 10,000 matrices of 20 shapes whose
/// own occupancies were 5 and 4 blocks took 1872.8 µs as two launches, 1874.8 as one (bench/RESULTS.md).
int occupancy_class(int per_multiprocessor) {
  int c = 0;
  while (per_multiprocessor > 1) {
    per_multiprocessor /= 2;
    ++c;
  }
  return c;
}

kernel_abi::MatrixSide side_of(MatrixDimension d) {
  return d == MatrixDimension::R ? kernel_abi::kViewRows : kernel_abi::kViewCols;
}

}  // namespace

MatrixKernels::MatrixKernels(const Module& module)
    : sum_squares(module.function(kernel_abi::kMatrixSumSquares)),
      normalize(module.function(kernel_abi::kMatrixNormalize)),
      combine(module.function(kernel_abi::kMatrixCombine)),
      sum_squares_f32(module.function(kernel_abi::kMatrixSumSquaresF32)),
      normalize_f32(module.function(kernel_abi::kMatrixNormalizeF32)),
      combine_f32(module.function(kernel_abi::kMatrixCombineF32)),
      in_block(module.function(kernel_abi::kMatrixProgramInBlock)),
      in_block_f32(module.function(kernel_abi::kMatrixProgramInBlockF32)),
      column_splits(module.function(kernel_abi::kMatrixColumnSplits)) {
  const driver::Api& cuda = driver::api();
  int limit = 0, static_shared = 0;
  driver::check(cuda.cuDeviceGetAttribute(&limit, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                          driver::current_device()),
                "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
  for (CUfunction f : {in_block, in_block_f32}) {
    int bytes = 0;
    driver::check(cuda.cuFuncGetAttribute(&bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f),
                  "cuFuncGetAttribute(SHARED_SIZE_BYTES)");
    static_shared = std::max(static_shared, bytes);
  }
  in_block_shared = static_cast<std::size_t>(std::max(0, limit - static_shared));
  for (CUfunction f : {in_block, in_block_f32})
    driver::check(
        cuda.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(in_block_shared)),
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
}

std::string matrix_program_problem(const MatrixProgram& program, const double* arguments,
                                   const std::vector<std::string>& names) {
  for (int n = 0; n < program.size; ++n) {
    const MatrixInstruction& in = program.code[n];
    if (in.op != MatrixOp::Repeat || in.alpha.argument < 0) continue;  // a number: checked by the generator
    const double times = value_of(in.alpha, arguments);
    if (times >= 0 && times <= kMaxRepeat && times == std::floor(times)) continue;
    const auto a = static_cast<std::size_t>(in.alpha.argument);
    const std::string named = a < names.size() && !names[a].empty() ? " (" + names[a] + ")" : "";
    return std::string(program.name) + "'s " + program.parameters[a] + named + " is " + std::to_string(times) +
           ": give a whole number from 0 to " + std::to_string(kMaxRepeat);
  }
  return "";
}

std::size_t matrix_program_scratch_bytes(const MatrixProgram& program, long long count, long long rows, long long cols,
                                         DType dtype) {
  check_dtype(dtype, "optgen::matrix_program_scratch_bytes");
  if (count <= 0 || rows <= 0 || cols <= 0) return 0;
  const std::vector<double> zeros(static_cast<std::size_t>(std::max(program.num_arguments, 1)), 0.0);
  const View view = view_of(program, rows, cols);
  // The most values that live at once, placed in the order computed: what lives across a point of
  // a repeat's middle time lives across the same point of its second of three, so every repeat run
  // 0 to 3 times (each on its own, up to 6 repeats; beyond, all alike) bounds any number of times.
  const auto repeats = static_cast<std::size_t>(std::count_if(
      program.code, program.code + program.size, [](const MatrixInstruction& i) { return i.op == MatrixOp::Repeat; }));
  const bool each = repeats <= 6;
  std::size_t combinations = 1;
  for (std::size_t i = 0; i < (each ? repeats : 1); ++i) combinations *= 4;
  std::size_t bytes = 0;
  for (std::size_t c = 0; c < combinations; ++c) {
    std::vector<int> times(repeats);
    for (std::size_t i = 0; i < repeats; ++i) times[i] = static_cast<int>(each ? (c >> (2 * i)) & 3 : c);
    bytes = std::max(bytes, place(program, unroll(program, zeros.data(), &times), view, count, dtype, false).bytes);
  }
  return bytes;
}

bool matrix_view_fits_block(const MatrixProgram& program, long long rows, long long cols) {
  return rows <= INT_MAX && cols <= INT_MAX && view_of(program, rows, cols).r <= kernel_abi::kMatrixInBlockRows;
}

UnrolledProgram::UnrolledProgram(const MatrixProgram& program, const double* arguments, DType dtype)
    : program_(&program), dtype_(dtype), trace_(unroll(program, arguments)) {
  check_dtype(dtype, "optgen::UnrolledProgram");
  if (trace_.steps.size() > kernel_abi::kMatrixInBlockSteps) return;
  // In a block, a buffer holds values of one shape (a side for its rows, one for its columns), so
  // that the same steps serve matrices of any shape.
  auto shape_of = [&](std::size_t v) {
    const MatrixVariable& var = program.variables[trace_.variable[v]];
    return std::int64_t{2} * side_of(var.rows) + side_of(var.cols);
  };
  const Colouring coloured = colour(trace_, shape_of, false);
  if (coloured.key.size() > kernel_abi::kMatrixInBlockBuffers) return;
  kernel_abi::MatrixInBlock& p = in_block_;
  p.num_steps = static_cast<int>(trace_.steps.size());
  p.num_buffers = static_cast<int>(coloured.key.size());
  for (int b = 0; b < p.num_buffers; ++b) {
    p.buffer_rows[b] = static_cast<int>(coloured.key[static_cast<std::size_t>(b)] / 2);
    p.buffer_cols[b] = static_cast<int>(coloured.key[static_cast<std::size_t>(b)] % 2);
  }
  auto buffer = [&](int v) { return v < 0 ? -1 : coloured.buffer[static_cast<std::size_t>(v)]; };
  for (std::size_t k = 0; k < trace_.steps.size(); ++k) {
    const MatrixTraceStep& s = trace_.steps[k];
    int op = kernel_abi::kCombineStep;
    if (s.op == MatrixOp::Normalize) op = kernel_abi::kNormalizeStep;
    if (s.op == MatrixOp::Product) op = kernel_abi::kProductStep;
    p.steps[k] = {op,
                  buffer(s.out),
                  buffer(s.a),
                  buffer(s.b),
                  s.op == MatrixOp::Product ? buffer(s.c) : -1,
                  s.transpose_a ? 1 : 0,
                  s.transpose_b ? 1 : 0,
                  s.alpha,
                  s.beta};
  }
  p.argument = buffer(0);
  p.result = buffer(trace_.result);
  fits_block_ = true;
}

std::size_t UnrolledProgram::in_block_bytes(long long rows, long long cols) const {
  if (!fits_block_ || !matrix_view_fits_block(*program_, rows, cols)) return 0;
  const View view = view_of(*program_, rows, cols);
  auto length = [&](int side) -> std::int64_t { return side == kernel_abi::kViewRows ? view.r : view.c; };
  std::int64_t elements = 0;
  for (int b = 0; b < in_block_.num_buffers; ++b)
    elements += in_block_rows(length(in_block_.buffer_rows[b])) * in_block_ld(length(in_block_.buffer_cols[b]));
  return static_cast<std::size_t>(elements) * size_of(dtype_);
}

bool InBlockLaunches::add(const UnrolledProgram& program, const MatrixKernels& kernels, CUdeviceptr x, long long count,
                          long long rows, long long cols) {
  const std::size_t bytes = program.in_block_bytes(rows, cols);
  if (bytes == 0 || bytes > kernels.in_block_shared || count > INT_MAX) return false;
  if (count < 1) return true;
  const CUfunction function = program.dtype() == DType::F32 ? kernels.in_block_f32 : kernels.in_block;
  int per_multiprocessor = 0;
  driver::check(driver::api().cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, function,
                                                                          kernel_abi::kMatrixKernelBlock, bytes),
                "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  const int occupancy = occupancy_class(per_multiprocessor);
  auto joins = [&](const Launch& l) {
    return l.program == &program && l.occupancy == occupancy && l.argument.num_runs < kernel_abi::kMatrixInBlockRuns &&
           l.blocks + count <= INT_MAX;
  };
  auto it = std::find_if(launches_.begin(), launches_.end(), joins);
  if (it == launches_.end())
    it = launches_.insert(launches_.end(), {&program, function, occupancy, program.in_block(), 0, 0});
  const View view = view_of(program.program(), rows, cols);
  it->argument.runs[it->argument.num_runs++] = {reinterpret_cast<void*>(x),
                                                static_cast<int>(it->blocks),
                                                static_cast<int>(count),
                                                view.r,
                                                view.c,
                                                view.column_major ? 1 : 0,
                                                0};
  it->blocks += count;
  it->shared_bytes = std::max(it->shared_bytes, bytes);
  return true;
}

int InBlockLaunches::enqueue(CUstream stream) const {
  for (const Launch& l : launches_) {
    void* args[] = {const_cast<kernel_abi::MatrixInBlock*>(&l.argument)};
    driver::launch(l.function, static_cast<unsigned>(l.blocks), kernel_abi::kMatrixKernelBlock, stream, args, false,
                   "check that the stream belongs to the current context", static_cast<unsigned>(l.shared_bytes));
  }
  return static_cast<int>(launches_.size());
}

int run_matrix_program(const MatrixProgram& program, const double* arguments, DType dtype, const MatrixKernels& kernels,
                       const cublas::Handle& handle, CUdeviceptr x, CUdeviceptr scratch, std::size_t scratch_bytes,
                       long long count, long long rows, long long cols, CUstream stream, CUdeviceptr workspace) {
  check_dtype(dtype, "optgen::run_matrix_program");
  if (count == 0 || rows * cols == 0) return 0;
  check_batch(count, rows, cols, "optgen::run_matrix_program");
  const UnrolledProgram unrolled(program, arguments, dtype);
  InBlockLaunches in_block;
  if (in_block.add(unrolled, kernels, x, count, rows, cols)) return in_block.enqueue(stream);
  return unrolled.run_batched(kernels, handle, x, scratch, scratch_bytes, count, rows, cols, stream, workspace);
}

int UnrolledProgram::run_batched(const MatrixKernels& kernels, const cublas::Handle& handle, CUdeviceptr x,
                                 CUdeviceptr scratch, std::size_t scratch_bytes, long long count, long long rows,
                                 long long cols, CUstream stream, CUdeviceptr workspace) const {
  if (count == 0 || rows * cols == 0) return 0;
  check_batch(count, rows, cols, "optgen::run_matrix_program");
  const MatrixProgram& program = *program_;
  const MatrixTrace& trace = trace_;
  const DType dtype = dtype_;
  const View view = view_of(program, rows, cols);
  // Nothing copied where the scratch holds it (Newton–Schulz: always), else as few buffers as live.
  Placement placed = place(program, trace, view, count, dtype, true);
  if (placed.bytes > scratch_bytes) placed = place(program, trace, view, count, dtype, false);
  if (placed.bytes > scratch_bytes)
    throw Error("optgen::run_matrix_program", std::string(program.name) + " of " + std::to_string(count) +
                                                  " matrices of " + std::to_string(rows) + " x " +
                                                  std::to_string(cols) + " needs " + std::to_string(placed.bytes) +
                                                  " bytes of scratch, given " + std::to_string(scratch_bytes));
  const int type = dtype == DType::F32 ? cublas::kF32 : cublas::kBF16;
  const int batch = static_cast<int>(count);
  auto at = [&](int v) {
    const int b = placed.buffer[static_cast<std::size_t>(v)];
    return b == 0 ? x : scratch + placed.offset[static_cast<std::size_t>(b)];
  };
  auto rows_of = [&](int v) {
    return static_cast<int>(view.rows(program, trace.variable[static_cast<std::size_t>(v)]));
  };
  auto cols_of = [&](int v) {
    return static_cast<int>(view.cols(program, trace.variable[static_cast<std::size_t>(v)]));
  };
  auto size_of_value = [&](int v) { return static_cast<long long>(rows_of(v)) * cols_of(v); };
  auto op = [](bool transposed) { return transposed ? cublas::kOpT : cublas::kOpN; };
  int launches = 0;
  for (const MatrixTraceStep& s : trace.steps) {
    switch (s.op) {
      case MatrixOp::Normalize: {
        const std::int64_t size = size_of_value(s.a);
        kernel_abi::MatrixBatch norms{reinterpret_cast<const void*>(at(s.a)),
                                      reinterpret_cast<void*>(at(s.out)),
                                      reinterpret_cast<double*>(scratch + placed.partials),
                                      size,
                                      part_size(size),
                                      batch,
                                      static_cast<int>(part_count(size)),
                                      s.beta};
        void* args[] = {&norms};
        const auto blocks = static_cast<unsigned>(static_cast<std::int64_t>(batch) * norms.parts);
        const bool f32 = dtype == DType::F32;
        for (CUfunction kernel :
             {f32 ? kernels.sum_squares_f32 : kernels.sum_squares, f32 ? kernels.normalize_f32 : kernels.normalize})
          driver::launch(kernel, blocks, kernel_abi::kMatrixKernelBlock, stream, args, false,
                         "check that the stream belongs to the current context");
        launches += 2;
        break;
      }
      case MatrixOp::Product: {
        // cuBLAS is column-major: a view stored column-major is multiplied as written; one stored
        // row-major is each matrix's transpose there, so D = a op(A) op(B) + b C is computed as
        // Dᵀ = a op(B)ᵀ op(A)ᵀ + b Cᵀ.
        const int ar = rows_of(s.a), ac = cols_of(s.a), br = rows_of(s.b), bc = cols_of(s.b);
        const int dr = rows_of(s.out), dc = cols_of(s.out), inner = s.transpose_a ? ar : ac;
        const long long sa = size_of_value(s.a), sb = size_of_value(s.b), sd = size_of_value(s.out);
        const CUdeviceptr c = s.c < 0 ? at(s.out) : at(s.c);
        const float beta = s.c < 0 ? 0.0f : s.beta;
        if (view.column_major)
          handle.multiply({op(s.transpose_a), op(s.transpose_b), dr, dc, inner, ar, br, dr, sa, sb, sd, batch, type},
                          s.alpha, at(s.a), at(s.b), beta, c, at(s.out), stream, workspace);
        else
          handle.multiply({op(s.transpose_b), op(s.transpose_a), dc, dr, inner, bc, ac, dc, sb, sa, sd, batch, type},
                          s.alpha, at(s.b), at(s.a), beta, c, at(s.out), stream, workspace);
        ++launches;
        break;
      }
      case MatrixOp::Combine: {
        // An element a thread over the matrices as stored: a view stored column-major is each
        // matrix's transpose, whose sum is the sum of the transposes, so only the shape turns.
        const int dr = rows_of(s.out), dc = cols_of(s.out);
        kernel_abi::MatrixSum sum{reinterpret_cast<const void*>(at(s.a)),
                                  s.b < 0 ? nullptr : reinterpret_cast<const void*>(at(s.b)),
                                  reinterpret_cast<void*>(at(s.out)),
                                  view.column_major ? dc : dr,
                                  view.column_major ? dr : dc,
                                  batch,
                                  s.transpose_a,
                                  s.transpose_b,
                                  s.alpha,
                                  s.b < 0 ? 0.0f : s.beta};
        void* args[] = {&sum};
        const long long total = static_cast<long long>(dr) * dc * batch;
        const auto blocks = static_cast<unsigned>(
            std::min<long long>((total + kernel_abi::kMatrixKernelBlock - 1) / kernel_abi::kMatrixKernelBlock, 8192));
        driver::launch(dtype == DType::F32 ? kernels.combine_f32 : kernels.combine, blocks,
                       kernel_abi::kMatrixKernelBlock, stream, args, false,
                       "check that the stream belongs to the current context");
        ++launches;
        break;
      }
      case MatrixOp::Assign:
      case MatrixOp::Repeat: throw std::logic_error("run_matrix_program: an unrolled program has no Assign or Repeat");
    }
  }
  if (placed.copy_result) {
    driver::check(driver::api().cuMemcpyDtoDAsync(
                      x, at(trace.result), size_of(dtype) * static_cast<std::size_t>(count * rows * cols), stream),
                  "cuMemcpyDtoDAsync");
    ++launches;
  }
  return launches;
}

}  // namespace optgen

#ifndef OPTGEN_KERNEL_ABI_H_
#define OPTGEN_KERNEL_ABI_H_
// The kernel ABI: the arguments of every generated kernel, defined once for both sides. The runtime
// includes this header, and so does every <spec>_kernels.cu through the device library
// (optgen/device/kernels.cuh, which the runtime hands NVRTC), so the host and the device compile the
// same definitions. It is plain C++ that host compilers and NVRTC both accept: no includes, built-in
// types only.
//
// A variant's stage kernels, <variant>_<storage>_<stage>, run one step of the groups they were
// bound to, each launched as
//   kernel<<<table.num_chunks, block_size>>>(TableView table, GroupTable groups, StepInputs inputs,
//                                            ReductionTable reductions)
// and its group kernel, <variant>_group, writes a value into the group table and recomputes the
// GroupValues the next step reads (at prepare() time, and for every setter):
//   kernel<<<blocks, kGroupKernelBlock>>>(GroupTable groups, GroupWrite write)

namespace optgen {
namespace kernel_abi {

/// The version of this ABI. A generated launcher records the version it was generated for, and the
/// runtime refuses to run a launcher generated for another (regenerate it with this optgen).
enum { kVersion = 28 };

/// One block's work in a stage: `count` elements of one tensor from element index * chunk_size.
struct Chunk {
  int tensor;
  int index;
  int group;  ///< the tensor's param group, an index into the GroupTable
  int count;  ///< elements: chunk_size, or fewer in a tensor's last chunk (0 for a group with none)
};

struct ShapeTable;

/// A bound tensor list: built once by prepare(), resident on the device, never changed by a step.
/// Chunks are ordered by decreasing `count`, so that the short ones fill the last wave.
struct TableView {
  /// [operand * num_tensors + tensor]: param, grad, then each state of the variant; then, for a
  /// kernel set whose params have an fp32 master copy (Storage::param_write Master), the masters.
  void* const* pointers;
  const long long* numel;  ///< [tensor]
  const Chunk* chunks;     ///< [blockIdx.x]
  long long chunk_size;    ///< elements per block, a multiple of 64
  int num_tensors;
  int num_chunks;  ///< the grid size; every group has at least one chunk
  /// Device memory: the rows and columns of every tensor, for a variant with matrix, row or column
  /// code (VariantInfo::stage_blocks nonzero beyond kChunkRuns); null for every other.
  const ShapeTable* shapes;
  /// The seed of stochastic rounding's random stream (optgen/random.h); unused by other kernels.
  unsigned long long seed;
  /// [tensor]: the element count a spec's `numel` (and `mean`) reads: the whole tensor's, of which
  /// the bound one is a rank's shard (Tensor::whole_numel), else equal to `numel`.
  const long long* whole_numel;
};

// ---- Rows, columns and matrices (Adafactor's factored second moment). A tensor of two or more
// dimensions is B matrices of R rows and C columns (its last two dimensions); any other is one
// matrix of one row (B = 1, R = 1, C = numel) and not factored. Its element i is at row
// p = i / C, column q = (i / (R * C)) * C + i % C, matrix b = i / (R * C), counting over the
// tensor's B * R rows, B * C columns and B matrices; a plan numbers the rows (columns, matrices)
// of all its tensors in tensor order (ShapeTable::row_offset, ...).
//
// A variant with such code launches, in each Reduce stage, the kinds of block its reductions need
// (VariantInfo::stage_blocks, a mask of BlockKind bits), one after the other in the order of the
// enum: block b of the stage is a block of the first kind in the mask while b is below that kind's
// total (ShapeTable::block_offset), and so on. Within a kind, a tensor's blocks are consecutive
// (block_offset[kind * (num_tensors + 1) + tensor] is its first, [... + num_tensors] the total).
// A stage with both row lines and column segments takes them as one range, each tensor's blocks of
// the two interleaved (the device library's rows_and_columns_block), so that both read a tensor's
// gradient rows at about the same time, the second read from L2 where they are still there; most
// tensors have no row lines there (rows_in_column_segments), their gradient read once.
// The Update stage launches one block per chunk, as for every variant.
//
// A factored tensor whose matrices are one element (R = C = 1 and whole, a 1x1 convolution's
// weight), in a variant whose kernels have code for it (VariantInfo::unit_matrices; the generator's
// unit_matrices.h), is marked kUnitMatrices in ShapeTable::factored: its rows, columns and matrices
// are its elements, each row, column and matrix value computed where it is read. A Reduce stage
// whose chunk runs read rows or columns runs that code for it there; its chunks are the last of
// the chunk table, which the Update stage leaves to an Update stage of their own, launched after
// it (KernelInfo::unit_update). It has no blocks of the other kinds and no rows, columns or
// matrices in the plan's numbering.
//
// - kChunkRuns: reductions over each tensor or group: runs of chunks, as in every plan
//   (ceil(num_chunks / chunks_per_block) blocks; not counted in block_offset).
// - kRowLines: reductions over each row (row_sum, row_mean): a line of C elements per row.
// - kColumnSegments: reductions over each column: a thread per column, summing down a segment
//   of up to kColumnSegmentRows rows; a column of more rows is split into segments, whose
//   partials the last segment to arrive combines in segment order. In a stage of both kinds, a
//   tensor whose rows are whole tiles of columns (rows_in_column_segments) has no row lines: its
//   column segments reduce its rows too, so the stage reads its gradient once. A segment's warps
//   combine each of its rows over their columns; where a row spans several tiles, their partials
//   (ShapeTable::row_partials) the last tile of the band to arrive combines in tile order.
// - kMatrixRowLines: reductions of row code over each matrix (a line of R rows per matrix).
// - kMatrixColumnLines: reductions of column code over each matrix (a line of C columns).
// - kSnapshot: copies the row and column states into ShapeTable::row_snapshot and
//   col_snapshot (stage 1 only, where the Update stage reads a state; see there).
// A line is reduced by line_lanes(length) consecutive threads of a block (a power of two up to
// the block size), block_size / lanes lines per block: line_blocks() blocks per tensor. A line's
// (a column segment's) first thread, once it stored the line's results, computes and stores the
// values they finish (ShapeTable::row_values, ...).
enum BlockKind {
  kChunkRuns = 0,
  kRowLines = 1,
  kColumnSegments = 2,
  kMatrixRowLines = 3,
  kMatrixColumnLines = 4,
  kSnapshot = 5,
  kNumBlockKinds = 6
};

enum { kColumnSegmentRows = 256 };

#ifdef __CUDACC__
#define OPTGEN_ABI_FUNCTION __host__ __device__ __forceinline__ constexpr
#else
#define OPTGEN_ABI_FUNCTION inline constexpr
#endif

// ---- Launch shape. A stage kernel's threads per block and elements in flight per thread are
// compiled in, as the macros OPTGEN_BLOCK_SIZE and OPTGEN_ELEMENTS_PER_THREAD. The generated
// source defines them (optgen emit --block-size, --elements-per-thread) unless the compiler is
// given them, so the runtime can compile the same source for another shape (a tuning table's,
// optgen/tuning.h) with NVRTC at load time; the register caps (__launch_bounds__) follow the block
// size, keeping the threads per SM the generator was told to fit.
/// The macros' names, for the generator that defines them and the runtime that overrides them.
constexpr char kBlockSizeMacro[] = "OPTGEN_BLOCK_SIZE";
constexpr char kElementsPerThreadMacro[] = "OPTGEN_ELEMENTS_PER_THREAD";
/// An Update stage with 8-bit states fits the threads per SM the generator gives it (three blocks,
/// or two where its registers foresee spills: emit_cuda's blockwise_threads) where it can without
/// spills, and one block fewer where it cannot: compile_kernels (kernel_images.h) compiles a
/// source, and again with the kernels that spilled named in this macro, comma-separated, as a
/// string literal. The generated source's OPTGEN_BLOCKWISE_LAUNCH_BOUNDS(kernel, threads) asks
/// named_in.
constexpr char kFewerBlocksMacro[] = "OPTGEN_FEWER_BLOCKS";
#ifndef OPTGEN_FEWER_BLOCKS
#define OPTGEN_FEWER_BLOCKS ""  // kFewerBlocksMacro, unless the compilation defines it: no kernel
#endif
/// The launch bounds of such a kernel, given the kernel's name and its threads per SM:
/// OPTGEN_BLOCKWISE_LAUNCH_BOUNDS(name, threads).
constexpr char kBlockwiseLaunchBoundsMacro[] = "OPTGEN_BLOCKWISE_LAUNCH_BOUNDS";
/// Whether `name` is one of the comma-separated names in `list`.
OPTGEN_ABI_FUNCTION bool named_in(const char* list, const char* name) {
  for (const char* p = list; *p != '\0';) {
    const char* q = name;
    while (*q != '\0' && *p == *q) ++p, ++q;
    if (*q == '\0' && (*p == ',' || *p == '\0')) return true;
    while (*p != '\0' && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return false;
}
/// Threads per block a stage kernel may be compiled for: a power of two from 32 to 1024.
OPTGEN_ABI_FUNCTION bool valid_block_size(int threads) {
  return threads >= 32 && threads <= 1024 && (threads & (threads - 1)) == 0;
}
/// Elements in flight per thread a kernel may be compiled for: a power of two up to 64.
OPTGEN_ABI_FUNCTION bool valid_elements_per_thread(int elements) {
  return elements >= 1 && elements <= 64 && (elements & (elements - 1)) == 0;
}

/// ShapeTable::factored of a tensor whose matrices are one element, run as element code.
constexpr unsigned char kUnitMatrices = 2;

/// Whether a factored tensor of matrices of R x C (whole_R x whole_C where it is a rank's shard)
/// is run as element code (kUnitMatrices) by the kernels of a variant with such code.
OPTGEN_ABI_FUNCTION bool unit_matrices(long long R, long long C, long long whole_R, long long whole_C) {
  return R == 1 && C == 1 && whole_R == 1 && whole_C == 1;
}

/// Values one lane of a line takes at most: a plan's own (ShapeTable::line_values, chosen by
/// shape_layout.h's plan_line_values), a power of two from kFewestLineValues to kMostLineValues.
/// More values a lane make fewer, longer blocks, each finding its tensor and shape once for more
/// values: what a plan of many lines wants (gpt2's Adam-mini row means, 42,871 blocks of four
/// 768-value rows at 32 values a lane, ran at 48% of DRAM's bandwidth; at 128, 94% of the step's
/// floor against 88%), and what one too small to fill the GPU does not (ghostnet_100's Adafactor 8%
/// slower at 128: its few blocks are its longest path).
enum { kMostLineValues = 128, kFewestLineValues = 32 };
/// Threads that reduce one line of `length` values: the least power of two that leaves each at
/// most `line_values` values, from 1 to `block_size`. A thread reads 16 bytes an access and keeps
/// four accesses in flight: so a row of gpt2's 768 is a few warps' lanes, not a block's (when a
/// block took each row, its blocks were too short to keep memory busy: 0.85 TB/s in Adam-mini's row
/// means).
OPTGEN_ABI_FUNCTION int line_lanes(long long length, int block_size, int line_values) {
  int lanes = 1;
  while (lanes < block_size && static_cast<long long>(lanes) * line_values < length) lanes *= 2;
  return lanes;
}
/// Lines of `length` values that one thread takes, shaped.cuh's kShortLineBatch at a time: 1 for a
/// line of more than kShortLineValues / 2, else the most (a power of two) that hold at most
/// kShortLineValues values together. A block of short lines (a 1x1 conv weight's rows and columns
/// are one value long) then does a block's worth of work for what finding its tensor costs it. (A
/// line that short is one lane's: kShortLineValues / 2 <= kFewestLineValues.)
enum { kShortLineValues = 32 };
OPTGEN_ABI_FUNCTION int short_lines(long long length) {
  int n = 1;
  while (static_cast<long long>(2 * n) * (length > 0 ? length : 1) <= kShortLineValues) n *= 2;
  return n;
}
/// Lines a block reduces: block_size / line_lanes lines at a time, short_lines times.
OPTGEN_ABI_FUNCTION long long lines_per_block(long long length, int block_size, int line_values) {
  return static_cast<long long>(block_size / line_lanes(length, block_size, line_values)) * short_lines(length);
}
/// Blocks that reduce `lines` lines of `length` values each.
OPTGEN_ABI_FUNCTION long long line_blocks(long long lines, long long length, int block_size, int line_values) {
  const long long per_block = lines_per_block(length, block_size, line_values);
  return (lines + per_block - 1) / per_block;
}
/// Row segments of a column of `rows` rows.
OPTGEN_ABI_FUNCTION long long column_segments(long long rows) {
  return rows <= kColumnSegmentRows ? 1 : (rows + kColumnSegmentRows - 1) / kColumnSegmentRows;
}
/// Blocks of a tensor's columns: tiles of block_size * short_lines(rows) consecutive columns (of
/// any of its matrices; a thread takes short_lines(rows) of them, block_size apart), times the
/// segments of each (short_lines is 1 where there are several).
OPTGEN_ABI_FUNCTION long long column_blocks(long long columns, long long rows, int block_size) {
  const long long tile = static_cast<long long>(block_size) * short_lines(rows);
  return (columns + tile - 1) / tile * column_segments(rows);
}
/// Whether, in a stage of row lines and column segments, a tensor's column segments reduce its rows
/// as well (and it has no row lines): at kRowTileThreads threads a block, a tile of block_size
/// columns lies in one matrix (each matrix's rows are whole tiles; four warps of 32 lanes of four
/// columns each), and its segments are one round (short_lines is 1).
enum { kRowTileThreads = 128 };
OPTGEN_ABI_FUNCTION bool rows_in_column_segments(long long rows, long long cols, int block_size) {
  return block_size == kRowTileThreads && rows > kShortLineValues / 2 && cols > 0 && cols % block_size == 0;
}
/// Elements a thread takes at a time in the Update stage of long rows (KernelInfo::long_row_update)
/// rather than the operand table's 4 (16 bytes of f32): what a vector does for its row, column and
/// matrix (the division that finds them, the values it loads, the tests for a row's column 0)
/// then serves eight elements. A plan launches it where its rows are long (long_rows in the
/// runtime's shape_layout.h): in rows of a few values each element loads its own row's and
/// column's values, and lanes eight elements apart read them from twice the sectors.
enum { kLongRowVector = 8 };
/// Blocks that copy a tensor's row and column states (kSnapshot): one entry per thread.
OPTGEN_ABI_FUNCTION long long snapshot_blocks(long long rows, long long columns, int block_size) {
  const long long entries = rows > columns ? rows : columns;
  return (entries + block_size - 1) / block_size;
}
#undef OPTGEN_ABI_FUNCTION

/// What the stages of a variant with matrix, row or column code read besides TableView: built by
/// prepare(), device memory. Results are floats (a row's sum of squares, ...), one per row,
/// column or matrix of each reduction of that scope, numbered by the scope's own index s
/// (ReductionSlot::scope_index): [s * num_rows + row_offset[tensor] + p], and likewise.
///
/// Values (generator/shapes.h's StoredValue): a matrix, row or column value computed once, by the
/// first thread of the line that finished the results it reads, for later stages to load, in slot
/// j of its domain: [j * num_rows + row], and likewise; a row or column state's new value among
/// them, which the Update stage stores into the state.
///
/// Row and column states are read by Reduce stages, and written by the Update stage (by the element
/// at column 0 of a row, at row 0 of a column), whose other blocks may still read them: so an
/// Update stage that reads one (not through a stored value) reads it from a snapshot, which the
/// first Reduce stage's kSnapshot blocks copy (as floats): the j-th row state of the variant (in
/// operand order) at row_snapshot[j * num_rows + row], the j-th column state at
/// col_snapshot[j * num_cols + column]. A state absent for a tensor (a null pointer) reads as 0 and
/// is never written.
struct ShapeTable {
  const long long* rows;           ///< [tensor]: R
  const long long* cols;           ///< [tensor]: C
  const unsigned char* factored;   ///< [tensor]: 1 for two or more dimensions, kUnitMatrices (see there)
  const long long* row_offset;     ///< [tensor]: its first row in the plan's numbering
  const long long* col_offset;     ///< [tensor]: its first column
  const long long* matrix_offset;  ///< [tensor]: its first matrix
  const long long* block_offset;   ///< [kind * (num_tensors + 1) + tensor], kind a BlockKind (0 for kChunkRuns)
  float* row_results;              ///< [s * num_rows + row]
  float* col_results;              ///< [s * num_cols + column]
  float* matrix_results;           ///< [s * num_matrices + matrix]
  float* row_values;               ///< [j * num_rows + row]
  float* col_values;               ///< [j * num_cols + column]
  float* matrix_values;            ///< [j * num_matrices + matrix]
  /// [(col_partial_offset[tensor] + segment * B * C + column) * num_col_reductions + s]: the
  /// partial sums of the column segments of tensors with more than one (column_segments > 1).
  float* col_partials;
  const long long* col_partial_offset;  ///< [tensor]: in units of num_col_reductions floats
  /// [col_tile_offset[tensor] + tile]: the segments of a tile of columns that arrived.
  unsigned int* col_arrivals;
  const long long* col_tile_offset;  ///< [tensor]
  float* row_snapshot;               ///< [j * num_rows + row]
  float* col_snapshot;               ///< [j * num_cols + column]
  /// [tensor]: the rows a spec's `rows` reads: R, or for a rank's shard of the rows of a matrix (a
  /// tensor of two dimensions bound with a whole_numel beyond its numel) the whole matrix's.
  const long long* whole_rows;
  /// [tensor]: the columns a spec's `cols` reads: C, or for a rank's shard of the columns of a
  /// matrix (bound with Tensor::shard_dim 1) the whole matrix's.
  const long long* whole_cols;
  long long num_rows;
  long long num_cols;
  long long num_matrices;
  int num_col_reductions;
  int num_tensors;
  int line_values;  ///< values a lane of a line takes at most (line_lanes): the plan's own
  int num_row_reductions;
  /// [(row_partial_offset[tensor] + tile * B * R + row) * num_row_reductions + s]: the partial sums
  /// over each tile of block_size columns of the rows its column segments reduce
  /// (rows_in_column_segments), for tensors whose rows span several tiles.
  float* row_partials;
  const long long* row_partial_offset;  ///< [tensor]: in units of num_row_reductions floats
  /// [row_band_offset[tensor] + matrix * column_segments(R) + segment]: the tiles of a band of rows
  /// that arrived.
  unsigned int* row_arrivals;
  const long long* row_band_offset;  ///< [tensor]
};

/// The device-resident state of every param group: hyperparameters, step counts, scalar state and
/// the values the next step's element code reads. A step launches with fixed arguments and reads
/// all of it from here, so it can be captured in a CUDA graph and replayed.
///
/// Step counts, scalar state and values are double-buffered: each group has two slots. Every block
/// of a group's Update stage takes a ticket, arrivals = (arrivals + 1) % (2 * blocks), and reads
/// slot 0 while its ticket is below `blocks`, slot 1 from there on; so a step's blocks all read one
/// slot. The block with the first ticket of a step (0 or `blocks`) writes the step's results (step
/// + 1, the advanced scalar state, and the values of the step after) into the other slot, which no
/// block of that step reads. Once all of a step's blocks have taken their tickets the other slot is
/// current. Nothing else is needed to advance a group: no host work, no second launch, no atomics
/// on floats.
struct GroupTable {
  double* hyperparameters;     ///< [group * num_hyperparameters + i]: declaration order, bools as 0/1
  long long* steps;            ///< [slot * num_groups + group]: steps taken
  double* scalar_state;        ///< [(slot * num_groups + group) * num_scalar_states + i]
  unsigned char* values;       ///< [(slot * num_groups + group) * values_stride]: the group's GroupValues
  unsigned int* arrivals;      ///< [group]: tickets its Update-stage blocks took, modulo 2 * blocks
  const unsigned int* blocks;  ///< [group]: blocks its Update stage launches per step (at least 1)
  const int* variant;          ///< [group]: its variant, an index into the launcher's variant table
  int num_groups;
  int num_hyperparameters;
  int num_scalar_states;
  int values_stride;  ///< bytes per slot entry of `values`, a multiple of 8
};

/// The inputs of one step that may change from step to step: AMP's, as torch.amp.GradScaler hands
/// them to fused optimizers. Both are device pointers; null means not given.
struct StepInputs {
  const float* grad_scale;  ///< the gradients carry this factor: the update sees grad / *grad_scale
  const float* found_inf;   ///< nonzero: skip the whole step (no parameter, state or step count changes)
};

/// The reductions of a plan (a variant's specs use them: LAMB's norms, a global gradient norm): the
/// results its Reduce stages leave for the stages after them, and their scratch. Every reduction of
/// a variant has an index r < stride. A Reduce stage's block writes its chunk's partial result of
/// each of the stage's reductions into `partials`; the last block of a tensor to finish (counted in
/// `tensor_arrivals`) combines the tensor's partials in chunk order into `tensor_results`; the last
/// tensor of a group (counted in `group_arrivals`) combines the group's tensors in tensor order
/// into `group_results`. Fixed orders and no floating-point atomics: the same inputs give the same
/// bits. The finishing blocks reset the counters, so a captured step replays. All zero (null) for a
/// variant without reductions.
///
/// The results are reduction-major: the `num_tensors` results of reduction r are contiguous, and so
/// are its `num_groups`, so that a caller whose tensors are shards of a larger model can all-reduce
/// each reduction's results across ranks (a sum or a maximum) between the stages
/// (Optimizer::set_reduction_hook). Results are raw sums and maxima, in double: a norm's result is
/// its sum of squares.
struct ReductionTable {
  double* partials;               ///< [(first_chunk[tensor] + chunk index) * stride + r]
  double* tensor_results;         ///< [r * num_tensors + tensor]: over the tensor (its part, for a group reduction)
  double* group_results;          ///< [r * num_groups + group]: a group reduction, by GroupTable group index
  unsigned int* tensor_arrivals;  ///< [tensor]: blocks of the stage that finished the tensor's chunks
  unsigned int* group_arrivals;   ///< [group]: tensors of the group the stage finished
  const int* first_chunk;         ///< [tensor]: where the tensor's partials start
  const int* chunks;              ///< [tensor]: its chunks (at least 1: an empty tensor has one of 0 elements)
  const int* group_first_tensor;  ///< [group]: the group's first tensor in this table
  const int* group_tensors;       ///< [group]: its tensors in this table (0: not in this table)
  int stride;                     ///< reductions per tensor (and per group): the variant's count
  int num_tensors;                ///< the plan's tensors (TableView::num_tensors)
  int num_groups;                 ///< GroupTable::num_groups
  int chunks_per_block;           ///< of a Reduce stage: 1 to kReduceChunksPerBlock, fewer for small plans
  /// [group]: the global gradient norm a clipping variant's Update stage publishes (clipping.h in
  /// the generator), +inf when AMP skipped the step; null when no variant clips.
  float* grad_norms;
};

/// What a group kernel writes before it recomputes the GroupValues of the current slot.
enum GroupField { kNoField = 0, kHyperparameter = 1, kStepCount = 2, kScalarState = 3 };
struct GroupWrite {
  double value;
  int variant;      ///< the kernel's own variant: groups of other variants are left alone
  int first_group;  ///< the groups written: [first_group, first_group + num_groups)
  int num_groups;
  int field;  ///< a GroupField
  int index;  ///< of the hyperparameter or scalar state
};

enum { kGroupKernelBlock = 128 };

/// Matrix functions (a spec's newton_schulz): a Reduce stage stores each tensor's operand, bf16 (or
/// f32, where the kernel set's storage says so: KernelInfo::matrix_dtypes), in the runtime's buffer
/// of the matrix value, whose matrices of one shape lie consecutively, and the
/// runtime applies the function to them before the next stage. Around cuBLAS's products it divides
/// each matrix by max(its Frobenius norm, eps) with two kernels of optgen/device/matrices.cuh, in
/// the module of every spec with a matrix value, each launched with kMatrixKernelBlock threads and
/// count * parts blocks:
///   kMatrixSumSquares(MatrixBatch)  block b: the sum of squares of part b % parts of matrix b / parts
///                                   of x, into partials[b]
///   kMatrixNormalize(MatrixBatch)   block b: that part of x divided by max(the matrix's norm, eps),
///                                   into the same elements of y (which may be x); the norm is the
///                                   sum of the matrix's partials, added in the same order by every
///                                   block
/// A part is `part_size` consecutive elements (the last one the rest), a multiple of 8. The *F32
/// kernels do the same for f32 matrices.
struct MatrixBatch {
  const void* x;        ///< count * size elements
  void* y;              ///< where kMatrixNormalize writes: x, or count * size elements apart from it
  double* partials;     ///< count * parts
  long long size;       ///< elements per matrix
  long long part_size;  ///< elements per part
  int count;            ///< matrices
  int parts;            ///< per matrix: ceil(size / part_size)
  float eps;
};
/// A matrix program's sum of matrices without a product (MatrixOp::Combine):
///   kMatrixCombine(MatrixSum)  d = alpha op(a) + beta op(b) of `count` row-major rows x cols
///                              matrices (op a transpose where asked: a then holds cols x rows
///                              matrices), grid-strided over every element; b may be null (beta 0).
struct MatrixSum {
  const void* a;
  const void* b;
  void* d;
  long long rows, cols;  ///< of each matrix of d
  int count;
  int transpose_a, transpose_b;
  float alpha, beta;
};
/// A tensor bound with column splits (Tensor::column_splits) keeps its matrix value's operand as
/// the Reduce stage stores it, row-major `batch` x `rows` x (`splits` x `width`) at `whole`, and its
/// matrix function runs on the same values as `batch` x `splits` matrices of `rows` x `width` at
/// `pieces`, each consecutive in its bucket. One launch moves every such tensor of a stage:
///   kMatrixColumnSplits(const ColumnSplit* splits, int count, int to_pieces)  each block a
///       grid-stride share of each of the `count` tensors' units, from `whole` to `pieces`
///       (to_pieces) or back
/// `width` counts units of `unit_bytes` (16, 8, 4 or 2: the widest that divides a piece's row in
/// bytes and both addresses).
struct ColumnSplit {
  void* whole;
  void* pieces;
  long long batch, rows, splits, width;
  int unit_bytes;
};
/// A matrix program run whole by one block per matrix, every value in shared memory (the runtime's
/// choice where a matrix's view has at most kMatrixInBlockRows rows, its values fit in a block's
/// shared memory and its unrolled program has at most kMatrixInBlockSteps steps and
/// kMatrixInBlockBuffers buffers: there cuBLAS's launches, a batch's per product, cost more than the
/// products). One launch runs the program on up to kMatrixInBlockRuns runs of matrices, each of its
/// own shape:
///   kMatrixProgramInBlock(MatrixInBlock)  block b: matrix b - runs[k].first of runs[k].x, where
///                                         runs[k] is the last run whose first <= b, through `steps`;
///                                         kMatrixKernelBlock threads, dynamic shared memory for
///                                         the largest run's buffers
/// The steps name buffers, not places: a buffer holds values of one shape, rows and columns each
/// the view's rows or its columns (buffer_rows, buffer_cols), so one program serves every shape. A
/// block lays its buffers out in shared memory in order, each a row-major matrix of its rows and
/// columns rounded up to multiples of 16 and each row 8 elements more (a row's stride an odd multiple
/// of 16 bytes), the padding zero. A product runs on tensor cores in bf16 with fp32 accumulation
/// (f32: in fp32 on the CUDA cores), rounded to the dtype as cuBLAS rounds its output; the sums of
/// squares and the division are those of kMatrixNormalize.
enum { kMatrixInBlockSteps = 40, kMatrixInBlockRows = 64, kMatrixInBlockBuffers = 8, kMatrixInBlockRuns = 64 };
enum MatrixStepOp {
  kNormalizeStep,  ///< out = a / max(frobenius_norm(a), beta)
  kProductStep,    ///< out = alpha op(a) op(b) + beta c (c may be out)
  kCombineStep,    ///< out = alpha op(a) + beta op(b)
};
/// A buffer's side: the view's rows (R) or its columns (C).
enum MatrixSide { kViewRows, kViewCols };
struct MatrixStep {
  int op;            ///< a MatrixStepOp
  int out, a, b, c;  ///< buffers; b and c -1 for none
  int transpose_a, transpose_b;
  float alpha, beta;
};
/// `count` matrices of one shape, consecutive at x: row-major rows x cols (the view's), or the
/// view column-major where column_major (a tall matrix seen transposed).
struct MatrixInBlockRun {
  void* x;
  int first;  ///< the launch's block of its first matrix
  int count;
  int rows, cols;
  int column_major;
  int unused;
};
struct MatrixInBlock {
  int num_steps, num_buffers, num_runs;
  int argument, result;                    ///< the buffers the matrix is loaded into and stored from
  int buffer_rows[kMatrixInBlockBuffers];  ///< per buffer, a MatrixSide
  int buffer_cols[kMatrixInBlockBuffers];  ///< per buffer, a MatrixSide
  MatrixStep steps[kMatrixInBlockSteps];
  MatrixInBlockRun runs[kMatrixInBlockRuns];
};
constexpr char kMatrixProgramInBlock[] = "optgen_matrix_program_in_block";
constexpr char kMatrixProgramInBlockF32[] = "optgen_matrix_program_in_block_f32";
constexpr char kMatrixCombine[] = "optgen_matrix_combine";
constexpr char kMatrixCombineF32[] = "optgen_matrix_combine_f32";
constexpr char kMatrixSumSquares[] = "optgen_matrix_sum_squares";
constexpr char kMatrixNormalize[] = "optgen_matrix_normalize";
constexpr char kMatrixSumSquaresF32[] = "optgen_matrix_sum_squares_f32";
constexpr char kMatrixNormalizeF32[] = "optgen_matrix_normalize_f32";
constexpr char kMatrixColumnSplits[] = "optgen_matrix_column_splits";
enum { kMatrixKernelBlock = 256 };

/// A Reduce stage's block reduces ReductionTable::chunks_per_block consecutive chunks of the chunk
/// table, at most this many, so its grid is ceil(num_chunks / chunks_per_block) blocks (an Update
/// stage's is num_chunks).
enum { kReduceChunksPerBlock = 8 };

// ---- The layout, field by field. The host writes these structs (as kernel arguments, and Chunk
// into device memory) and the kernels read them, compiled by two compilers: g++ or clang for the
// host, NVRTC for the device. Every offset, size and alignment is written down here, in the text
// both compile, so a change that moves a field fails the build on both sides instead of making a
// kernel read another field's bytes. A change here is an ABI change: bump kVersion. The element
// types of the arrays the structs point to are checked too.
//
// offsetof without <cstddef>, which NVRTC has no path to: g++ and clang have __builtin_offsetof.
// NVRTC does not (its EDG front end is not in GNU mode there) but has EDG's __INTADDR__, which
// folds the address of a member of a null pointer to a constant.
#ifdef __CUDACC_RTC__
#define OPTGEN_ABI_OFFSETOF(type, field) __INTADDR__(&((type*)0)->field)
#else
#define OPTGEN_ABI_OFFSETOF(type, field) __builtin_offsetof(type, field)
#endif
static_assert(sizeof(int) == 4 && sizeof(unsigned int) == 4, "32-bit int expected");
static_assert(sizeof(long long) == 8 && sizeof(double) == 8 && sizeof(void*) == 8, "a 64-bit target expected");

static_assert(OPTGEN_ABI_OFFSETOF(Chunk, tensor) == 0, "Chunk::tensor moved");
static_assert(OPTGEN_ABI_OFFSETOF(Chunk, index) == 4, "Chunk::index moved");
static_assert(OPTGEN_ABI_OFFSETOF(Chunk, group) == 8, "Chunk::group moved");
static_assert(OPTGEN_ABI_OFFSETOF(Chunk, count) == 12, "Chunk::count moved");
static_assert(sizeof(Chunk) == 16 && alignof(Chunk) == 4, "Chunk changed size or alignment");

static_assert(OPTGEN_ABI_OFFSETOF(TableView, pointers) == 0, "TableView::pointers moved");
static_assert(OPTGEN_ABI_OFFSETOF(TableView, numel) == 8, "TableView::numel moved");
static_assert(OPTGEN_ABI_OFFSETOF(TableView, chunks) == 16, "TableView::chunks moved");
static_assert(OPTGEN_ABI_OFFSETOF(TableView, chunk_size) == 24, "TableView::chunk_size moved");
static_assert(OPTGEN_ABI_OFFSETOF(TableView, num_tensors) == 32, "TableView::num_tensors moved");
static_assert(OPTGEN_ABI_OFFSETOF(TableView, num_chunks) == 36, "TableView::num_chunks moved");
static_assert(OPTGEN_ABI_OFFSETOF(TableView, shapes) == 40, "TableView::shapes moved");
static_assert(OPTGEN_ABI_OFFSETOF(TableView, seed) == 48, "TableView::seed moved");
static_assert(OPTGEN_ABI_OFFSETOF(TableView, whole_numel) == 56, "TableView::whole_numel moved");
static_assert(sizeof(TableView) == 64 && alignof(TableView) == 8, "TableView changed size or alignment");

static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, rows) == 0, "ShapeTable::rows moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, cols) == 8, "ShapeTable::cols moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, factored) == 16, "ShapeTable::factored moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, row_offset) == 24, "ShapeTable::row_offset moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, col_offset) == 32, "ShapeTable::col_offset moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, matrix_offset) == 40, "ShapeTable::matrix_offset moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, block_offset) == 48, "ShapeTable::block_offset moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, row_results) == 56, "ShapeTable::row_results moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, col_results) == 64, "ShapeTable::col_results moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, matrix_results) == 72, "ShapeTable::matrix_results moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, row_values) == 80, "ShapeTable::row_values moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, col_values) == 88, "ShapeTable::col_values moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, matrix_values) == 96, "ShapeTable::matrix_values moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, col_partials) == 104, "ShapeTable::col_partials moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, col_partial_offset) == 112, "ShapeTable::col_partial_offset moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, col_arrivals) == 120, "ShapeTable::col_arrivals moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, col_tile_offset) == 128, "ShapeTable::col_tile_offset moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, row_snapshot) == 136, "ShapeTable::row_snapshot moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, col_snapshot) == 144, "ShapeTable::col_snapshot moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, whole_rows) == 152, "ShapeTable::whole_rows moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, whole_cols) == 160, "ShapeTable::whole_cols moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, num_rows) == 168, "ShapeTable::num_rows moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, num_cols) == 176, "ShapeTable::num_cols moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, num_matrices) == 184, "ShapeTable::num_matrices moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, num_col_reductions) == 192, "ShapeTable::num_col_reductions moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, num_tensors) == 196, "ShapeTable::num_tensors moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, line_values) == 200, "ShapeTable::line_values moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, num_row_reductions) == 204, "ShapeTable::num_row_reductions moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, row_partials) == 208, "ShapeTable::row_partials moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, row_partial_offset) == 216, "ShapeTable::row_partial_offset moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, row_arrivals) == 224, "ShapeTable::row_arrivals moved");
static_assert(OPTGEN_ABI_OFFSETOF(ShapeTable, row_band_offset) == 232, "ShapeTable::row_band_offset moved");
static_assert(sizeof(ShapeTable) == 240 && alignof(ShapeTable) == 8, "ShapeTable changed size or alignment");

static_assert(OPTGEN_ABI_OFFSETOF(GroupTable, hyperparameters) == 0, "GroupTable::hyperparameters moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupTable, steps) == 8, "GroupTable::steps moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupTable, scalar_state) == 16, "GroupTable::scalar_state moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupTable, values) == 24, "GroupTable::values moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupTable, arrivals) == 32, "GroupTable::arrivals moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupTable, blocks) == 40, "GroupTable::blocks moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupTable, variant) == 48, "GroupTable::variant moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupTable, num_groups) == 56, "GroupTable::num_groups moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupTable, num_hyperparameters) == 60, "GroupTable::num_hyperparameters moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupTable, num_scalar_states) == 64, "GroupTable::num_scalar_states moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupTable, values_stride) == 68, "GroupTable::values_stride moved");
static_assert(sizeof(GroupTable) == 72 && alignof(GroupTable) == 8, "GroupTable changed size or alignment");

static_assert(OPTGEN_ABI_OFFSETOF(StepInputs, grad_scale) == 0, "StepInputs::grad_scale moved");
static_assert(OPTGEN_ABI_OFFSETOF(StepInputs, found_inf) == 8, "StepInputs::found_inf moved");
static_assert(sizeof(StepInputs) == 16 && alignof(StepInputs) == 8, "StepInputs changed size or alignment");

static_assert(OPTGEN_ABI_OFFSETOF(ReductionTable, partials) == 0, "ReductionTable::partials moved");
static_assert(OPTGEN_ABI_OFFSETOF(ReductionTable, tensor_results) == 8, "ReductionTable::tensor_results moved");
static_assert(OPTGEN_ABI_OFFSETOF(ReductionTable, group_results) == 16, "ReductionTable::group_results moved");
static_assert(OPTGEN_ABI_OFFSETOF(ReductionTable, tensor_arrivals) == 24, "ReductionTable::tensor_arrivals moved");
static_assert(OPTGEN_ABI_OFFSETOF(ReductionTable, group_arrivals) == 32, "ReductionTable::group_arrivals moved");
static_assert(OPTGEN_ABI_OFFSETOF(ReductionTable, first_chunk) == 40, "ReductionTable::first_chunk moved");
static_assert(OPTGEN_ABI_OFFSETOF(ReductionTable, chunks) == 48, "ReductionTable::chunks moved");
static_assert(OPTGEN_ABI_OFFSETOF(ReductionTable, group_first_tensor) == 56,
              "ReductionTable::group_first_tensor moved");
static_assert(OPTGEN_ABI_OFFSETOF(ReductionTable, group_tensors) == 64, "ReductionTable::group_tensors moved");
static_assert(OPTGEN_ABI_OFFSETOF(ReductionTable, stride) == 72, "ReductionTable::stride moved");
static_assert(OPTGEN_ABI_OFFSETOF(ReductionTable, num_tensors) == 76, "ReductionTable::num_tensors moved");
static_assert(OPTGEN_ABI_OFFSETOF(ReductionTable, num_groups) == 80, "ReductionTable::num_groups moved");
static_assert(OPTGEN_ABI_OFFSETOF(ReductionTable, chunks_per_block) == 84, "ReductionTable::chunks_per_block moved");
static_assert(OPTGEN_ABI_OFFSETOF(ReductionTable, grad_norms) == 88, "ReductionTable::grad_norms moved");
static_assert(sizeof(ReductionTable) == 96 && alignof(ReductionTable) == 8, "ReductionTable changed size or alignment");

static_assert(OPTGEN_ABI_OFFSETOF(GroupWrite, value) == 0, "GroupWrite::value moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupWrite, variant) == 8, "GroupWrite::variant moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupWrite, first_group) == 12, "GroupWrite::first_group moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupWrite, num_groups) == 16, "GroupWrite::num_groups moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupWrite, field) == 20, "GroupWrite::field moved");
static_assert(OPTGEN_ABI_OFFSETOF(GroupWrite, index) == 24, "GroupWrite::index moved");
static_assert(sizeof(GroupWrite) == 32 && alignof(GroupWrite) == 8, "GroupWrite changed size or alignment");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixBatch, x) == 0, "MatrixBatch::x moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixBatch, y) == 8, "MatrixBatch::y moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixBatch, partials) == 16, "MatrixBatch::partials moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixBatch, size) == 24, "MatrixBatch::size moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixBatch, part_size) == 32, "MatrixBatch::part_size moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixBatch, count) == 40, "MatrixBatch::count moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixBatch, parts) == 44, "MatrixBatch::parts moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixBatch, eps) == 48, "MatrixBatch::eps moved");
static_assert(sizeof(MatrixBatch) == 56 && alignof(MatrixBatch) == 8, "MatrixBatch changed size or alignment");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixSum, a) == 0, "MatrixSum::a moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixSum, b) == 8, "MatrixSum::b moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixSum, d) == 16, "MatrixSum::d moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixSum, rows) == 24, "MatrixSum::rows moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixSum, cols) == 32, "MatrixSum::cols moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixSum, count) == 40, "MatrixSum::count moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixSum, transpose_a) == 44, "MatrixSum::transpose_a moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixSum, transpose_b) == 48, "MatrixSum::transpose_b moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixSum, alpha) == 52, "MatrixSum::alpha moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixSum, beta) == 56, "MatrixSum::beta moved");
static_assert(sizeof(MatrixSum) == 64 && alignof(MatrixSum) == 8, "MatrixSum changed size or alignment");
static_assert(OPTGEN_ABI_OFFSETOF(ColumnSplit, pieces) == 8, "ColumnSplit::pieces moved");
static_assert(OPTGEN_ABI_OFFSETOF(ColumnSplit, batch) == 16, "ColumnSplit::batch moved");
static_assert(OPTGEN_ABI_OFFSETOF(ColumnSplit, width) == 40, "ColumnSplit::width moved");
static_assert(OPTGEN_ABI_OFFSETOF(ColumnSplit, unit_bytes) == 48, "ColumnSplit::unit_bytes moved");
static_assert(sizeof(ColumnSplit) == 56 && alignof(ColumnSplit) == 8, "ColumnSplit changed size or alignment");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixStep, out) == 4, "MatrixStep::out moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixStep, transpose_a) == 20, "MatrixStep::transpose_a moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixStep, alpha) == 28, "MatrixStep::alpha moved");
static_assert(sizeof(MatrixStep) == 36 && alignof(MatrixStep) == 4, "MatrixStep changed size or alignment");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixInBlockRun, first) == 8, "MatrixInBlockRun::first moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixInBlockRun, rows) == 16, "MatrixInBlockRun::rows moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixInBlockRun, column_major) == 24, "MatrixInBlockRun::column_major moved");
static_assert(sizeof(MatrixInBlockRun) == 32 && alignof(MatrixInBlockRun) == 8,
              "MatrixInBlockRun changed size or alignment");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixInBlock, argument) == 12, "MatrixInBlock::argument moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixInBlock, buffer_rows) == 20, "MatrixInBlock::buffer_rows moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixInBlock, steps) == 20 + 8 * kMatrixInBlockBuffers,
              "MatrixInBlock::steps moved");
static_assert(OPTGEN_ABI_OFFSETOF(MatrixInBlock, runs) == 1528, "MatrixInBlock::runs moved");
static_assert(sizeof(MatrixInBlock) == 1528 + 32 * kMatrixInBlockRuns && sizeof(MatrixInBlock) <= 4096,
              "MatrixInBlock changed size, or outgrew the 4 KB a kernel's arguments may take");
#undef OPTGEN_ABI_OFFSETOF

}  // namespace kernel_abi
}  // namespace optgen

#endif  // OPTGEN_KERNEL_ABI_H_

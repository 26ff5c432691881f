#pragma once
/// A variant's code for the tensors whose matrices are one element (a 1x1 convolution's weight
/// `(O, I, 1, 1)`: O·I matrices of one row and one column). There every row, column and matrix is
/// its element: a reduction over one of them is its operand, each row, column or matrix value is
/// element code, and a row or column state holds one value per element. Such a tensor needs no
/// lines, no stored values and no snapshot: the variant's Reduce stages run this code for it in their
/// chunk runs, its reductions over tensors and groups in the same slots (device/reduce.cuh's
/// chunk_runs), and an Update stage of its own updates it (KernelInfo::unit_update, launched after
/// the variant's, over its chunks); the plan gives it no blocks of the other kinds
/// (kernel_abi::kUnitMatrices).

#include <memory>

#include "ir.h"

namespace optgen {

/// The code of `variant` (compiled, with its stages) for tensors whose matrices are one element:
/// element-wise (uses_shapes is false), with the variant's stages, operands and reductions (those
/// over rows, columns and matrices left in no stage, so that every other keeps its index); `factored`
/// is true, `rows` and `cols` are 1, a state that exists only for tensors that are not factored
/// reads 0 and is not written. Null for a variant without row, column or matrix code, for its step
/// on shards, for one with a matrix value (Muon's function runs on every matrix), and for one with
/// programs beside the step (their kernels have no such code).
std::shared_ptr<const Program> unit_matrix_code(const Program& variant);

}  // namespace optgen

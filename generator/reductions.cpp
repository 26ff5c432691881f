#include "reductions.h"

namespace optgen {
namespace {

using Form = ReductionInfo::Form;

const std::vector<ReductionInfo> kReductions = {
    {"sum", ReduceOp::Sum, Domain::Tensor, Form::Plain, "the sum of x over the tensor's elements"},
    {"mean", ReduceOp::Sum, Domain::Tensor, Form::Mean, "the mean of x over the tensor's elements"},
    {"norm", ReduceOp::Sum, Domain::Tensor, Form::Norm, "the 2-norm of x over the tensor's elements"},
    {"max", ReduceOp::Max, Domain::Tensor, Form::Plain, "the largest x of the tensor's elements"},
    {"group_sum", ReduceOp::Sum, Domain::Group, Form::Plain, "the sum of x over every element of the group"},
    {"group_norm", ReduceOp::Sum, Domain::Group, Form::Norm, "the 2-norm of x over every element of the group"},
    {"group_max", ReduceOp::Max, Domain::Group, Form::Plain, "the largest x of every element of the group"},
    {"optimizer_sum", ReduceOp::Sum, Domain::Optimizer, Form::Plain,
     "the sum of x over every element of every group of the optimizer"},
    {"optimizer_norm", ReduceOp::Sum, Domain::Optimizer, Form::Norm,
     "the 2-norm of x over every element of every group of the optimizer"},
    {"optimizer_max", ReduceOp::Max, Domain::Optimizer, Form::Plain,
     "the largest x of every element of every group of the optimizer"},
    {"row_sum", ReduceOp::Sum, Domain::Row, Form::Plain, "the sum of x over each row of a factored tensor"},
    {"row_mean", ReduceOp::Sum, Domain::Row, Form::Mean, "the mean of x over each row of a factored tensor"},
    {"row_norm", ReduceOp::Sum, Domain::Row, Form::Norm, "the 2-norm of x over each row of a factored tensor"},
    {"row_max", ReduceOp::Max, Domain::Row, Form::Plain, "the largest x of each row of a factored tensor"},
    {"col_sum", ReduceOp::Sum, Domain::Column, Form::Plain, "the sum of x over each column of a factored tensor"},
    {"col_mean", ReduceOp::Sum, Domain::Column, Form::Mean, "the mean of x over each column of a factored tensor"},
    {"col_norm", ReduceOp::Sum, Domain::Column, Form::Norm, "the 2-norm of x over each column of a factored tensor"},
    {"col_max", ReduceOp::Max, Domain::Column, Form::Plain, "the largest x of each column of a factored tensor"},
    {"block_sum", ReduceOp::Sum, Domain::Row, Form::Plain, "the sum of x over each block of a tensor of whole blocks",
     true},
    {"block_mean", ReduceOp::Sum, Domain::Row, Form::Mean, "the mean of x over each block of a tensor of whole blocks",
     true},
    {"block_norm", ReduceOp::Sum, Domain::Row, Form::Norm,
     "the 2-norm of x over each block of a tensor of whole blocks", true},
    {"block_max", ReduceOp::Max, Domain::Row, Form::Plain, "the largest x of each block of a tensor of whole blocks",
     true},
};

}  // namespace

const char* to_string(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : "max"; }
const std::vector<ReductionInfo>& reductions() { return kReductions; }

const ReductionInfo* find_reduction(const std::string& name, int arity) {
  if (arity != 1) return nullptr;
  for (const auto& r : kReductions)
    if (name == r.name) return &r;
  return nullptr;
}

bool is_reduction_name(const std::string& name) { return find_reduction(name, 1) != nullptr; }

std::string reduction_names(Domain scope, bool blocks) {
  std::string names;
  for (const auto& r : kReductions)
    if (r.scope == scope && r.over_blocks == blocks) names += (names.empty() ? "" : ", ") + std::string(r.name);
  return names;
}

}  // namespace optgen

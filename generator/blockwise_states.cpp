#include "blockwise_states.h"

#include "optgen/kernel_abi.h"
#include "shapes.h"

namespace optgen {
namespace {

/// Why `p` cannot keep `state` in 8 bits, or "".
std::string reason(const Spec& spec, const Program& p, const std::string& state) {
  if (!p.matrix_values.empty()) return "variant " + p.variant + " has a matrix value";
  for (const ReductionValue& r : p.reductions) {
    if (block_kind(r) == kernel_abi::kChunkRuns) continue;
    bool reads = false;
    for_each_node(r.operand, [&](const Expr& e) {
      reads = reads ||
              (e->kind == NodeKind::Var && e->var == VarKind::State && e->level == Domain::Element && e->name == state);
    });
    if (reads)
      return std::string("a reduction over each ") +
             (spec.block_elements > 0 && r.scope == Domain::Row ? "block" : to_string(r.scope)) + " reads it";
  }
  return "";
}

}  // namespace

void check_blockwise_states(const Spec& spec, const std::vector<Program>& variants, const Storage& storage,
                            const std::string& written) {
  for (const auto& s : spec.states) {
    const DType dtype = storage.state_dtype(s.name);
    if (!is_blockwise(dtype)) continue;
    for (const Program& v : variants) {
      for (const Program* p : kernel_programs(v)) {
        const std::string why = reason(spec, *p, s.name);
        if (why.empty()) continue;
        throw SpecError(s.loc,
                        "storage '" + written + "' keeps state '" + s.name + "' in " + to_string(dtype) + ", but " +
                            why + ": 8-bit blockwise states are read a block of 256 elements at a time",
                        "give that state f32, bf16 or f16 (STATE=DTYPE)");
      }
    }
  }
}

}  // namespace optgen

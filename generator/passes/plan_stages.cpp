#include "passes.h"

namespace optgen {

Program plan_stages(const Program& program) {
  Program result = program;
  // Every value an element output reads is an element input, a constant, or a value computed
  // once at a lower level before the stage starts: one Update stage does the whole step. A
  // reduction (a tensor value computed from element values) would end a Reduce stage here.
  for (const auto& v : program.tensor_values)
    for_each_node(v.value, [&](const Expr& e) {
      if (e->level == Level::Element)
        throw InternalError("plan_stages: tensor value '" + v.name + "' reads element values");
    });
  result.stages = {{StageKind::Update, "update"}};
  return result;
}

}  // namespace optgen

#include "shapes.h"

#include <algorithm>
#include <set>

#include "evaluate.h"
#include "ir_mutator.h"
#include "optgen/kernel_abi.h"

namespace optgen {

kernel_abi::BlockKind block_kind(const ReductionValue& r) {
  switch (r.scope) {
    case Domain::Tensor:
    case Domain::Group:
    case Domain::Optimizer: return kernel_abi::kChunkRuns;
    case Domain::Row: return kernel_abi::kRowLines;
    case Domain::Column: return kernel_abi::kColumnSegments;
    case Domain::Matrix:
      return r.operand->level == Domain::Column ? kernel_abi::kMatrixColumnLines : kernel_abi::kMatrixRowLines;
    case Domain::Element: break;
  }
  throw InternalError("block_kind: reduction '" + r.name + "' into the element domain");
}

bool across_rows(const ReductionValue& r) {
  return r.scope == Domain::Column || (r.scope == Domain::Matrix && r.operand->level != Domain::Column);
}

bool across_cols(const ReductionValue& r) {
  return r.scope == Domain::Row || (r.scope == Domain::Matrix && r.operand->level != Domain::Row);
}

bool sums_across_shards(const Program& variant) {
  return std::any_of(variant.reductions.begin(), variant.reductions.end(),
                     [](const ReductionValue& r) { return across_rows(r) || across_cols(r); });
}

namespace {

/// When the reductions code of `level` reads are finished: the latest stage of those of `level`
/// read directly or through values of `level` (`own`), with the kinds of line that finish them at
/// that stage; and the latest stage of every other reduction it reads (`other`), through values
/// of any domain.
struct Finish {
  int own = 0;
  std::set<int> kinds;
  int other = 0;
};

Finish finish_of(const Program& p, const Expr& code, Domain level) {
  std::map<std::string, std::pair<const HoistedValue*, Domain>> values;
  for (Domain d : {Domain::Tensor, Domain::Matrix, Domain::Row, Domain::Column})
    for (const auto& v : p.values[d]) values.emplace(v.name, std::pair{&v, d});
  Finish f;
  std::set<std::pair<std::string, bool>> visited;
  std::vector<std::pair<Expr, bool>> work{{code, true}};  // code, and whether it is of `level`'s own path
  while (!work.empty()) {
    auto [root, own] = work.back();
    work.pop_back();
    for_each_node(root, [&, own = own](const Expr& e) {
      if (e->kind != NodeKind::Var) return;
      if (e->var == VarKind::Reduced) {
        for (const auto& r : p.reductions) {
          if (r.name != e->name) continue;
          if (own && r.scope == level) {
            if (r.stage > f.own) f.kinds.clear();
            if (r.stage >= f.own) {
              f.own = r.stage;
              f.kinds.insert(block_kind(r));
            }
          } else {
            f.other = std::max(f.other, r.stage);
          }
        }
      } else if (e->var == VarKind::Hoisted) {
        auto it = values.find(e->name);
        if (it == values.end()) return;
        const bool through_own = own && it->second.second == level;
        if (visited.insert({e->name, through_own}).second) work.push_back({it->second.first->value, through_own});
      }
    });
  }
  return f;
}

/// `e` where the tensor is factored: `factored`, and a tensor value that is a constant there
/// (`@factored = factored`, `@not_factored = !factored`), as constants, the selects on them decided.
Expr where_factored(const Program& p, const Expr& e) {
  struct Factored : Mutator {
    const Program& p;
    explicit Factored(const Program& program) : p(program) {}
    Expr rewrite(const Expr& n) override {
      if (n->kind == NodeKind::Var && n->var == VarKind::Factored) return Node::make_const(1, ValueType::Bool);
      if (n->kind == NodeKind::Var && n->var == VarKind::Hoisted && n->level == Domain::Tensor)
        for (const HoistedValue& v : p.values[Domain::Tensor])
          if (v.name == n->name) {
            const Expr value = (*this)(v.value);
            return value->is_const() ? value : n;
          }
      if (n->kind == NodeKind::Unary && n->unary_op() == UnaryOp::Not && n->args[0]->is_const())
        return Node::make_const(n->args[0]->value == 0 ? 1 : 0, ValueType::Bool);
      if (n->kind == NodeKind::Select && n->args[0]->is_const()) return n->args[n->args[0]->value != 0 ? 1 : 2];
      return n;
    }
  } factored(p);
  return factored(e);
}

/// Whether `a` and `b` compute the same value: the same nodes, operands compared the same way.
/// `equal` holds the pairs found equal so far, so that shared operands of a DAG are compared once.
bool same_code(const Expr& a, const Expr& b, std::set<std::pair<const Node*, const Node*>>& equal) {
  if (a == b || equal.count({a.get(), b.get()})) return true;
  if (a->args.size() != b->args.size()) return false;
  auto shallow = std::make_shared<Node>(*b);
  shallow->args = a->args;  // compared below, operand by operand
  if (!same_node(*a, *shallow)) return false;
  for (size_t i = 0; i < a->args.size(); ++i)
    if (!same_code(a->args[i], b->args[i], equal)) return false;
  equal.insert({a.get(), b.get()});
  return true;
}
bool same_code(const Expr& a, const Expr& b) {
  std::set<std::pair<const Node*, const Node*>> equal;
  return same_code(a, b, equal);
}

}  // namespace

std::vector<StoredValue> stored_values(const Program& variant) {
  std::vector<StoredValue> stored;
  if (!uses_shapes(variant) || variant.for_shards) return stored;
  for (Domain level : {Domain::Matrix, Domain::Row, Domain::Column}) {
    int slot = 0;
    auto consider = [&](const std::string& name, const Expr& value, bool new_state) {
      const Finish f = finish_of(variant, value, level);
      if (f.own == 0 || f.other >= f.own || f.kinds.size() != 1) return;
      const int kind = *f.kinds.begin();
      // A state's new value that equals a value the same lines store, where the tensor is
      // factored, takes that value's slot: a row or column state exists for factored tensors only
      // (`lower` asks for `when: factored`), and Adafactor's `row_var`, `factored ? new : old`,
      // is the stored `new` there.
      if (new_state)
        for (const StoredValue& v : stored)
          if (!v.new_state && v.level == level && v.stage == f.own && v.kind == kind &&
              same_code(where_factored(variant, v.value), where_factored(variant, value))) {
            stored.push_back({name, value, level, f.own, kind, v.slot, true, true});
            return;
          }
      if (slot == kMaxStoredValues) return;  // computed where read: a kernel's masks of slots hold 32
      stored.push_back({name, value, level, f.own, kind, slot++, new_state, false});
    };
    for (const auto& v : variant.values[level]) consider(v.name, v.value, false);
    for (const auto& o : variant.element_outputs)
      if (o.level == level) consider(o.name, o.value, true);
  }
  return stored;
}

const StoredValue* loaded_value(const std::vector<StoredValue>& stored, const std::string& name, Domain level,
                                int order, bool new_state) {
  for (const auto& v : stored)
    if (v.name == name && v.level == level && v.new_state == new_state && v.stage < order) return &v;
  return nullptr;
}

unsigned stage_blocks(const Program& variant, const Stage& stage) {
  if (stage.kind != StageKind::Reduce || !uses_shapes(variant)) return 0;
  unsigned mask = 0;
  for (const auto& r : variant.reductions)
    if (r.stage == stage.number) mask |= 1u << block_kind(r);
  // Chunk runs store the operands of its matrix values.
  for (const auto& m : variant.matrix_values)
    if (m.stage == stage.number) mask |= 1u << kernel_abi::kChunkRuns;
  // The first Reduce stage copies the row and column states the Update stage reads.
  if (stage.number == 1 && update_reads_shaped_states(variant)) mask |= 1u << kernel_abi::kSnapshot;
  return mask;
}

int scope_index(const Program& variant, size_t r) {
  const Domain scope = variant.reductions.at(r).scope;
  if (scope == Domain::Tensor || has_group_results(scope)) return static_cast<int>(r);
  int index = 0;
  for (size_t i = 0; i < r; ++i) index += variant.reductions[i].scope == scope ? 1 : 0;
  return index;
}

int scope_count(const Program& variant, Domain scope) {
  int count = 0;
  for (const auto& r : variant.reductions) count += r.scope == scope ? 1 : 0;
  return count;
}

std::vector<std::string> states_of_shape(const Program& variant, StateShape shape) {
  std::vector<std::string> list;
  for (const auto& name : variant.states)
    for (const auto& s : variant.spec->states)
      if (s.name == name && s.shape == shape) list.push_back(name);
  return list;
}

std::map<Domain, std::vector<const HoistedValue*>> shaped_values_read(const Program& p, std::vector<Expr> roots,
                                                                      int order) {
  const std::vector<StoredValue> stored = order > 0 ? stored_values(p) : std::vector<StoredValue>();
  std::map<std::string, std::pair<const HoistedValue*, Domain>> definitions;
  for (Domain d : {Domain::Matrix, Domain::Row, Domain::Column})
    for (const auto& v : p.values[d]) definitions.emplace(v.name, std::pair{&v, d});
  std::set<std::string> read;
  while (!roots.empty()) {
    Expr root = roots.back();
    roots.pop_back();
    for_each_node(root, [&](const Expr& e) {
      if (e->kind != NodeKind::Var || e->var != VarKind::Hoisted) return;
      auto it = definitions.find(e->name);
      if (it == definitions.end() || loaded_value(stored, e->name, it->second.second, order)) return;
      if (read.insert(e->name).second) roots.push_back(it->second.first->value);
    });
  }
  std::map<Domain, std::vector<const HoistedValue*>> by_level;
  for (Domain level : {Domain::Matrix, Domain::Row, Domain::Column})
    for (const auto& v : p.values[level])
      if (read.count(v.name)) by_level[level].push_back(&v);
  return by_level;
}

LoadedSlots loaded_slots(const Program& variant, const std::vector<Expr>& roots, int order) {
  const std::vector<StoredValue> stored = stored_values(variant);
  std::vector<Expr> all = roots;
  for (const auto& [level, list] : shaped_values_read(variant, roots, order))
    for (const HoistedValue* v : list) all.push_back(v->value);
  LoadedSlots slots;
  for (const auto& root : all)
    for_each_node(root, [&](const Expr& e) {
      if (e->kind != NodeKind::Var || e->var != VarKind::Hoisted) return;
      const StoredValue* v = loaded_value(stored, e->name, e->level, order);
      if (!v) return;
      (v->level == Domain::Row ? slots.row : v->level == Domain::Column ? slots.col : slots.matrix) |= 1u << v->slot;
    });
  return slots;
}

bool reads_position(const Program& variant, const std::vector<Expr>& roots, int order) {
  bool reads = !shaped_values_read(variant, roots, order).empty();
  for (const auto& root : roots)
    for_each_node(root, [&](const Expr& e) {
      if (e->kind != NodeKind::Var) return;
      const bool shaped_level = e->level == Domain::Row || e->level == Domain::Column || e->level == Domain::Matrix;
      if ((e->var == VarKind::Hoisted || e->var == VarKind::State) && shaped_level) reads = true;
      if (e->var == VarKind::Reduced)
        for (const auto& r : variant.reductions)
          if (r.name == e->name && r.scope != Domain::Tensor && !has_group_results(r.scope)) reads = true;
    });
  return reads;
}

std::vector<const Output*> update_computes(const Program& variant, const std::vector<StoredValue>& stored) {
  const int order = static_cast<int>(variant.stages.size());
  std::vector<const Output*> list;
  for (const auto& o : variant.element_outputs)
    if (o.stage == 0 && (o.level == Domain::Element || !loaded_value(stored, o.name, o.level, order, true)))
      list.push_back(&o);
  return list;
}

Program update_stage_view(const Program& variant) {
  Program p = variant;
  for (auto& o : p.element_outputs)
    if (o.first_step_only) o.value = Node::make_var(VarKind::Param, "param", ValueType::Float);
  p.element_outputs.erase(
      std::remove_if(p.element_outputs.begin(), p.element_outputs.end(), [](const Output& o) { return o.stage != 0; }),
      p.element_outputs.end());
  return p;
}

bool update_reads_position(const Program& variant) {
  if (!uses_shapes(variant)) return false;
  const Program p = update_stage_view(variant);
  std::vector<Expr> all;  // the code the stage computes
  for (const Output* o : update_computes(p, stored_values(p))) all.push_back(o->value);
  const bool stores_states = std::any_of(p.element_outputs.begin(), p.element_outputs.end(), [](const Output& o) {
    return o.level == Domain::Row || o.level == Domain::Column;
  });
  return stores_states || reads_position(p, all, static_cast<int>(p.stages.size()));
}

bool update_reads_shaped_states(const Program& variant) {
  if (!uses_shapes(variant)) return false;
  std::vector<Expr> roots;
  for (const Output* o : update_computes(variant, stored_values(variant))) roots.push_back(o->value);
  for (const auto& [level, list] : shaped_values_read(variant, roots, static_cast<int>(variant.stages.size())))
    for (const HoistedValue* v : list) roots.push_back(v->value);
  bool reads = false;
  for (const auto& root : roots)
    for_each_node(root, [&](const Expr& e) {
      reads = reads || (e->kind == NodeKind::Var && e->var == VarKind::State &&
                        (e->level == Domain::Row || e->level == Domain::Column));
    });
  return reads;
}

StatePresence state_presence(const Program& variant, const std::string& state) {
  auto it = variant.state_conditions.find(state);
  if (it == variant.state_conditions.end()) return StatePresence::Always;
  auto present = [&](bool factored) {
    return evaluate(it->second, [&](const Node& var) -> double {
             if (var.var == VarKind::Factored) return factored ? 1 : 0;
             auto flag = variant.flags.find(var.name);
             if (var.var == VarKind::Hyperparameter && flag != variant.flags.end()) return flag->second ? 1 : 0;
             throw InternalError("state_presence: the condition of state '" + state + "' reads '" + var.name +
                                 "', neither a flag nor factored");
           }) != 0;
  };
  const bool when_factored = present(true), when_not = present(false);
  if (when_factored && when_not) return StatePresence::Always;
  if (when_factored) return StatePresence::Factored;
  if (when_not) return StatePresence::NotFactored;
  throw InternalError("state_presence: state '" + state + "' of variant " + variant.variant + " exists for no tensor");
}

}  // namespace optgen

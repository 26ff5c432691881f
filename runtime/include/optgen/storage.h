#pragma once
/// Storage: how an optimizer keeps its operands in memory. Every operand of a kernel (the
/// parameter, the gradient, an optional fp32 master copy of the parameter, each state) has a dtype
/// its loads decode from and its stores encode to; the math is float whatever the storage. One
/// definition for the generator (which kernel sets to emit, and their names), the launchers' and
/// run-time specs' kernel tables, and the engine (which kernel set a group runs, what it allocates).
///
/// Text form (a spec's `storage:`, `optgen emit --storage`, optgen_add_optimizer's STORAGE):
///   PARAM[+master|+sr][:STATES][:STATE=DTYPE]...
/// - PARAM: f32, bf16 or f16: the params' and grads' dtype.
/// - +master: an fp32 master copy of each bf16 or f16 param, a buffer of the optimizer's: the update
///   reads and writes the master, and the param is written as the master rounded to nearest.
/// - +sr: bf16 params rounded stochastically (unbiased, seeded: optgen/random.h).
/// - STATES: f32 (the default), bf16, f16, q8 or uq8: every state not named after it. q8 and uq8
///   are 8-bit blockwise (DType::Q8, UQ8; optgen/blockwise8.h), for states of one value per element.
/// - STATE=DTYPE: one state's own dtype, e.g. "bf16:bf16:exp_avg_sq=f32", or bitsandbytes' 8-bit
///   AdamW "f32:q8:exp_avg_sq=uq8".
/// - VALUE=DTYPE: a matrix value's (a variable the spec assigns a matrix function to, as Muon's `o`):
///   bf16 by default (torch's: bf16 products that accumulate in fp32), or f32 ("f32:o=f32": the
///   function's products in fp32 throughout). Not STATES: that is the states'.
/// (No commas: the command line and CMake lists separate storage types with them.)

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "optgen/dtype.h"

namespace optgen {

const char* to_string(ParamWrite write);  ///< "nearest", "master", "stochastic"

/// The storage of one kernel set: the params' dtype and everything the optimizer stores.
struct Storage {
  DType param = DType::F32;
  ParamWrite param_write = ParamWrite::Nearest;
  DType states = DType::F32;  ///< every state not in `state_dtypes`
  /// States of a dtype other than `states`, then matrix values of one other than bf16, by name,
  /// without repeats (canonical_storage orders them as the spec declares them and drops the rest).
  std::vector<std::pair<std::string, DType>> state_dtypes;

  /// The dtype of state `name`.
  DType state_dtype(const std::string& name) const;
  /// The dtype of matrix value `name`: BF16 unless named.
  DType matrix_dtype(const std::string& name) const;
  /// A part of kernel names: "bf16_f32", "bf16_master_f32", "bf16_sr_bf16",
  /// "bf16_bf16_exp_avg_sq_f32".
  std::string name() const;
  /// The text form, as parse_storage reads it: "bf16+master", "bf16:bf16:exp_avg_sq=f32".
  std::string text() const;
  bool operator==(const Storage& other) const;
  bool operator!=(const Storage& other) const { return !(*this == other); }
};

/// Reads the text form; nullopt when malformed, with the reason in `error`. It checks what needs
/// no spec: a master copy or stochastic rounding of params that have neither need nor room for one.
std::optional<Storage> parse_storage(const std::string& text, std::string* error);

/// `storage` checked against a spec's states and matrix values (each in declaration order):
/// nullopt, with the reason in `error`, when it names neither a state nor a matrix value of the
/// spec, or gives a matrix value a dtype other than bf16 or f32; else the same storage with its
/// states' dtypes in declaration order, those equal to `states` dropped, then its matrix values'
/// other than bf16, so that equal storage compares and names equal. `written`, when given, is the
/// storage as the user wrote it, for the message.
std::optional<Storage> canonical_storage(const Storage& storage, const std::vector<std::string>& states,
                                         const std::vector<std::string>& matrix_values, std::string* error,
                                         const std::string& written = "");

/// Says that storage `written` is `earlier`, listed before it, again: "bf16 is listed twice", or
/// "f32:exp_avg=f32 is f32 again, listed before it" when they are equal only once canonical.
std::string repeated_storage(const std::string& written, const std::string& earlier);

/// Why canonical storage `storage` (written `written`) cannot be generated beside `earlier` (each
/// written as in `earlier_written`): it is one of them again (repeated_storage), or it names the same
/// kernels as one, since state names joined with '_' can collide (states a, b and a_bf16_b); "" when
/// it can.
std::string storage_clash(const std::vector<Storage>& earlier, const std::vector<std::string>& earlier_written,
                          const Storage& storage, const std::string& written);

/// What a spec generates unless it or the build says otherwise: f32, and bf16 params with f32 states.
std::vector<Storage> default_storage();

/// The storage types to generate kernels for: those `requested` (optgen emit --storage), else the
/// spec's `storage:` list, else default_storage().
std::vector<Storage> storage_to_generate(const std::vector<Storage>& requested,
                                         const std::vector<Storage>& spec_storage);

/// What an optimizer stores beyond the caller's params and grads: its choice when created (the
/// params' dtype comes with each group's tensors, and with it the kernel set: Storage).
struct StorageOptions {
  DType states = DType::F32;                                ///< every state not named below
  std::vector<std::pair<std::string, DType>> state_dtypes;  ///< per state or matrix value, by name
  /// For bf16 and f16 params (an f32 param group is refused unless Nearest).
  ParamWrite param_write = ParamWrite::Nearest;
  std::uint64_t seed = 0;  ///< of stochastic rounding's random stream

  /// The kernel storage a group of `param` tensors needs.
  Storage for_params(DType param) const { return {param, param_write, states, state_dtypes}; }
};

}  // namespace optgen

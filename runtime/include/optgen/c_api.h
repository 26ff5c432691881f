#ifndef OPTGEN_C_API_H
#define OPTGEN_C_API_H
/* The C ABI over optgen's generated optimizers, for any language that can call C (Python's ctypes
 * included). Every optimizer is created by its launcher's `optgen_<spec>_create` (declared in the
 * launcher's header, e.g. adam.h) and then driven by the generic functions below.
 *
 * Every function returns 0 on success and -1 on failure; optgen_last_error() then returns the
 * message (which call failed, the error, what to do), valid until the thread's next optgen call.
 * Nothing throws across this boundary. */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct optgen_optimizer optgen_optimizer;

/* Element types: the values of optgen::DType. */
enum { OPTGEN_F32 = 0, OPTGEN_BF16 = 1, OPTGEN_F16 = 2 };

/* One parameter tensor; device pointers. `states`: NULL, or one caller-owned buffer per state the
 * spec declares (declaration order), used as it is. */
typedef struct {
  void* param;
  const void* grad;
  int64_t numel;
  int64_t grad_numel; /* -1: same as numel */
  int32_t dtype;      /* of param */
  int32_t grad_dtype; /* must equal dtype */
  void* const* states;
} optgen_tensor;

/* The message of the calling thread's last failure ("" if none). */
const char* optgen_last_error(void);

/* Adds a param group: `count` tensors, and `num_overrides` hyperparameters by name that differ from
 * the optimizer's defaults. Writes the group's index to `group` (may be NULL). */
int optgen_add_param_group(optgen_optimizer* optimizer, const optgen_tensor* tensors, size_t count,
                           const char* const* override_names, const double* override_values, size_t num_overrides,
                           size_t* group);

/* One step of every group, launched on `stream` (a CUstream or cudaStream_t; NULL: the default stream). */
int optgen_step(optgen_optimizer* optimizer, void* stream);

/* Sets a hyperparameter of one group, or of every group when `group` is negative. */
int optgen_set(optgen_optimizer* optimizer, const char* name, double value, int64_t group);
int optgen_get(const optgen_optimizer* optimizer, const char* name, size_t group, double* value);

/* The device address of one tensor's state buffer (its numel is the tensor's). */
int optgen_state(const optgen_optimizer* optimizer, const char* name, size_t group, size_t tensor, void** data);
int optgen_step_count(const optgen_optimizer* optimizer, size_t group, int64_t* count);
/* Kernel launches the last step made. */
int optgen_launches_last_step(const optgen_optimizer* optimizer, int* launches);
int optgen_set_chunk_size(optgen_optimizer* optimizer, int64_t elements);

void optgen_destroy(optgen_optimizer* optimizer);

#ifdef __cplusplus
}  /* extern "C" */

#include "optgen/optimizer.h"

namespace optgen {
/// For generated `optgen_<spec>_create` functions: a new optimizer with the spec's defaults except
/// the named overrides, as a C handle.
int create_for_c(const OptimizerInfo& info, std::vector<double> defaults, const char* const* names, const double* values,
                 size_t count, int32_t state_dtype, optgen_optimizer** out);
}  // namespace optgen
#endif

#endif /* OPTGEN_C_API_H */

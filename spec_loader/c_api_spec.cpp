// The C ABI's "Specs at run time" (optgen/c_api.h): optgen_create_from_spec, over
// load_spec_at_run_time. The handle owns the loaded spec its engine points into.
#include <memory>
#include <string>

#include "optgen/c_api.h"
#include "optgen/error.h"
#include "optgen/spec_at_run_time.h"

extern "C" int optgen_create_from_spec(const char* path, const char* const* names, const double* values, size_t count,
                                       const optgen_storage* storage, optgen_optimizer** out) {
  return optgen::guarded_for_c([&] {
    const char* call = "optgen_create_from_spec";
    if (path == nullptr || out == nullptr) throw optgen::Error(call, "path or out is NULL");
    auto spec = std::make_shared<const optgen::RuntimeSpec>(optgen::load_spec_at_run_time(path));
    std::string warnings;
    for (const std::string& warning : spec->warnings()) warnings += warning;
    *out = optgen::new_optimizer_for_c(call, spec->info(), spec->defaults(), names, values, count, storage, spec,
                                       warnings);
  });
}

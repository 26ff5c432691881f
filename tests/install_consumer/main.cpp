// Uses what an installed optgen provides, without a GPU: the launcher generated from this
// project's own spec, the built-in optimizers of liboptgen_builtin.so (C++ and C ABI), and the
// same spec loaded at run time by the spec loader (C++ and C ABI).
// tests/install_consumer.cmake checks what it prints.
#include <cstdio>

#include "adamw.h"              // a built-in launcher: in liboptgen_builtin.so
#include "builtin_launchers.h"  // every built-in launcher's OptimizerInfo by spec name
#include "optgen/c_api.h"
#include "optgen/spec_at_run_time.h"
#include "sign_descent.h"  // generated at this project's build time

namespace {

void print(const optgen::OptimizerInfo& info) {
  std::printf("%s (spec %s, %s, kernel ABI %d): %d hyperparameters, %d states, %d variants, %d kernels\n", info.name,
              info.spec, info.generator, info.abi_version, info.num_hyperparameters, info.num_states, info.num_variants,
              info.num_kernels);
}

}  // namespace

int main() {
  print(optgen::SignDescent::info());
  print(optgen::AdamW::info());
  std::printf("built-in launchers: %zu\n", optgen::builtin_launchers().size());

  // The C ABI of the shared library; creating an optimizer touches no GPU (add_param_group would).
  if (optgen_abi_version() != OPTGEN_ABI_VERSION) {
    std::fprintf(stderr, "C ABI %d, expected %d\n", optgen_abi_version(), OPTGEN_ABI_VERSION);
    return 1;
  }
  const char* names[] = {"lr"};
  const double values[] = {3e-4};
  optgen_optimizer* optimizer = nullptr;
  if (optgen_adamw_create(names, values, 1, NULL, &optimizer) != 0) {
    std::fprintf(stderr, "optgen_adamw_create: %s\n", optgen_last_error());
    return 1;
  }
  size_t groups = 1;
  optgen_num_groups(optimizer, &groups);
  std::printf("optgen_adamw_create: ok, %zu groups (optgen %s)\n", groups, optgen_version());
  optgen_destroy(optimizer);

  // The spec loaded at run time, for the storage its launcher was generated for: the same tables,
  // with no C++ compiler.
  try {
    const optgen::RuntimeSpec spec = optgen::load_spec_at_run_time(CONSUMER_SPEC, optgen::SpecOptions{{"f32"}});
    std::printf("loaded at run time: ");
    print(spec.info());
  } catch (const optgen::SpecLoadError& e) {
    std::fprintf(stderr, "load_spec_at_run_time: %s\n", e.what());
    return 1;
  }
  if (optgen_create_from_spec(CONSUMER_SPEC, names, values, 1, NULL, &optimizer) != 0) {
    std::fprintf(stderr, "optgen_create_from_spec: %s\n", optgen_last_error());
    return 1;
  }
  std::printf("optgen_create_from_spec: ok, %s\n", optgen_name(optimizer));
  optgen_destroy(optimizer);
  return 0;
}

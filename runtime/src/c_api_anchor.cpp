// The source of the libraries that consist of linked archives (liboptgen_builtin.so, and
// liboptgen.so for Python): the C ABI comes from the whole-archive link of the runtime and the
// launchers; this file adds what only such a library knows, the list of built-ins it links.
// OPTGEN_BUILTIN_SPEC_NAMES comes from specs/CMakeLists.txt, the one list of built-in specs.
#include "optgen/c_api.h"

extern "C" const char* optgen_builtin_specs(void) { return OPTGEN_BUILTIN_SPEC_NAMES; }

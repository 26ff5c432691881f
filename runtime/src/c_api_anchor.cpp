// A source for libraries that consist only of linked archives (optgen_builtin_shared): the C ABI
// comes from the whole-archive link of the runtime and the launchers.

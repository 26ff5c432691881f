"""liboptgen.so loaded by Python's ctypes, as a Python binding will load it: the built-in
optimizers and specs loaded at run time are created through the C ABI, and a spec error comes back
through optgen_last_error() with its file:line:col. Needs no GPU.

Usage: python3 python_library_smoke.py LIBOPTGEN SOURCE_DIR
"""
import ctypes
import os
import sys
import tempfile

OPTGEN_F32 = 0


def load(path):
    lib = ctypes.CDLL(path)
    lib.optgen_version.restype = ctypes.c_char_p
    lib.optgen_last_error.restype = ctypes.c_char_p
    lib.optgen_create_from_spec.argtypes = [
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_char_p),
        ctypes.POINTER(ctypes.c_double),
        ctypes.c_size_t,
        ctypes.c_int32,
        ctypes.POINTER(ctypes.c_void_p),
    ]
    lib.optgen_get.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_double)]
    lib.optgen_num_groups.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.optgen_destroy.argtypes = [ctypes.c_void_p]
    return lib


def create_from_spec(lib, path, overrides):
    names = (ctypes.c_char_p * max(len(overrides), 1))(*[name.encode() for name in overrides])
    values = (ctypes.c_double * max(len(overrides), 1))(*overrides.values())
    optimizer = ctypes.c_void_p()
    status = lib.optgen_create_from_spec(path.encode(), names, values, len(overrides), OPTGEN_F32,
                                         ctypes.byref(optimizer))
    return status, optimizer


def main(library, source_dir):
    lib = load(library)
    assert lib.optgen_abi_version() >= 1, lib.optgen_abi_version()
    print("liboptgen.so: optgen", lib.optgen_version().decode())

    status, optimizer = create_from_spec(lib, os.path.join(source_dir, "specs", "adamw.yaml"), {"lr": 0.25})
    assert status == 0, lib.optgen_last_error().decode()
    groups = ctypes.c_size_t(7)
    assert lib.optgen_num_groups(optimizer, ctypes.byref(groups)) == 0 and groups.value == 0
    lib.optgen_destroy(optimizer)

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "bad.yaml")
        with open(path, "w") as f:
            f.write("optimizer: Bad\nsummary: a spec with one mistake\nupdate:\n  - param = param - lr * grad\n")
        status, optimizer = create_from_spec(lib, path, {})
        assert status == -1 and not optimizer.value
        message = lib.optgen_last_error().decode()
        expected = path + ":4:21: error: unknown name 'lr'\n  - param = param - lr * grad\n"
        assert message.startswith(expected), message
        print(message, end="")

    for spec in sorted(os.listdir(os.path.join(source_dir, "specs"))):
        if spec.endswith(".yaml"):
            create = getattr(lib, "optgen_" + spec[:-5] + "_create")
            optimizer = ctypes.c_void_p()
            assert create(None, None, ctypes.c_size_t(0), ctypes.c_int32(OPTGEN_F32), ctypes.byref(optimizer)) == 0
            lib.optgen_destroy(optimizer)
    print("liboptgen.so: ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

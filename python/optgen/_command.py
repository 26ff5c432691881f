"""The `optgen` command of the wheel: the generator binary packaged beside liboptgen.so
(optgen/_bin/optgen), started with the CUDA wheels' NVRTC on its loader path (for `optgen
compile`). pyproject.toml names main() as the console script."""

from __future__ import annotations

import os
import sys

from . import _cuda_wheels


def binary_path() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "optgen")


def main() -> None:
    binary = binary_path()
    if not os.path.isfile(binary):
        sys.exit(f"optgen: {binary} is missing: this optgen package was installed without its generator; "
                 "reinstall it from a wheel, or use build/generator/optgen from a build")
    os.execve(binary, [binary] + sys.argv[1:], _cuda_wheels.environment_for_command(dict(os.environ)))


if __name__ == "__main__":
    main()

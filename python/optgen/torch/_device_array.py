"""Memory the optgen engine holds on the device, as torch.as_tensor takes it."""

from typing import Any, Optional, Sequence


class DeviceArray:
    """`shape` values of `typestr` ("<f4", "<f8") at device address `address`, C order or with
    `strides` in elements, through __cuda_array_interface__ (no stream: the caller orders its use).
    A tensor made from it holds it, and it holds `owner` (the engine whose memory it is), so the
    memory lives as long as both."""

    def __init__(self, address: int, shape: Sequence[int], typestr: str, strides: Optional[Sequence[int]] = None,
                 owner: Any = None):
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (address, False),
                                         "version": 2}
        if strides is not None:
            itemsize = int(typestr[2:])
            self.__cuda_array_interface__["strides"] = tuple(itemsize * s for s in strides)

"""8-bit blockwise states (optgen.Q8, optgen.UQ8) as torch tensors, on the device.

optgen.torch keeps such a state in Optimizer.state as the engine's buffer for the tensor (a uint8
tensor: the codes, padded to 16 bytes, then a float32 absmax per block of 256; optgen.Blockwise8Layout)
and in state_dicts as its values (float32, the param's shape): values reshard (a DTensor's blocks
are its local shard's, which another layout cuts elsewhere) and load into torch.optim's optimizers.

Codec.buffer quantises values as the step's kernels do (optgen/blockwise8.h: each value times the
reciprocal of its block's absmax, the nearest code, a tie to the even one, the signed map's sign
rule), with one difference in the absmax: the signed map ends at -0.9929687, not -1, so a block
whose largest magnitude is a negative value v gets |v| / 0.9929687 (v then has a code of its own;
of the floats whose product with 0.9929687 rounds to |v|, the one whose codes decode to every
value of the block) where the kernels take |v|. Values that codes of a block decode to therefore quantise back to the
same codes and absmax: a state_dict round trip in one layout changes no bit.
"""

from __future__ import annotations

import torch

from .._capi import Q8, Blockwise8Layout


class Codec:
    """Values to an 8-bit state's buffer and back, for one dtype (Q8 or UQ8) on one device."""

    def __init__(self, dtype: int, device: torch.device):
        self.layout = Blockwise8Layout.of(dtype)
        self.signed = dtype == Q8
        self.map = torch.tensor(self.layout.map, dtype=torch.float32, device=device)
        self.midpoints = (self.map[:-1] + self.map[1:]) * 0.5  # blockwise8::midpoint, in float32
        self.zero = int(torch.searchsorted(self.map, torch.zeros((), device=device)))  # the code of +0

    def values(self, buffer: torch.Tensor, numel: int) -> torch.Tensor:
        """The `numel` float32 values a buffer of codes and absmax holds (map[code] * absmax)."""
        offset, blocks = self.layout.absmax_offset(numel), self.layout.blocks(numel)
        absmax = buffer[offset:offset + 4 * blocks].view(torch.float32)
        return self.map[buffer[:numel].long()] * absmax.repeat_interleave(self.layout.block_size)[:numel]

    def buffer(self, values: torch.Tensor) -> torch.Tensor:
        """A new buffer (uint8, Blockwise8Layout.buffer_bytes) that holds `values` (any float dtype)."""
        numel, size = values.numel(), self.layout.block_size
        blocks = self.layout.blocks(numel)
        padded = torch.zeros(blocks * size, dtype=torch.float32, device=self.map.device)
        padded[:numel] = values.reshape(-1)
        v = padded.view(blocks, size)
        absmax = self._absmax(v)
        x = v * torch.reciprocal(absmax)[:, None]  # blockwise8::normalize, NaN in a block of zeros
        codes = torch.searchsorted(self.midpoints, x)  # midpoints[k - 1] < x <= midpoints[k]: code k
        at_midpoint = (codes < 255) & (x == self.midpoints[codes.clamp(max=254)])
        codes += at_midpoint & (codes % 2 == 1)  # a tie goes to the even code
        if self.signed:  # blockwise8::keep_sign: a code of the value's sign
            wrong = torch.signbit(self.map[codes]) != torch.signbit(v)
            codes += wrong * torch.where(v > 0, 1, -1)
        codes = torch.where((absmax > 0)[:, None], codes, self.zero)
        if self.signed:  # an absmax recovered from a negative value: the neighbour that decodes the block exactly
            decoded = self.map[codes]
            for neighbour in (torch.nextafter(absmax, torch.zeros_like(absmax)),
                              torch.nextafter(absmax, torch.full_like(absmax, float("inf")))):
                better = ~(decoded * absmax[:, None] == v).all(1) & (decoded * neighbour[:, None] == v).all(1)
                absmax = torch.where(better, neighbour, absmax)
        buffer = torch.zeros(self.layout.buffer_bytes(numel), dtype=torch.uint8, device=self.map.device)
        buffer[:numel] = codes.reshape(-1)[:numel].to(torch.uint8)
        offset = self.layout.absmax_offset(numel)
        buffer[offset:offset + 4 * blocks] = absmax.view(torch.uint8)
        return buffer

    def _absmax(self, v: torch.Tensor) -> torch.Tensor:
        """Each block's absmax: its largest magnitude, except for a signed block whose largest is
        negative and no positive value is as large as that absmax would decode (module docstring)."""
        if not self.signed:
            return v.abs().amax(1)
        largest = v.amax(1).clamp(min=0)
        smallest = (-v).amax(1).clamp(min=0)  # the magnitude of the most negative value
        edge = -self.map[0]  # 0.9929687, map[254] too
        # |v| is edge times the absmax, rounded: the quotient is the absmax or a neighbour (buffer()
        # then takes the one whose codes decode to the block's values).
        recovered = smallest / edge
        return torch.where(largest * edge >= smallest, largest, recovered)

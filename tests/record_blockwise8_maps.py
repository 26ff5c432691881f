#!/usr/bin/env python3
"""Compute bitsandbytes' two 8-bit dynamic quantisation maps, for runtime/include/optgen/blockwise8.h.

The source: bitsandbytes-foundation/bitsandbytes (commit 95f9af309d4d5793847169c39288dcd3fcbdf564),
bitsandbytes/functional.py, create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8).
The 8-bit blockwise optimizers take their maps from bitsandbytes/optim/optimizer.py,
Optimizer8bit.fill_qmap():

    name2qmap["dynamic"]  = F.create_dynamic_map(signed=True)    # qmap1: state1 (exp_avg)
    name2qmap["udynamic"] = F.create_dynamic_map(signed=False)   # qmap2: state2 (exp_avg_sq)

create_dynamic_map(), per exponent level i = 0..6 (scale 10^(i-6)):
    boundaries = torch.linspace(0.1, 1, 2^i + 1 (signed) or 2^(i+1) + 1 (unsigned), dtype=float32)
    means = (boundaries[:-1] + boundaries[1:]) / 2.0
    data += (10^(i-6) * means).tolist()           and, when signed, (-(10^(i-6)) * means).tolist()
then 0 and 1.0 are appended (2 * 127 + 2 = 254 + 2 = 256 entries for either map; the
"additional_items" branch adds nothing at these arguments), and the list is sorted ascending.

`dynamic_map` below follows it step by step in numpy float32, with torch's CPU arithmetic:
  - torch.linspace (aten/src/ATen/native/cpu/RangeFactoriesKernel.cpp, linspace_kernel), in float:
        step = (end - start) / (steps - 1);  halfway = steps / 2
        x[i] = start + step * i                 for i <  halfway
        x[i] = end - step * (steps - i - 1)     for i >= halfway
    torch's CPU kernels for AVX2 and AVX-512 (what x86 CPUs with those run) are compiled with FMA,
    and the compiler contracts `start + step * i` into one fused multiply-add; its DEFAULT kernel
    (ATEN_CPU_CAPABILITY=default) is not. The two differ in the last bit of some boundaries, and
    so of 42 entries of the signed map and 31 of the unsigned one. The header holds the FMA maps
    (what bitsandbytes gets on current x86 machines); --no-fma prints the others.
  - means: a float32 sum, halved (exact).
  - `10 ** k * means`: torch multiplies a float32 tensor by a Python number in float: the scalar
    rounded to float (float32(10.0 ** k)), then one float product. Negation is exact.
  - `.tolist()`, list.sort() and torch.tensor(dtype=float32) change no value.

Also the kernels' slot tables (blockwise8.h, "The kernels' quantiser"): for every slot of floats in
[2^-24, 1) (the float's exponent and top 7 mantissa bits), the code quantize() gives its least value,
counted as the code_bound()s below it (the midpoints, a tie to the even code folded in), and where
in the slot the bound to the next code lies (slot_entry).

Prints the tables as the C++ text of blockwise8.h (hex float literals, exact), or with --check,
compares them with the tables in the header. With torch installed, --torch also runs
create_dynamic_map's own code in torch (transcribed verbatim below) and checks that it gives the
same maps on this machine (torch then decides FMA or not by the CPU it runs on).

Run: python3 tests/record_blockwise8_maps.py [--check runtime/include/optgen/blockwise8.h] [--torch]
"""

import argparse
import re
import sys

import numpy as np

f32 = np.float32


def torch_linspace_f32(start, end, steps, fma):
    """torch.linspace(start, end, steps, dtype=torch.float32) on the CPU (linspace_kernel)."""
    assert steps >= 2
    start, end = f32(start), f32(end)
    step = (end - start) / f32(steps - 1)
    halfway = steps // 2
    out = np.empty(steps, dtype=f32)
    for i in range(steps):
        k = i if i < halfway else steps - i - 1
        base = start if i < halfway else end
        sign = 1.0 if i < halfway else -1.0
        if fma:
            # One rounding: float * small int is exact in double, and so is the sum here (the
            # exponents of base and product are close), so rounding the double once is the FMA.
            out[i] = f32(float(base) + sign * float(step) * k)
        else:
            out[i] = base + f32(sign) * (step * f32(k))
    return out


def dynamic_map(signed, fma=True, max_exponent_bits=7, total_bits=8):
    """create_dynamic_map(signed, max_exponent_bits, total_bits), as float32 values."""
    data = []
    non_sign_bits = total_bits - 1
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    i = 0
    for i in range(max_exponent_bits):
        if signed:
            fraction_items = 2 ** (i + non_sign_bits - max_exponent_bits) + 1
        else:
            fraction_items = 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1
        boundaries = torch_linspace_f32(0.1, 1, fraction_items, fma)
        means = (boundaries[:-1] + boundaries[1:]) / f32(2.0)
        scale = f32(10 ** (-(max_exponent_bits - 1) + i))
        data += list(scale * means)
        if signed:
            data += list(-scale * means)
    if additional_items > 0:  # empty at max_exponent_bits=7, total_bits=8
        boundaries = torch_linspace_f32(0.1, 1, additional_items + 1, fma)
        means = (boundaries[:-1] + boundaries[1:]) / f32(2.0)
        scale = f32(10 ** (-(max_exponent_bits - 1) + i))
        data += list(scale * means)
        if signed:
            data += list(-scale * means)
    data.append(f32(0))
    data.append(f32(1.0))
    assert len(data) == 2**total_bits
    data += [f32(0)] * (256 - len(data))
    data.sort()
    return np.array(data, dtype=f32)


def torch_maps():
    """The maps from create_dynamic_map's own code, run in torch (verbatim but for the name)."""
    import torch

    def create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
        data = []
        non_sign_bits = total_bits - 1
        additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
        for i in range(max_exponent_bits):
            fraction_items = int(
                2 ** (i + non_sign_bits - max_exponent_bits) + 1
                if signed
                else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1,
            )
            boundaries = torch.linspace(0.1, 1, fraction_items, dtype=torch.float32)
            means = (boundaries[:-1] + boundaries[1:]) / 2.0
            data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
            if signed:
                data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        if additional_items > 0:
            boundaries = torch.linspace(0.1, 1, additional_items + 1, dtype=torch.float32)
            means = (boundaries[:-1] + boundaries[1:]) / 2.0
            data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
            if signed:
                data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        data.append(0)
        data.append(1.0)
        assert len(data) == 2**total_bits
        gap = 256 - len(data)
        for i in range(gap):
            data.append(0)
        data.sort()
        return torch.tensor(data, dtype=torch.float32)

    return create_dynamic_map(True).numpy(), create_dynamic_map(False).numpy(), torch.backends.cpu.get_cpu_capability()


def c_hex(x):
    """An exact C++ float literal: a hex float, trailing zero hex digits dropped."""
    x = float(f32(x))
    if x == 0:
        return "0.0f" if np.copysign(1.0, x) > 0 else "-0.0f"
    mantissa, exponent = float.hex(x).split("p")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}p{exponent}f"


SLOT_MANTISSA_BITS = 7  # blockwise8.h: kSlotMantissaBits, kSlotLowBits, kSlotHighBits
SLOT_LOW_BITS = 103 << 23
SLOT_HIGH_BITS = 0x3F7FFFFF
SLOT_SHIFT = 23 - SLOT_MANTISSA_BITS
SLOTS = ((SLOT_HIGH_BITS - SLOT_LOW_BITS) >> SLOT_SHIFT) + 1


def code_bounds(values):
    """blockwise8.h code_bound(map, k), k = 1 .. 255: the midpoint of codes k - 1 and k, or the float
    below it where a tie goes up to k (k even)."""
    bounds = np.empty(255, dtype=f32)
    for k in range(1, 256):
        m = (values[k - 1] + values[k]) * f32(0.5)
        bounds[k - 1] = m if k % 2 else np.nextafter(m, f32(-np.inf), dtype=f32)
    return bounds


def slot_codes(values):
    """The code of each slot's least value: the number of code bounds below it."""
    starts = (SLOT_LOW_BITS + (np.arange(SLOTS, dtype=np.uint64) << SLOT_SHIFT)).astype(np.uint32)
    codes = np.searchsorted(code_bounds(values), starts.view(f32), side="left")
    assert codes.min() >= 0 and codes.max() <= 255
    return codes.astype(np.uint8)


def slot_entries(values):
    """blockwise8.h slot_entry: each slot's code (bits 0-7) plus, times 2^15 and modulo 2^32, the
    distance of the bound to the next code from the first slot's least float, clamped to the slot's
    last float (0x7fffffff, above every magnitude, stands for the bound above code 255)."""
    codes = slot_codes(values).astype(np.int64)
    bound_bits = np.append(code_bounds(values).view(np.uint32).astype(np.int64), 0x7FFFFFFF)  # k = 1 .. 256
    bounds = bound_bits[codes]  # the bound to code + 1
    starts = SLOT_LOW_BITS + (np.arange(SLOTS, dtype=np.int64) << SLOT_SHIFT)
    assert np.all(bounds >= starts), "a slot's least float is at or below the bound above its code"
    distance = np.minimum(bounds, starts + (1 << SLOT_SHIFT) - 1) - SLOT_LOW_BITS
    return ((distance << 15) + codes) & 0xFFFFFFFF


def slot_table_text(name, entries, comment):
    lines = [f"// {comment}", f"alignas(16) OPTGEN_BLOCKWISE8_TABLE unsigned {name}[{SLOTS}] = {{"]
    for row in range(0, SLOTS, 8):
        cells = ",".join(f"0x{int(c):08x}" for c in entries[row:row + 8])
        lines.append(f"    {cells},  // [{row}, {row + 7}]")
    lines.append("};")
    return "\n".join(lines)


def header_slot_table(text, name):
    match = re.search(name + r"\[" + str(SLOTS) + r"\] = \{(.*?)\};", text, re.S)
    if not match:
        sys.exit(f"no table {name}[{SLOTS}] in the header")
    body = re.sub(r"//[^\n]*", "", match.group(1))
    return np.array([int(t, 16) for t in body.split(",") if t.strip()], dtype=np.int64)


def table_text(name, values, comment):
    lines = [f"// {comment}", f"OPTGEN_BLOCKWISE8_TABLE float {name}[256] = {{"]
    for row in range(0, 256, 4):
        cells = ", ".join(c_hex(v) for v in values[row:row + 4])
        lines.append(f"    {cells},  // [{row}, {row + 3}]")
    lines.append("};")
    return "\n".join(lines)


def header_table(text, name):
    match = re.search(name + r"\[256\] = \{(.*?)\};", text, re.S)
    if not match:
        sys.exit(f"no table {name}[256] in the header")
    body = re.sub(r"//[^\n]*", "", match.group(1))
    values = [float.fromhex(t.strip().rstrip("f")) for t in body.split(",") if t.strip()]
    return np.array(values, dtype=f32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-fma", action="store_true", help="torch's DEFAULT CPU kernel: linspace without FMA")
    ap.add_argument("--check", metavar="HEADER", help="compare with the tables in this header instead of printing")
    ap.add_argument("--torch", action="store_true", help="also check against create_dynamic_map run in torch")
    args = ap.parse_args()

    signed_map = dynamic_map(True, fma=not args.no_fma)
    unsigned_map = dynamic_map(False, fma=not args.no_fma)
    for values in (signed_map, unsigned_map):
        assert len(values) == 256 and np.all(np.diff(values) > 0), "a map must be strictly increasing"
        assert values[-1] == 1.0 and 0.0 in values

    if args.torch:
        torch_signed, torch_unsigned, capability = torch_maps()
        for name, ours, theirs in (("signed", signed_map, torch_signed), ("unsigned", unsigned_map, torch_unsigned)):
            differ = np.nonzero(ours.view(np.uint32) != theirs.view(np.uint32))[0]
            print(f"torch ({capability}) {name} map: {len(differ)} entries differ {[int(i) for i in differ[:8]]}",
                  file=sys.stderr)
            if len(differ):
                sys.exit(1)

    if args.check:
        with open(args.check) as f:
            text = f.read()
        failed = False
        for name, values in (("kSignedMap", signed_map), ("kUnsignedMap", unsigned_map)):
            held = header_table(text, name)
            if len(held) != 256 or np.any(held.view(np.uint32) != values.view(np.uint32)):
                print(f"{args.check}: {name} differs from create_dynamic_map", file=sys.stderr)
                failed = True
            else:
                print(f"{args.check}: {name} matches create_dynamic_map (256 entries)")
        for name, values in (("kSignedSlots", signed_map), ("kUnsignedSlots", unsigned_map)):
            held = header_slot_table(text, name)
            if len(held) != SLOTS or np.any(held != slot_entries(values)):
                print(f"{args.check}: {name} differs from the map's slot entries", file=sys.stderr)
                failed = True
            else:
                print(f"{args.check}: {name} matches the map's slot entries ({SLOTS} entries)")
        sys.exit(1 if failed else 0)

    how = "without FMA (torch's DEFAULT CPU kernel)" if args.no_fma else "with FMA (torch's AVX2/AVX-512 CPU kernels)"
    print("// clang-format off")
    print(f"// Printed by tests/record_blockwise8_maps.py, linspace {how}.")
    print(table_text("kSignedMap", signed_map, 'create_dynamic_map(signed=True): name2qmap["dynamic"], state1'))
    print(table_text("kUnsignedMap", unsigned_map, 'create_dynamic_map(signed=False): name2qmap["udynamic"], state2'))
    print("// The slot tables (kSlots entries each, slot_entry): the code of each slot's least value and where")
    print("// in the slot the bound to the next code lies.")
    print(slot_table_text("kSignedSlots", slot_entries(signed_map), "kSignedMap's, for positive values: codes 127 .. 255"))
    print(slot_table_text("kUnsignedSlots", slot_entries(unsigned_map), "kUnsignedMap's"))
    print("// clang-format on")
    print("// Spot values (index: value, shortest decimal that reads back as the same float):")
    for name, values in (("kSignedMap", signed_map), ("kUnsignedMap", unsigned_map)):
        spots = [0, 1, 126, 127, 128, 129, 200, 254, 255]
        print(f"//   {name}: " + ", ".join(f"[{i}] {np.format_float_positional(values[i], unique=True)}" for i in spots))


if __name__ == "__main__":
    main()

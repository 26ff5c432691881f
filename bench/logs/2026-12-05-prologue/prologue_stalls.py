"""Stall samples of an Nsight Compute source page (CSV, SASS) before an offset, against the whole
kernel's. Usage: prologue_stalls.py SOURCE_PAGE.csv OFFSET_HEX"""
import csv
import sys

rows = list(csv.reader(open(sys.argv[1])))
header, data = rows[1], rows[2:]
column = {name: i for i, name in enumerate(header)}
end = int(sys.argv[2], 16)


def value(row, name):
    try:
        return float(row[column[name]] or 0)
    except (KeyError, ValueError):
        return 0.0


base = int(data[0][0], 16)
prologue = [r for r in data if int(r[0], 16) - base < end]
samples = "Warp Stall Sampling (All Samples)"
total = sum(value(r, samples) for r in data)
executed = sum(value(r, "Instructions Executed") for r in data)
print(f"samples {total:.0f}, of them before {sys.argv[2]}: {100 * sum(value(r, samples) for r in prologue) / total:.1f}%")
print(f"warp instructions {executed:.0f}, of them before {sys.argv[2]}: "
      f"{100 * sum(value(r, 'Instructions Executed') for r in prologue) / executed:.1f}%")
for reason in sorted((h for h in header if h.startswith("stall_") and "Not Issued" not in h),
                     key=lambda h: -sum(value(r, h) for r in data)):
    whole = sum(value(r, reason) for r in data)
    if whole == 0:
        continue
    print(f"{reason:24s} {100 * whole / total:5.1f}% of the samples, "
          f"{100 * sum(value(r, reason) for r in prologue) / total:5.1f}% before {sys.argv[2]}")

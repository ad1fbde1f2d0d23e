"""Instructions on one path through a kernel's SASS (`bench/kernel_isa.py --path/--stop`):
how bench/NOTES-sampler.md (runs 44-48) counts the tile kernel's hot path by row kind."""

from __future__ import annotations

import re

LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")  # a SASS line: (address, instruction)
BRANCH = re.compile(r"BRA (?:!?U?P\w+, )?0x([0-9a-f]+)")


def path_length(sass: str, taken: set[int], stop: int) -> int:
    """Instructions executed from the entry to the one at address `stop` (counted), taking
    the branches at the addresses in `taken` and every unconditional one, falling through
    the other conditional ones (the addresses come from cuobjdump's SASS)."""
    lines = [(int(m.group(1), 16), m.group(2).strip()) for m in LINE.finditer(sass)]
    index = {addr: i for i, (addr, _) in enumerate(lines)}
    i = count = 0
    while True:
        addr, text = lines[i]
        count += 1
        if addr == stop:
            return count
        if count > len(lines) * 4:
            raise ValueError("no path to the stop address (a loop?)")
        jump = BRANCH.search(text)
        if jump and (not text.startswith("@") or addr in taken):
            i = index[int(jump.group(1), 16)]
        else:
            i += 1

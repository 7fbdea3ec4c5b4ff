"""The glibc and libstdc++ symbol versions each ELF file of a bundle needs (``readelf -V``).

    python3 packaging/elfcheck.py dist/kvpilot     # one line per file, then the floor verdict

A shared library or program built against glibc 2.35 asks the loader for ``GLIBC_2.35`` symbol
versions in its ``.gnu.version_r`` (version needs) section, and one linked with GCC 12's
libstdc++ for ``GLIBCXX_3.4.30``. The highest of each across the bundle is the oldest system it
can start on. Only the needs section counts: a bundled libstdc++ *defines* its own GLIBCXX
versions, which says nothing about what it asks of the system.

Exit status: 0 every file within the floor (packaging/oldbase.py's GLIBC_FLOOR/GLIBCXX_FLOOR),
1 some file above it, 2 no readelf.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

GLIBC_FLOOR = (2, 31)
GLIBCXX_FLOOR = (3, 4, 28)
_NEED = re.compile(r"Name:\s+(GLIBC|GLIBCXX)_(\d+(?:\.\d+)+)\b")
_BATCH = 100


@dataclass(frozen=True)
class ElfNeeds:
    """The highest ``GLIBC_`` and ``GLIBCXX_`` versions one file needs (None: none)."""

    path: Path
    glibc: tuple[int, ...] | None
    glibcxx: tuple[int, ...] | None

    def above_floor(self) -> list[str]:
        """What exceeds the floor, e.g. ``["GLIBC_2.35 > 2.31"]`` (empty: within it)."""
        out = []
        if self.glibc is not None and self.glibc > GLIBC_FLOOR:
            out.append(f"GLIBC_{_text(self.glibc)} > {_text(GLIBC_FLOOR)}")
        if self.glibcxx is not None and self.glibcxx > GLIBCXX_FLOOR:
            out.append(f"GLIBCXX_{_text(self.glibcxx)} > {_text(GLIBCXX_FLOOR)}")
        return out


def _text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def is_elf(path: Path) -> bool:
    """True for a regular (non-link) file that starts with the ELF magic."""
    if path.is_symlink() or not path.is_file():
        return False
    with open(path, "rb") as fh:
        return fh.read(4) == b"\x7fELF"


def elf_files(folder: Path) -> list[Path]:
    """Every ELF file under ``folder``, sorted."""
    return [p for p in sorted(folder.rglob("*")) if is_elf(p)]


def parse_version_needs(readelf_output: str) -> dict[str, dict[str, tuple[int, ...]]]:
    """``readelf -V --wide`` output of one or more files -> per file, the highest version of
    each of ``GLIBC``/``GLIBCXX`` in its version-needs section."""
    result: dict[str, dict[str, tuple[int, ...]]] = {}
    current: str | None = None
    in_needs = False
    for line in readelf_output.splitlines():
        if line.startswith("File: "):
            current = line[len("File: ") :].strip()
            result.setdefault(current, {})
            in_needs = False
            continue
        if "section '" in line:
            in_needs = "Version needs section" in line
            continue
        if current is None or not in_needs:
            continue
        for family, version in _NEED.findall(line):
            parsed = tuple(int(x) for x in version.split("."))
            if parsed > result[current].get(family, ()):
                result[current][family] = parsed
    return result


def version_needs(files: Iterable[Path], readelf: str | None = None) -> list[ElfNeeds]:
    """The needs of each file (``readelf -V --wide``, files in batches).

    Raises:
        FileNotFoundError: no ``readelf`` (binutils) on this machine.
    """
    tool = readelf or shutil.which("readelf")
    if tool is None:
        raise FileNotFoundError("readelf is missing (Debian/Ubuntu: apt install binutils)")
    paths = list(files)
    out: list[ElfNeeds] = []
    for i in range(0, len(paths), _BATCH):
        batch = paths[i : i + _BATCH]
        proc = subprocess.run(
            [tool, "-V", "--wide", *map(str, batch)],
            capture_output=True, text=True, check=False, errors="replace",
        )  # fmt: skip
        parsed = parse_version_needs(proc.stdout)
        if len(batch) == 1 and not parsed:  # one file: readelf prints no "File:" header
            parsed = parse_version_needs(f"File: {batch[0]}\n{proc.stdout}")
        for path in batch:
            needs = parsed.get(str(path), {})
            out.append(ElfNeeds(path, needs.get("GLIBC"), needs.get("GLIBCXX")))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; returns the exit status."""
    parser = argparse.ArgumentParser(description="Symbol versions the ELF files need.")
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    try:
        needs = version_needs(elf_files(args.folder))
    except FileNotFoundError as exc:
        print(f"elfcheck: {exc}", file=sys.stderr)
        return 2
    bad = 0
    for item in needs:
        over = item.above_floor()
        bad += bool(over)
        glibc = _text(item.glibc) if item.glibc else "-"
        glibcxx = _text(item.glibcxx) if item.glibcxx else "-"
        flag = ("  ABOVE THE FLOOR: " + ", ".join(over)) if over else ""
        print(f"GLIBC {glibc:6s} GLIBCXX {glibcxx:8s} {item.path.relative_to(args.folder)}{flag}")
    top = max((i.glibc for i in needs if i.glibc), default=None)
    topxx = max((i.glibcxx for i in needs if i.glibcxx), default=None)
    print(
        f"elfcheck: {len(needs)} ELF files; highest GLIBC_{_text(top) if top else '-'}, "
        f"GLIBCXX_{_text(topxx) if topxx else '-'}; floor GLIBC_{_text(GLIBC_FLOOR)}, "
        f"GLIBCXX_{_text(GLIBCXX_FLOOR)}: {bad} file(s) above"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

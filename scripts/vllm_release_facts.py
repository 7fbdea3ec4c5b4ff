#!/usr/bin/env python3
"""What changed between two vLLM wheels among the facts kvpilot keeps.

    python scripts/vllm_release_facts.py OLD.whl NEW.whl [--json] [--no-diff]

Both wheels are read as zip files and their ``vllm/*.py`` modules parsed with :mod:`ast`;
nothing is installed or imported from them. Printed, section by section:

* the wheels' Requires-Python and torch pin (``*.dist-info/METADATA``);
* ``vllm serve`` flags (``--...`` literals of ``engine/arg_utils.py`` and the entry points'
  ``cli_args.py``) added and removed, and the ``EngineArgs`` defaults that changed (a default
  naming a config field, ``CacheConfig.block_size``, is resolved to that field's default);
* the defaults of ``CacheConfig``, ``SchedulerConfig`` and ``CompilationConfig`` (fields and
  class constants) that changed, and the deprecation messages that came or went;
* each log line kvpilot's scanner reads (``CAPACITY_FORMATS`` and ``FAILURE_FORMATS``), judged
  by the scanner's own regular expressions against every message template of each wheel:
  found, changed (another template matches), new or gone;
* the ``vllm:*`` metric names kvpilot reads, found or gone, and all names added or removed;
* whether the functions on the start-up memory path changed, with a unified diff.

Run it with the project's environment (it reads kvpilot's scanner tables); see
``docs/vllm-releases.md`` for how a new release is taken in with it.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import sys
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the flag sources: vllm serve's engine arguments and the API server's own
FLAG_FILES = ("engine/arg_utils.py",)
FLAG_DIRS = ("entrypoints/",)
#: config classes whose defaults kvpilot's memory rules depend on: (file, class)
CONFIG_CLASSES = (
    ("config/cache.py", "CacheConfig"),
    ("config/scheduler.py", "SchedulerConfig"),
    ("config/compilation.py", "CompilationConfig"),
)
ENGINE_ARGS = ("engine/arg_utils.py", "EngineArgs")
DEPRECATION_FILES = ("engine/arg_utils.py", "config/")
#: the start-up memory path: (file, qualified name); a function found elsewhere in the other
#: wheel is reported as moved
MEMORY_PATH = (
    ("config/cache.py", "CacheConfig.resolved_gpu_memory_utilization"),
    ("config/vllm.py", "VllmConfig._resolve_extensible_kv_cache"),
    ("v1/worker/utils.py", "request_memory"),
    ("v1/worker/gpu_worker.py", "Worker.determine_available_memory"),
    ("v1/worker/gpu_worker.py", "Worker.initialize_from_config"),
    ("v1/worker/gpu_worker.py", "Worker._compile_or_warm_up_model"),
    ("v1/worker/gpu/model_runner.py", "GPUModelRunner.profile_run"),
    ("v1/worker/gpu/model_runner.py", "GPUModelRunner.profile_cudagraph_memory"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner.profile_run"),
    ("v1/core/kv_cache_utils.py", "get_kv_cache_configs"),
    ("v1/core/kv_cache_utils.py", "update_kv_cache_capacity"),
    ("v1/core/kv_cache_planning.py", "_auto_fit_max_model_len"),
    ("v1/core/kv_cache_planning.py", "finalize_extensible_kv_cache"),
    ("v1/worker/extensible_kv_cache.py", "measure_kv_cache_bytes"),
    ("v1/worker/extensible_kv_cache.py", "measure_kv_cache_blocks"),
    ("engine/arg_utils.py", "EngineArgs.get_batch_defaults"),
)

_PERCENT = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[sdfirxg]")
_METADATA_LINE = re.compile(r"^(Version|Requires-Python|Requires-Dist): (.*)$", re.M)
#: placeholder fillers tried on a template, so that a scanner regex expecting a number, a
#: decimal, a size or a word can match
_FILLERS = ("123", "1.5", "0.92", "GPU")


class FactsError(Exception):
    """A wheel that cannot be read (the message names it and says why)."""


# ------------------------------------------------------------------------------ one wheel
class Wheel:
    """One vLLM wheel, read lazily: ``vllm/*.py`` sources, their syntax trees, METADATA."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.zip = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise FactsError(f"{path}: not a readable wheel ({exc})") from exc
        names = self.zip.namelist()
        self.py = sorted(n[len("vllm/"):] for n in names
                         if n.startswith("vllm/") and n.endswith(".py"))
        if not self.py:
            raise FactsError(f"{path}: no vllm/*.py modules inside; is it a vLLM wheel?")
        meta = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
        self.metadata = self.zip.read(meta).decode("utf-8", "replace") if meta else ""
        self._text: dict[str, str | None] = {}
        self._tree: dict[str, ast.Module | None] = {}
        self._templates: list[tuple[str, str]] | None = None

    @property
    def version(self) -> str:
        m = re.search(r"^Version: (\S+)", self.metadata, re.M)
        if m:
            return m.group(1)
        m = re.match(r"vllm(?:_cpu)?-([^-]+)-", self.path.name)
        return m.group(1) if m else self.path.name

    def meta_facts(self) -> dict[str, str]:
        facts: dict[str, str] = {}
        for key, value in _METADATA_LINE.findall(self.metadata):
            if key == "Requires-Dist":
                name = re.split(r"[\s=<>!~;\[]", value, maxsplit=1)[0].lower()
                if name in ("torch", "flashinfer-python", "xformers"):
                    facts[f"requires {name}"] = value.split(";")[0].strip()
            else:
                facts[key] = value.strip()
        return facts

    def text(self, rel: str) -> str | None:
        if rel not in self._text:
            try:
                self._text[rel] = self.zip.read("vllm/" + rel).decode("utf-8", "replace")
            except KeyError:
                self._text[rel] = None
        return self._text[rel]

    def tree(self, rel: str) -> ast.Module | None:
        if rel not in self._tree:
            src = self.text(rel)
            try:
                self._tree[rel] = ast.parse(src) if src is not None else None
            except SyntaxError:
                self._tree[rel] = None
        return self._tree[rel]

    def templates(self) -> list[tuple[str, str]]:
        """Every message template of the wheel: (module, text with placeholders as
        ``\\x00``), from string constants and f-strings."""
        if self._templates is None:
            found: list[tuple[str, str]] = []
            for rel in self.py:
                src = self.text(rel) or ""
                if "logger" not in src and "raise" not in src and "warn" not in src:
                    continue
                tree = self.tree(rel)
                if tree is not None:
                    found.extend((rel, t) for t in _strings(tree))
                self._tree.pop(rel, None)  # keep memory low: 3,000+ modules
                self._text.pop(rel, None)
            self._templates = found
        return self._templates


def _strings(tree: ast.AST) -> Iterator[str]:
    """String constants and f-strings (placeholders as NUL) of ``tree``, longer than 12."""
    inner: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inner.update(id(v) for v in node.values)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str)
                           else "\x00" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in inner:
            text = _PERCENT.sub("\x00", node.value)
        else:
            continue
        if len(text) > 12:
            yield text


def _class(tree: ast.Module | None, name: str) -> ast.ClassDef | None:
    if tree is None:
        return None
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _field_default(value: ast.expr | None) -> str | None:
    """The default of a dataclass field as source text (``Field(default=X)`` -> X)."""
    if value is None:
        return None
    if isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute)):
        fname = value.func.id if isinstance(value.func, ast.Name) else value.func.attr
        if fname in ("Field", "field"):
            for kw in value.keywords:
                if kw.arg == "default":
                    return ast.unparse(kw.value)
                if kw.arg == "default_factory":
                    return "factory " + ast.unparse(kw.value)
            return "(required)"
    return ast.unparse(value)


def class_defaults(wheel: Wheel, rel: str, name: str) -> dict[str, str]:
    """``{field: default}`` of a config / args class, class constants included (a field
    without a default is left out)."""
    cls = _class(wheel.tree(rel), name)
    out: dict[str, str] = {}
    if cls is None:
        return out
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            default = _field_default(node.value)
            if default is not None:
                out[node.target.id] = default
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper():
            out[node.targets[0].id] = ast.unparse(node.value)
    return out


def _config_file(wheel: Wheel, class_name: str) -> str | None:
    """The config/*.py module defining ``class_name`` (``CacheConfig`` -> config/cache.py)."""
    for rel in wheel.py:
        if rel.startswith("config/") and f"class {class_name}" in (wheel.text(rel) or ""):
            return rel
    return None


def engine_defaults(wheel: Wheel) -> dict[str, str]:
    """``EngineArgs`` defaults, a ``XConfig.field`` or ``get_field(XConfig, "f")`` default
    resolved to the config field's own default (``CacheConfig.block_size -> None``)."""
    raw = class_defaults(wheel, *ENGINE_ARGS)
    configs: dict[str, dict[str, str]] = {}
    out: dict[str, str] = {}
    for name, default in raw.items():
        m = re.fullmatch(r"(\w+Config)\.(\w+)|get_field\((\w+Config), '(\w+)'\)", default)
        if m:
            cls, attr = (m[1], m[2]) if m[1] else (m[3], m[4])
            if cls not in configs:
                rel = _config_file(wheel, cls)
                configs[cls] = class_defaults(wheel, rel, cls) if rel else {}
            if attr in configs[cls]:
                default = f"{configs[cls][attr]}  (from {cls}.{attr})"
        out[name] = default
    return out


def flags(wheel: Wheel) -> set[str]:
    """``--flag`` literals of the engine arguments and the entry points' CLI modules."""
    files = [r for r in wheel.py if r in FLAG_FILES
             or (r.startswith(FLAG_DIRS) and r.endswith("cli_args.py"))]
    out: set[str] = set()
    for rel in files:
        out.update(re.findall(r"[\"'](--[a-z0-9][a-z0-9-]+)[\"']", wheel.text(rel) or ""))
    return out


def deprecations(wheel: Wheel) -> set[str]:
    """Messages that say something is deprecated, in the engine arguments and configs."""
    out: set[str] = set()
    for rel in wheel.py:
        if rel.startswith(DEPRECATION_FILES) or rel in DEPRECATION_FILES:
            tree = wheel.tree(rel)
            if tree is None:
                continue
            for text in _strings(tree):
                if "deprecat" in text.lower():
                    out.add(" ".join(text.replace("\x00", "<x>").split()))
    return out


def metric_names(wheel: Wheel) -> set[str]:
    """Every ``vllm:*`` metric name literal in the wheel's metrics modules."""
    out: set[str] = set()
    for rel in wheel.py:
        if "metrics" in rel:
            out.update(re.findall(r"[\"'](vllm:[a-z0-9_:]+)[\"']", wheel.text(rel) or ""))
    return out


def function_source(wheel: Wheel, rel: str, qualname: str) -> str | None:
    """The source of ``qualname`` (``Class.method`` or ``function``) in module ``rel``."""
    tree = wheel.tree(rel)
    src = wheel.text(rel)
    if tree is None or src is None:
        return None
    parts = qualname.split(".")
    scope: list[ast.stmt] = tree.body
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None = None
    for part in parts:
        node = next((n for n in scope if isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            return None
        scope = node.body
    return ast.get_source_segment(src, node) if node is not None else None


def find_function(wheel: Wheel, rel: str, qualname: str) -> tuple[str, str] | None:
    """(module, source) of ``qualname``: in ``rel``, else the first module defining it."""
    src = function_source(wheel, rel, qualname)
    if src is not None:
        return rel, src
    last = qualname.split(".")[-1]
    for other in wheel.py:
        if other != rel and f"def {last}(" in (wheel.text(other) or ""):
            src = function_source(wheel, other, qualname)
            if src is not None:
                return other, src
    return None


# ------------------------------------------------------------------------------ the scanner's rows
@dataclass(frozen=True)
class ScannerRow:
    """One wording kvpilot's scanner reads: its name, releases and regular expression."""

    what: str
    releases: str
    pattern: re.Pattern[str]


def scanner_rows() -> list[ScannerRow]:
    """The scanner's own tables (capacity and failure wordings)."""
    from kvpilot.core.vllm.logfailures import FAILURE_FORMATS
    from kvpilot.core.vllm.logformats import CAPACITY_FORMATS

    return [ScannerRow(r.what, r.releases, r.pattern)
            for r in (*CAPACITY_FORMATS, *FAILURE_FORMATS)]


def kvpilot_metric_names() -> set[str]:
    """The ``vllm:*`` names kvpilot's metrics reader looks for (``_total`` / histogram
    suffixes dropped: vLLM declares the base name)."""
    from kvpilot.core.vllm import metrics

    names: set[str] = set()
    for table in ("_GAUGES", "_COUNTERS", "_HISTOGRAMS"):
        names.update(getattr(metrics, table, {}))
    for single in ("_KV_NEW", "_KV_OLD", "_SUCCESS", "_CACHE_INFO"):
        value = getattr(metrics, single, None)
        if isinstance(value, str):
            names.add(value)
    return {re.sub(r"_total$", "", n) for n in names}


def _fills(template: str) -> Iterator[str]:
    if "\x00" not in template:
        yield template
        return
    for filler in _FILLERS:
        yield template.replace("\x00", filler)


def matching_templates(row: ScannerRow, templates: Iterable[tuple[str, str]]
                       ) -> list[tuple[str, str]]:
    """The templates (module, text) some filling of which the row's regex matches."""
    out = []
    for rel, template in templates:
        if any(row.pattern.search(text) for text in _fills(template)):
            out.append((rel, template))
    return out


# ------------------------------------------------------------------------------ the comparison
@dataclass
class Report:
    """Every section of the comparison, ready to print or dump as JSON."""

    old: str
    new: str
    metadata: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    flags_added: list[str] = field(default_factory=list)
    flags_removed: list[str] = field(default_factory=list)
    engine_defaults: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    config_defaults: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    deprecations_added: list[str] = field(default_factory=list)
    deprecations_removed: list[str] = field(default_factory=list)
    log_lines: list[dict[str, Any]] = field(default_factory=list)
    metrics_read: dict[str, str] = field(default_factory=dict)
    metrics_added: list[str] = field(default_factory=list)
    metrics_removed: list[str] = field(default_factory=list)
    memory_path: list[dict[str, Any]] = field(default_factory=list)


def _changed(old: dict[str, str], new: dict[str, str], prefix: str = ""
             ) -> dict[str, tuple[str | None, str | None]]:
    return {prefix + k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new))
            if old.get(k) != new.get(k)}


def compare(old: Wheel, new: Wheel) -> Report:
    """Compare ``old`` and ``new`` on every fact kvpilot keeps."""
    rep = Report(old.version, new.version)
    rep.metadata = _changed(old.meta_facts(), new.meta_facts())
    rep.metadata.pop("Version", None)
    f_old, f_new = flags(old), flags(new)
    rep.flags_added, rep.flags_removed = sorted(f_new - f_old), sorted(f_old - f_new)
    rep.engine_defaults = _changed(engine_defaults(old), engine_defaults(new))
    for rel, cls in CONFIG_CLASSES:
        rep.config_defaults.update(_changed(class_defaults(old, rel, cls),
                                            class_defaults(new, rel, cls), prefix=cls + "."))
    d_old, d_new = deprecations(old), deprecations(new)
    rep.deprecations_added, rep.deprecations_removed = sorted(d_new - d_old), sorted(d_old - d_new)

    t_old, t_new = old.templates(), new.templates()
    for row in scanner_rows():
        in_old = matching_templates(row, t_old)
        in_new = matching_templates(row, t_new)
        texts_old = {t for _, t in in_old}
        texts_new = {t for _, t in in_new}
        if in_old and in_new:
            status = "found" if texts_old & texts_new else "changed"
        elif in_new:
            status = "new"
        elif in_old:
            status = "gone"
        else:
            status = "absent"  # a wording of older releases, or built at run time
        rep.log_lines.append({
            "what": row.what, "releases": row.releases, "status": status,
            "old": sorted({f"{r}: {_show(t)}" for r, t in in_old})[:3],
            "new": sorted({f"{r}: {_show(t)}" for r, t in in_new})[:3],
        })

    m_old, m_new = metric_names(old), metric_names(new)
    for name in sorted(kvpilot_metric_names()):
        rep.metrics_read[name] = ("found" if name in m_new else
                                  "gone" if name in m_old else "absent from both")
    rep.metrics_added, rep.metrics_removed = sorted(m_new - m_old), sorted(m_old - m_new)

    seen: set[tuple[str, str]] = set()
    for rel, qual in MEMORY_PATH:
        a, b = find_function(old, rel, qual), find_function(new, rel, qual)
        key = (a[0] if a else rel, qual), (b[0] if b else rel, qual)
        if key[0] in seen and key[1] in seen:
            continue
        seen.update(key)
        entry: dict[str, Any] = {"function": qual, "old": a[0] if a else None,
                                 "new": b[0] if b else None}
        if a is None and b is None:
            entry["status"] = "absent from both"
        elif a is None:
            entry["status"] = "new"
        elif b is None:
            entry["status"] = "gone"
        elif a[1] == b[1]:
            entry["status"] = "unchanged" + (" (moved)" if a[0] != b[0] else "")
        else:
            entry["status"] = "changed" + (" (moved)" if a[0] != b[0] else "")
            entry["diff"] = "".join(difflib.unified_diff(
                a[1].splitlines(keepends=True), b[1].splitlines(keepends=True),
                fromfile=f"{old.version}/vllm/{a[0]}", tofile=f"{new.version}/vllm/{b[0]}"))
        if a is None and b is not None:
            entry["diff"] = "".join(difflib.unified_diff(
                [], b[1].splitlines(keepends=True), fromfile="/dev/null",
                tofile=f"{new.version}/vllm/{b[0]}"))
        rep.memory_path.append(entry)
    return rep


def _show(template: str, width: int = 150) -> str:
    text = " ".join(template.replace("\x00", "<x>").split())
    return text if len(text) <= width else text[: width - 3] + "..."


# ------------------------------------------------------------------------------ output
def render(rep: Report, *, diffs: bool = True) -> str:
    """The report as text: one section per kind of fact, changes marked + - ~."""
    out = [f"vLLM {rep.old} -> {rep.new}", ""]

    def pairs(title: str, items: dict[str, tuple[str | None, str | None]]) -> None:
        out.append(f"== {title} ({len(items)} changed)")
        for key, (a, b) in items.items():
            if a is None:
                out.append(f"  + {key} = {b}")
            elif b is None:
                out.append(f"  - {key} (was {a})")
            else:
                out.append(f"  ~ {key}: {a} -> {b}")
        out.append("")

    pairs("wheel metadata", rep.metadata)
    out.append(f"== vllm serve flags (+{len(rep.flags_added)} -{len(rep.flags_removed)})")
    out += [f"  + {f}" for f in rep.flags_added] + [f"  - {f}" for f in rep.flags_removed]
    out.append("")
    pairs("EngineArgs defaults", rep.engine_defaults)
    pairs("cache / scheduler / compilation config defaults", rep.config_defaults)
    out.append(f"== deprecation messages (+{len(rep.deprecations_added)} "
               f"-{len(rep.deprecations_removed)})")
    out += [f"  + {_show(d, 200)}" for d in rep.deprecations_added]
    out += [f"  - {_show(d, 200)}" for d in rep.deprecations_removed]
    out.append("")
    counts: dict[str, int] = {}
    for line in rep.log_lines:
        counts[line["status"]] = counts.get(line["status"], 0) + 1
    out.append("== log lines kvpilot's scanner reads ("
               + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")")
    for line in rep.log_lines:
        if line["status"] == "found":
            continue
        out.append(f"  {line['status']:8} {line['what']} [{line['releases']}]")
        for text in line["old"] if line["status"] in ("changed", "gone") else []:
            out.append(f"           old {text}")
        for text in line["new"] if line["status"] in ("changed", "new") else []:
            out.append(f"           new {text}")
    out.append("  (found: the same template matches in both; changed: only other templates "
               "match in the new wheel; absent: no template of either wheel matches)")
    out.append("")
    out.append("== metrics kvpilot reads")
    out += [f"  {status:8} {name}" for name, status in rep.metrics_read.items()]
    out += [f"  + {n}" for n in rep.metrics_added] + [f"  - {n}" for n in rep.metrics_removed]
    out.append("")
    out.append("== start-up memory path")
    for entry in rep.memory_path:
        where = entry["new"] or entry["old"]
        moved = f" ({entry['old']} -> {entry['new']})" if "moved" in entry["status"] else ""
        out.append(f"  {entry['status']:10} {where}: {entry['function']}{moved}")
    if diffs:
        for entry in rep.memory_path:
            if entry.get("diff"):
                out += ["", entry["diff"].rstrip("\n")]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="What changed between two vLLM wheels among the facts kvpilot keeps.")
    parser.add_argument("old", type=Path, help="the older vllm-*.whl")
    parser.add_argument("new", type=Path, help="the newer vllm-*.whl")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-diff", action="store_true", help="leave out the function diffs")
    args = parser.parse_args(argv)
    try:
        rep = compare(Wheel(args.old), Wheel(args.new))
    except FactsError as exc:
        print(f"vllm_release_facts: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rep.__dict__, indent=1))
    else:
        print(render(rep, diffs=not args.no_diff))
    return 0


if __name__ == "__main__":
    sys.exit(main())

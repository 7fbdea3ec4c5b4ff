"""Unit tests live where the module they test lives.

``tests/unit/<package>/test_<module>.py`` tests ``core/<package>/<module>.py``; a second file for
one module adds an aspect after the module's name (``test_logparse_formats.py``). Tests of the
benchmark scripts mirror ``benchmarks/`` under ``tests/unit/benchmarks/``; ``quality/`` (whole-tree
checks like this one) and ``fuzz/`` (every parser at once) test no single module. The GUI's tests
mirror ``gui/`` the same way under ``tests/gui/`` (``tests/gui/panels/test_planner_panel.py``).

A module with no test file of its own must say here where it is exercised instead; the table is
checked both ways, so it cannot go stale.
"""

from __future__ import annotations

from pathlib import Path

from testpaths import REPO

from kvpilot.core.cli import SUBCOMMANDS

UNIT = REPO / "tests" / "unit"
GUI_TESTS = REPO / "tests" / "gui"
WHOLE_TREE = {"quality", "fuzz"}

#: module (relative to core/) -> (the test file that exercises it, why it has none of its own)
COVERED_ELSEWHERE: dict[str, tuple[str, str]] = {
    "cli.py": ("tests/unit/commands/test_plan.py", "the dispatcher of every command"),
    "hardware/target.py": ("tests/unit/hardware/test_selection_multi_gpu.py",
                           "the one device target, built from probes, snapshots and specs"),
    "vllm/states.py": ("tests/unit/vllm/test_supervisor.py",
                       "the supervisor's events, reported by the supervisor"),
    "hub/download_errors.py": ("tests/unit/hub/test_download.py",
                               "the download's errors, raised and checked by the downloader"),
    "commands/bench.py": ("tests/unit/vllm/test_client.py", "the CLI face of the load generator"),
    "commands/recommend.py": ("tests/unit/commands/test_plan.py", "the recommender's CLI"),
    "commands/watch.py": ("tests/unit/app/test_watch.py", "the CLI face of the watcher"),
    "commands/desktop.py": ("tests/unit/app/test_desktop.py", "the CLI face of the desktop entry"),
    "commands/gui.py": ("tests/gui/test_app_cli.py", "needs Qt; tested with the GUI"),
    "base/errors.py": ("tests/unit/quality/test_import_cycles.py",
                       "the error tree is checked whole"),
    "base/failures.py": ("tests/unit/vllm/test_logparse.py",
                         "failure kinds come from the log scanner"),
    "fit/support.py": ("tests/unit/fit/test_recommend_fallback.py",
                       "support checks decide what the recommender offers"),
    "hardware/problems.py": ("tests/unit/hardware/test_nvml.py", "NVML's typed problems"),
    "models/bytemodel.py": ("tests/unit/models/test_catalog.py",
                            "checkpoint sizes of the catalog come from it"),
    "base/model_spec.py": ("tests/unit/models/test_local.py",
                           "the spec type config.json is read into"),
    "models/bytemodel_hybrid.py": ("tests/unit/models/test_local_2026.py",
                                   "parameter totals of the 2026 fixtures come from it"),
    "models/linear_config.py": ("tests/unit/models/test_local_2026.py",
                                "the state read from each hybrid fixture's config.json"),
    "models/params.py": ("tests/unit/models/test_local_2026.py", "the split the byte model prices"),
    "vllm/logevents.py": ("tests/unit/vllm/test_logparse.py", "the events the scanner emits"),
    "vllm/logfailures.py": ("tests/unit/vllm/test_logparse_formats.py",
                            "every failure row is fed its recorded lines through the scanner"),
    "vllm/logformats.py": ("tests/unit/vllm/test_logparse_formats.py",
                           "every capacity row is fed its recorded lines through the scanner"),
    "hub/search_fetch.py": ("tests/unit/app/test_search.py",
                            "fetching is one half of a search, tested through it"),
    "hub/model_tree.py": ("tests/unit/app/test_search.py",
                          "the quantized variants of every search hit"),
    "commands/search.py": ("tests/unit/app/test_search_cli.py", "the CLI face of the search"),
    "commands/catalog.py": ("tests/unit/models/test_catalog_list.py",
                            "the CLI face of the catalog listing"),
    "vllm/architectures.py": ("tests/e2e/test_architectures_e2e.py",
                              "the registry is asked of the real vLLM runtime"),
    "vllm/measure.py": ("tests/e2e/test_server_crashes.py", "a dry run needs the real engine"),
    "app/profile_launch.py": ("tests/unit/commands/test_serve_profile.py",
                          "the profile's launch, through serve --profile and the window's spec"),
    "commands/autostart.py": ("tests/unit/app/test_autostart.py", "the CLI face of autostart"),
    "commands/runs.py": ("tests/unit/runs/test_store.py", "the CLI face of the run records"),
    "runs/record.py": ("tests/unit/runs/test_store.py", "records are read and written by it"),
    "front/proxy.py": ("tests/unit/front/test_pool_fake.py",
                       "the front's routes, driven over HTTP in front of the stand-in vLLM"),
    "front/server.py": ("tests/unit/front/test_pool_fake.py",
                        "the front's uvicorn server, started and stopped by every pool test"),
    "front/members.py": ("tests/unit/front/test_pool_fake.py",
                         "a profile as the pool needs it (app/front.py fills it in), launched"),
}


def _module_for(test: Path) -> Path | None:
    """The module a unit or GUI test file mirrors, or None when no such module exists."""
    if test.is_relative_to(GUI_TESTS):
        root = REPO / "gui" / test.parent.relative_to(GUI_TESTS)
    else:
        rel = test.relative_to(UNIT)
        root = REPO / "benchmarks" if rel.parts[0] == "benchmarks" else REPO / "core" / rel.parent
    name = test.stem.removeprefix("test_")
    cuts = [len(name)] + [i for i, c in enumerate(name) if c == "_"]
    for cut in sorted(cuts, reverse=True):
        candidate = root / f"{name[:cut]}.py"
        if cut and candidate.exists():
            return candidate
    return None


def _unit_tests() -> list[Path]:
    return sorted(
        p for p in UNIT.rglob("test_*.py")
        if p.relative_to(UNIT).parts[0] not in WHOLE_TREE
    )


def test_every_unit_test_file_names_the_module_it_mirrors() -> None:
    stray = [str(t.relative_to(REPO)) for t in _unit_tests() if _module_for(t) is None]
    assert not stray, (
        "these test files do not sit where their module does (tests/unit/<package>/"
        f"test_<module>[_<aspect>].py): {stray}"
    )


def test_every_gui_test_file_names_the_module_it_mirrors() -> None:
    stray = [
        str(t.relative_to(REPO)) for t in sorted(GUI_TESTS.rglob("test_*.py"))
        if _module_for(t) is None
    ]
    assert not stray, (
        "these GUI test files do not sit where their module does (tests/gui/<package>/"
        f"test_<module>[_<aspect>].py): {stray}"
    )


def test_every_core_module_has_its_test_file_or_says_where_it_is_tested() -> None:
    core = REPO / "core"
    mirrored = {_module_for(t) for t in _unit_tests()}
    modules = sorted(
        p for p in core.rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    )
    untested = [
        str(m.relative_to(core)) for m in modules
        if m not in mirrored and str(m.relative_to(core)) not in COVERED_ELSEWHERE
    ]
    assert not untested, (
        f"core modules with no test file and no entry in COVERED_ELSEWHERE: {untested}"
    )


def test_the_covered_elsewhere_table_is_true() -> None:
    core = REPO / "core"
    mirrored = {_module_for(t) for t in _unit_tests()}
    for module, (test_file, _why) in COVERED_ELSEWHERE.items():
        path = core / module
        assert path.exists(), f"{module} is gone; drop it from COVERED_ELSEWHERE"
        assert path not in mirrored, f"{module} has its own test file now; drop its entry"
        dotted = "kvpilot.core." + module.removesuffix(".py").replace("/", ".")
        package, _, leaf = dotted.rpartition(".")
        text = (REPO / test_file).read_text(encoding="utf-8")
        imported = dotted in text or f"from {package} import {leaf}" in text
        # a command module is reached through the CLI under its subcommand's name
        commands = [name for name, (mod, _) in SUBCOMMANDS.items() if mod == dotted]
        through_cli = "kvpilot.core.cli" in text and (
            module == "cli.py" or any(f'"{name}"' in text for name in commands)
        )
        assert imported or through_cli, (
            f"{test_file} neither imports {dotted} nor runs it, so it cannot be where {module} "
            "is tested"
        )

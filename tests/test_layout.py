"""The package's tree shows its architecture, and its imports run one way.

Each subpackage is a runtime role (`server`, `worker`, `connection`, `devserver`,
`cli`) beside the shared modules at the top and the `workflows` and `activities`
folders. No module imports, even lazily, a module that imports it back. The
connection layer knows neither MCP nor the legs, the tool-leg activity imports no role
but `worker/`, whose machinery it orchestrates, the dev-server launcher is the bottom
role (the others reach it through its public names) and the CLI the top one, and the
shared top-level modules import no role. Some concerns have one home:
- only the extension and the plugin run the start-up check of FastMCP's internals;
- the read path, what a server knows of the tasks it reads (`READ_PATH`: the reads it answers,
  the watches and their roads, the change feed, the closed-answer cache), is the server's alone,
  in modules of at most 300 lines;
- the `tasks/*` handlers (`server/_handlers.py`) are the extension's alone;
- a task's memo is written at creation from its facts (`server/_facts.py`) alone;
- a call's tool policy and component are looked up by its plan (`server/_plan.py`) alone, once.
- the groups of task statuses (ended, running, waiting on the caller) are named in `server/_status.py` alone;
- the 2025-11-25 tasks (`server/_tasks_2025_11_25.py`, `server/_asks_2025_11_25.py`) stand separate from
  the push of statuses (`server/_push.py`): what both need is in `server/_task_reads.py` and
  `server/_wire.py`.
The tests keep their own rooms separate too: what test modules share is in `tests/helpers/`,
never in another test module, and `tests/` and `bench/` never put each other on `sys.path`.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import fastmcp_temporal

ROOT = Path(fastmcp_temporal.__file__).parent
REPO = ROOT.parent
TESTS, BENCH = REPO / "tests", REPO / "bench"
READ_PATH = {f"fastmcp_temporal.server.{name}" for name in (
    "_known", "_held_reads", "_holds", "_quiet", "_closed_answers", "_changes",
    "_watches", "_watch", "_described", "_long_poll_road", "_feed_road", "_feed_gaps", "_feed")}
FOLDERS = {"fastmcp_temporal": ROOT, "fastmcp_temporal.workflows": REPO / "workflows",
           "fastmcp_temporal.activities": REPO / "activities"}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[0] in ("workflows", "activities") and package == "fastmcp_temporal":
                continue
            found[".".join((package, *parts)).removesuffix(".__init__")] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module of ours `path` imports, at its top or inside a function (not for type checking)."""
    tree = ast.parse(path.read_text())
    type_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                 and "TYPE_CHECKING" in ast.unparse(block.test) for node in ast.walk(block)}
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fastmcp_temporal"):
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                targets.add(name if name in modules else node.module)
        elif isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names if alias.name in modules)
    return {target for target in targets if target in modules and target != "fastmcp_temporal"}


def test_no_module_imports_one_that_imports_it_back() -> None:
    modules = _modules()
    graph = {name: _imports(path, modules) for name, path in modules.items() if name != "fastmcp_temporal"}
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError as cycle:
        raise AssertionError(f"import circle: {' -> '.join(cycle.args[1])}") from None


def test_each_role_has_its_subpackage() -> None:
    roles = {path.name for path in ROOT.iterdir() if (path / "__init__.py").is_file()}
    assert roles == {"cli", "connection", "devserver", "server", "worker"}
    loose = sorted(path.name for path in ROOT.glob("*.py"))
    assert loose == [
        "__init__.py", "_fastmcp_private.py", "_policy.py", "_reliance.py", "_settings.py", "_task_json.py",
        "_upstream_check.py",
    ]


def test_the_worker_side_never_imports_the_mcp_facing_side() -> None:
    modules = _modules()
    for name, path in modules.items():
        if name.startswith(("fastmcp_temporal.worker", "fastmcp_temporal.connection", "fastmcp_temporal.activities",
                            "fastmcp_temporal.workflows", "fastmcp_temporal.devserver")):
            leaks = {target for target in _imports(path, modules) if target.startswith("fastmcp_temporal.server")}
            assert not leaks, f"{name} imports {leaks}"


def _within(name: str, *packages: str) -> bool:
    return any(name == f"fastmcp_temporal.{package}" or name.startswith(f"fastmcp_temporal.{package}.")
               for package in packages)


def _imports_of(*packages: str) -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) for name, path in modules.items() if _within(name, *packages)}


def test_the_connection_layer_knows_neither_mcp_nor_the_legs() -> None:
    """`connection/` reaches Temporal and the payload store; what a leg or an MCP answer is lives above it."""
    above = ("_task_json", "_fastmcp_private", "_upstream_check", "_reliance", "_policy", "server", "worker",
             "activities", "cli")
    for name, targets in _imports_of("connection").items():
        leaks = {target for target in targets if _within(target, *above)}
        assert not leaks, f"{name} imports {leaks}"


def test_the_activity_only_orchestrates_the_worker() -> None:
    """`activities/` says what a leg does, in order; the machinery (its attempts, its stored input,
    its body, the keep step) is in `worker/`, so the activity imports no other role."""
    allowed = ("activities", "worker", "workflows", "_settings", "_policy", "_task_json", "_fastmcp_private")
    for name, targets in _imports_of("activities").items():
        others = {target for target in targets if not _within(target, *allowed)}
        assert not others, f"{name} imports {others}"


def test_the_dev_server_launcher_is_the_bottom_role() -> None:
    """`devserver/` imports nothing of ours but the search attributes' names (shared workflow data):
    the connection launches it, and nothing runs back up."""
    for name, targets in _imports_of("devserver").items():
        others = {target for target in targets if not _within(target, "devserver")}
        assert others <= {"fastmcp_temporal.workflows.models"}, f"{name} imports {others}"


def test_the_other_roles_launch_the_dev_server_through_its_public_names() -> None:
    """Outside `devserver/`, the package imports `fastmcp_temporal.devserver`, never one of its modules."""
    for name, targets in _imports_of("server", "worker", "connection", "cli").items():
        reached = {target for target in targets if target.startswith("fastmcp_temporal.devserver.")}
        assert not reached, f"{name} imports {reached}: import from fastmcp_temporal.devserver"


def test_the_shared_modules_import_no_role() -> None:
    """The top-level modules every role uses import only each other: no arrow runs back up."""
    shared = ("_settings", "_policy", "_task_json", "_fastmcp_private", "_upstream_check", "_reliance")
    for name, targets in _imports_of(*shared).items():
        roles = {target for target in targets if not _within(target, *shared)}
        assert not roles, f"{name} imports {roles}"


def test_only_the_extension_and_the_plugin_run_the_upstream_check() -> None:
    """The start-up check runs where a server or a worker is made, and `_reliance` serves it alone."""
    modules = _modules()
    check, reliance = "fastmcp_temporal._upstream_check", "fastmcp_temporal._reliance"
    importers = {target: {name for name, path in modules.items() if target in _imports(path, modules)}
                 for target in (check, reliance)}
    assert importers == {
        check: {"fastmcp_temporal.server._extension", "fastmcp_temporal.worker._plugin"},
        reliance: {check},
    }


def test_nothing_outside_the_server_imports_what_it_knows_of_tasks() -> None:
    modules = _modules()
    for name, path in modules.items():
        if not _within(name, "server"):
            leaks = _imports(path, modules) & READ_PATH
            assert not leaks, f"{name} imports {leaks}"


def test_only_the_extension_imports_the_task_methods() -> None:
    """What the handlers share with a durable call (answers, statuses) lives in a module of its own."""
    modules = _modules()
    handlers = "fastmcp_temporal.server._handlers"
    importers = {name for name, path in modules.items() if handlers in _imports(path, modules)}
    assert importers == {"fastmcp_temporal.server._extension"}, f"{handlers} imported by {importers}"


def test_the_change_signals_know_no_source_and_no_listener() -> None:
    """Any source of task changes (a watch, a write, the feed) can signal them and any held read or
    stream wait on them: the signals import nothing of ours."""
    modules = _modules()
    changes = "fastmcp_temporal.server._changes"
    assert not _imports(modules[changes], modules), f"{changes} imports {_imports(modules[changes], modules)}"


def _names_imported(path: Path) -> set[str]:
    return {alias.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)
            for alias in node.names}


def test_a_tasks_facts_are_written_from_one_value() -> None:
    """The memo a task starts with is built from its `TaskFacts` alone, as its input and UI summary are."""
    writers = {name for name, path in _modules().items() if "created_memo" in _names_imported(path)}
    assert writers == {"fastmcp_temporal.server._facts"}


def test_a_calls_policy_is_read_by_its_plan_alone() -> None:
    """The server reads a tool's policy, and looks a call's component up, in `server/_plan.py`: the layers
    below the entry take the call's `CallPlan` instead of reading them again."""
    modules = _modules()
    readers = {name for name, path in modules.items() if _within(name, "server")
               and {"policy_of", "registered_component_for_key"} & _names_imported(path)}
    assert readers == {"fastmcp_temporal.server._plan"}


def test_the_cli_is_the_top_role() -> None:
    """Commands use the other roles, none uses a command: what a server and `tasks --stuck` both
    decide (the stall rule) lives below them both (`connection/_stall.py`)."""
    modules = _modules()
    for name, path in modules.items():
        if not _within(name, "cli"):
            leaks = {target for target in _imports(path, modules) if _within(target, "cli")}
            assert not leaks, f"{name} imports {leaks}"


def _top_level_imports(path: Path) -> set[str]:
    """The first name of every module `path` imports, anywhere in it."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
    return names


def _touches_sys_path(path: Path) -> bool:
    return any(isinstance(node, ast.Attribute) and ast.unparse(node) == "sys.path"
               for node in ast.walk(ast.parse(path.read_text())))


def test_no_test_module_imports_another() -> None:
    test_modules = {path.stem for path in TESTS.glob("test_*.py")} | {"conftest"}
    for path in TESTS.rglob("*.py"):
        reached = _top_level_imports(path) & test_modules
        assert not reached, f"{path.relative_to(REPO)} imports {sorted(reached)}: move it to tests/helpers/"


def test_tests_and_bench_keep_off_each_others_path(pytestconfig: pytest.Config) -> None:
    assert BENCH not in pytestconfig.getini("pythonpath"), "pytest's pythonpath names bench/"
    bench_modules = {path.stem for path in BENCH.glob("*.py")}
    tests_modules = {path.stem for path in TESTS.glob("*.py")} | {"helpers"}
    for folder, others in ((TESTS, bench_modules), (BENCH, tests_modules)):
        for path in folder.rglob("*.py"):
            where = path.relative_to(REPO)
            assert not _touches_sys_path(path), f"{where} changes sys.path"
            crossing = _top_level_imports(path) & others
            assert not crossing, f"{where} imports {sorted(crossing)}"


def test_each_module_is_short_enough_to_read_as_one_concern() -> None:
    """Past 500 lines a module holds several concerns; the settings table is one long list."""
    long = {name: lines for name, path in _modules().items()
            if (lines := len(path.read_text().splitlines())) > 500 and name != "fastmcp_temporal._settings"}
    assert not long, f"split these into modules of one concern each: {long}"


def test_each_module_of_the_read_path_is_a_room_read_at_once() -> None:
    """The read path is split by concern (reads, watches, roads, the feed, the closed answers), each
    module at most 300 lines."""
    modules = _modules()
    assert READ_PATH <= modules.keys(), f"gone from the read path: {READ_PATH - modules.keys()}"
    long = {name: lines for name in READ_PATH if (lines := len(modules[name].read_text().splitlines())) > 300}
    assert not long, f"split these by concern: {long}"
def _status_literal_sets(path: Path) -> list[str]:
    """The sets of task-status literals `path` writes out: `{...}`, `set(...)`, `frozenset(...)`."""
    from fastmcp_temporal.server._status import MCP_STATUSES

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in {"set", "frozenset"}:
            elements = [element for arg in node.args if isinstance(arg, (ast.Set, ast.List, ast.Tuple))
                        for element in arg.elts]
        elif isinstance(node, ast.Set):
            elements = node.elts
        else:
            continue
        if any(isinstance(element, ast.Constant) and element.value in MCP_STATUSES for element in elements):
            found.append(ast.unparse(node))
    return found


def test_the_groups_of_task_statuses_are_defined_once() -> None:
    """Ended, running, waiting on the caller: `server/_status.py` names each group; the others import it."""
    home = ROOT / "server" / "_status.py"
    assert _status_literal_sets(home)
    for name, path in _modules().items():
        if path != home:
            assert not _status_literal_sets(path), f"{name} defines a set of task statuses: import _status's"


def test_the_2025_11_25_tasks_do_not_import_the_push_module() -> None:
    push = "fastmcp_temporal.server._push"
    for name, targets in _imports_of("server").items():
        if name.endswith("_2025_11_25"):
            assert push not in targets, f"{name} imports {push}: share through _task_reads or _wire instead"

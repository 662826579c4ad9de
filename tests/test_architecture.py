"""The house rules, read off the source: one-way imports between the parts, short functions and
files, public torch APIs only, and no issue numbers or commit hashes in code or tests."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.glob("fitting/**/*.py"), *ROOT.glob("models/**/*.py"), ROOT / "train.py",
                  *ROOT.glob("hydra_plugins/*.py")])
TESTS = sorted(ROOT.glob("tests/**/*.py"))

# What each part must never import: the training core and the lower parts never reach up to the
# tools built on them (the card, compare, benchmarks), and the op library depends on torch alone.
TOOLS = ("fitting.compare", "fitting.bench", "fitting.opcheck")
CORE = ("fitting.run", "fitting.loop", "fitting.checkpoint", "fitting.config")
FORBIDDEN = {
    "models/": ("fitting", "hydra", "omegaconf", "tensorboard", "matplotlib"),
    "train.py": TOOLS,
    "fitting/run.py": TOOLS,
    "fitting/loop.py": TOOLS,
    "fitting/checkpoint.py": TOOLS,
    "fitting/config.py": TOOLS,
    "fitting/boundary.py": ("fitting", "models"),
    "fitting/slots.py": (*TOOLS, *CORE, "fitting.verdict", "fitting.uses", "fitting.precheck"),
    "fitting/verdict.py": (*TOOLS, *CORE, "fitting.uses", "fitting.precheck"),
    "fitting/uses.py": (*TOOLS, *CORE, "fitting.precheck"),
    "fitting/precheck.py": (*TOOLS, *CORE),
    "hydra_plugins/": ("fitting", "models", "torch"),
    "fitting/optim/": (*TOOLS, *CORE, "fitting.slots", "fitting.verdict", "fitting.precheck"),
    "fitting/tasks/": (*TOOLS, *CORE, "fitting.slots", "fitting.verdict", "fitting.precheck"),
    "fitting/track/": (*TOOLS, *CORE, "fitting.slots", "fitting.verdict", "fitting.precheck"),
}
# The source (fitting/, models/, train.py; the 80-line SLURM launcher aside): a learner reads it
# in an afternoon.
MAX_SOURCE_LINES = 5240  # issue 44: +53 (a sweep's failed job, peak RSS, poly3's zeros)
MAX_FUNCTION_LINES = 60
MAX_FILE_LINES = 300


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _imports(tree: ast.Module) -> list[str]:
    """The absolute module names a module imports (relative imports stay inside its package)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("part", sorted(FORBIDDEN))
def test_a_part_never_imports_the_parts_above_it(part):
    bad = [
        f"{_rel(path)} imports {name}"
        for path in SOURCES if _rel(path).startswith(part)
        for name in _imports(_tree(path))
        if name.split(".")[0] in FORBIDDEN[part] or name.startswith(FORBIDDEN[part])
    ]
    assert bad == []


def test_the_source_stays_readable_in_an_afternoon():
    counted = [p for p in SOURCES if not _rel(p).startswith("hydra_plugins/")]  # the budget's
    lines = sum(len(path.read_text().splitlines()) for path in counted)  # fitting, models, train
    assert lines <= MAX_SOURCE_LINES


def test_no_function_is_over_60_lines_and_no_file_over_300():
    long_functions = [
        f"{_rel(path)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in SOURCES for node in ast.walk(_tree(path))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    long_files = [
        f"{_rel(path)} ({n} lines)" for path in SOURCES
        if (n := len(path.read_text().splitlines())) > MAX_FILE_LINES
    ]
    assert long_functions == [] and long_files == []


def _private_torch(tree: ast.Module) -> list[str]:
    """The private torch modules or attributes (a name part starting with '_') used."""
    used = [name for name in _imports(tree)
            if name.split(".")[0] == "torch" and any(p.startswith("_") for p in name.split("."))]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id == "torch":
                used.append(ast.unparse(node))
    return used


def test_the_code_uses_public_torch_apis_only():
    used = {_rel(path): found for path in SOURCES if (found := _private_torch(_tree(path)))}
    assert used == {}


def test_the_private_api_check_sees_imports_and_attributes():
    tree = ast.parse("import torch._dynamo\nfrom torch._C import x\ny = torch._C._get_x()\n"
                     "z = torch.nn.functional.relu\n")
    assert _private_torch(tree) == ["torch._dynamo", "torch._C", "torch._C._get_x", "torch._C"]


ISSUE_OR_COMMIT = re.compile(
    r"\bissue\s*#?\d+|\(#\d+\)|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b",
    re.IGNORECASE,
)


def test_no_code_or_test_cites_an_issue_number_or_a_commit_hash():
    cited = [
        f"{_rel(path)}: {match.group(0)}"
        for path in [*SOURCES, *TESTS] if path != Path(__file__).resolve()
        for match in ISSUE_OR_COMMIT.finditer(path.read_text())
    ]
    assert cited == []

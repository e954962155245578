"""The structure check (tools/check_structure.py) runs in the suite: no import cycle, no
import from a higher layer, no function of the engine over 80 lines of code."""

import pathlib
import subprocess
import sys

TOOL = pathlib.Path(__file__).resolve().parent.parent / "tools" / "check_structure.py"


def test_structure_has_no_cycles_no_upward_imports_no_long_functions():
    run = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("structure: no cycles")


def test_the_check_finds_each_kind_of_problem(tmp_path, monkeypatch):
    sys.path.insert(0, str(TOOL.parent))
    try:
        import check_structure as check
    finally:
        sys.path.pop(0)
    assert check.cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert check.layer("gyre.callbacks._bars") > check.layer("gyre.loop._engine")
    import ast

    source = "def f():\n    '''doc\n    more'''\n    # comment\n\n    x = 1\n    return x\n"
    node = ast.parse(source).body[0]
    assert check.code_lines(node, source.splitlines()) == 3  # def, x = 1, return

"""Snapshot.files beside the steps: checked names, atomic writes, the marker, delete and copy."""

import json
import os

import pytest

from gyre.callbacks._store import MARKER, Files, check_file_name


@pytest.mark.parametrize(
    "name",
    ["history/000000000120.json", "notes.json", "a/b/c-d_e=f.txt", "history2/x"],
)
def test_plain_relative_names_are_accepted(name):
    assert check_file_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "", "/abs/path", "../up", "history/../x", "history//x", ".hidden/x", "12/x", "120",
        MARKER, "5.orbax-checkpoint-tmp/x", "5.corrupt/x", "history/x.tmp-gyre-12", "a\\b",
        b"bytes", 3, None,
    ],
)
def test_names_that_escape_or_collide_are_refused(name):
    with pytest.raises(ValueError) as info:
        check_file_name(name)
    lines = str(info.value).splitlines()
    assert lines[0] == "a checkpoint file name must be a relative path of plain names"
    assert lines[3] == "  fix: name the files of a Snapshot like 'history/000120.json'"


def test_write_read_list_and_marker(tmp_path):
    files = Files(str(tmp_path / "ckpt"))
    assert files.list("history") == [] and files.read("history/a.json") is None and files.tops() == []
    files.write({"history/000000000000.json": b"[0]", "history/000000000005.json": b"[5]"})
    files.write({"notes.json": b"{}", "history/000000000000.json": b"[0, 1]"})
    assert files.list("history") == ["history/000000000000.json", "history/000000000005.json"]
    assert files.read("history/000000000000.json") == b"[0, 1]"  # replaced as a whole
    assert files.tops() == ["history", "notes.json"]
    assert json.loads((tmp_path / "ckpt" / MARKER).read_text()) == {"names": ["history", "notes.json"]}
    leftovers = [n for _, _, names in os.walk(tmp_path) for n in names if ".tmp-gyre-" in n]
    assert leftovers == []


def test_a_write_interrupted_before_the_rename_leaves_the_old_content(tmp_path, monkeypatch):
    files = Files(str(tmp_path))
    files.write({"history/b.json": b"old"})

    def crash(src, dst):
        raise OSError("killed")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="killed"):
        files.write({"history/b.json": b"new"})
    monkeypatch.undo()
    assert files.read("history/b.json") == b"old"
    assert files.list("history") == ["history/b.json"]  # the temporary file is not listed


def test_delete_removes_only_what_gyre_wrote(tmp_path):
    files = Files(str(tmp_path))
    files.write({"history/a.json": b"1", "top.json": b"2"})
    (tmp_path / "user_notes.txt").write_text("mine")
    (tmp_path / "7").mkdir()
    files.delete()
    assert sorted(os.listdir(tmp_path)) == ["7", "user_notes.txt"]
    assert files.tops() == []


def test_copy_from_another_directory(tmp_path):
    source, here = Files(str(tmp_path / "a")), Files(str(tmp_path / "b"))
    source.write({"history/000000000000.json": b"[0]", "top.json": b"t"})
    here.copy_from(source)
    assert here.list("history") == ["history/000000000000.json"]
    assert here.read("top.json") == b"t" and here.tops() == ["history", "top.json"]


def test_a_damaged_marker_reads_as_no_files(tmp_path):
    (tmp_path / MARKER).write_text("{not json")
    assert Files(str(tmp_path)).tops() == []
    (tmp_path / MARKER).write_text(json.dumps({"names": ["history", "../x", "12", 3]}))
    assert Files(str(tmp_path)).tops() == ["history"]

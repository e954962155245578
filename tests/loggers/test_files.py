"""CSVWriter and JSONLWriter: the files hold every record; a column that appears late widens
the CSV's header without breaking a row."""

import csv
import json
import math

import jax.numpy as jnp
import pytest

import gyre


def test_csv_rows_line_up_when_a_column_appears_late(tmp_path):
    path = tmp_path / "m.csv"
    with gyre.CSVWriter(path) as writer:
        writer.write_scalars(0, {"loss": jnp.float32(1.0)})
        writer.write_scalars(1, {"loss": 0.5})
        writer.flush()
        assert path.read_text().splitlines()[0] == "step,loss"
        writer.write_scalars(2, {"accuracy": 0.75, "loss": 0.25})
        writer.write_scalars(3, {"loss": 0.125})
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0]) == ["step", "loss", "accuracy"]
    assert [(r["step"], r["loss"], r["accuracy"]) for r in rows] == [
        ("0", "1.0", ""), ("1", "0.5", ""), ("2", "0.25", "0.75"), ("3", "0.125", ""),
    ]
    assert not (tmp_path / "m.csv.tmp").exists()


def test_jsonl_holds_one_object_per_write(tmp_path):
    path = tmp_path / "m.jsonl"
    with gyre.JSONLWriter(path) as writer:
        writer.write_scalars(0, {"loss": 1.0})
        writer.write_scalars(5, {"loss": float("nan"), "n": 3})
    first, second = [json.loads(line) for line in path.read_text().splitlines()]
    assert first == {"step": 0, "loss": 1.0}
    assert second["step"] == 5 and math.isnan(second["loss"]) and second["n"] == 3


@pytest.mark.parametrize("cls", [gyre.CSVWriter, gyre.JSONLWriter])
def test_a_bad_path_is_refused_and_texts_are_not_written(cls, tmp_path):
    with pytest.raises(TypeError, match="needs a file path"):
        cls(3)
    with pytest.raises(IsADirectoryError, match="is a folder") as info:
        cls(tmp_path)
    assert f"gyre.{cls.__name__}(os.path.join(" in str(info.value)
    with cls(tmp_path / "f") as writer, pytest.raises(TypeError, match="does not write texts"):
        writer.write_texts(0, {"a": "b"})

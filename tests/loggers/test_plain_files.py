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


def _low_precision_step(elapsed):
    half = jnp.bfloat16(1.5 / (elapsed.steps + 1))
    return gyre.logs().add_loss("loss", half).add_metric("f16", jnp.float16(0.25)).add_metric(
        "f8", jnp.asarray(0.5, jnp.float8_e4m3fn)
    )


def test_bfloat16_float16_and_float8_values_are_written_as_floats(tmp_path):
    import ml_dtypes
    import numpy as np

    csv_writer = gyre.CSVWriter(tmp_path / "m.csv")
    gyre.loop(None, range(2), {gyre.every(1): _low_precision_step, **gyre.write_to(csv_writer)})
    csv_writer.close()
    rows = list(csv.DictReader((tmp_path / "m.csv").open()))
    assert rows == [
        {"step": "0", "loss": "1.5", "f16": "0.25", "f8": "0.5"},
        {"step": "1", "loss": "0.75", "f16": "0.25", "f8": "0.5"},
    ]
    with gyre.JSONLWriter(tmp_path / "m.jsonl") as writer:
        writer.write_scalars(0, {"a": jnp.bfloat16(1.5), "b": np.asarray(2.5, ml_dtypes.bfloat16)})
        writer.write_scalars(1, {"c": ml_dtypes.float8_e4m3fn(0.5), "d": jnp.asarray(3, ml_dtypes.int4)})
    lines = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert lines == [{"step": 0, "a": 1.5, "b": 2.5}, {"step": 1, "c": 0.5, "d": 3}]
    assert type(lines[0]["a"]) is float


@pytest.mark.parametrize("make", [gyre.CSVWriter, gyre.JSONLWriter])
def test_a_missing_folder_is_created_as_tensorboard_and_mlflow_do(tmp_path, make):
    path = tmp_path / "runs" / "a" / "metrics.txt"
    with make(path) as writer:
        writer.write_scalars(0, {"loss": 1.0})
    assert "1.0" in path.read_text()

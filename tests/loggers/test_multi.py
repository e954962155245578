"""MultiWriter: each kind goes to the writers that write it; a kind none writes raises;
flush and close reach all of them."""

import io

import numpy as np
import pytest

import gyre

from .readers import tensorboard_values


def test_each_kind_reaches_the_writers_that_write_it(tmp_path):
    out = io.StringIO()
    writers = [gyre.ConsoleWriter(out), gyre.CSVWriter(tmp_path / "m.csv"), gyre.TensorBoardWriter(tmp_path / "tb")]
    multi = gyre.MultiWriter(writers)
    multi.write_scalars(0, {"loss": 1.0})
    multi.write_histograms(0, {"w": np.ones(4)})  # TensorBoard only
    multi.write_texts(0, {"note": "x"})  # console and TensorBoard
    multi.close()
    multi.close()
    assert out.getvalue().splitlines() == ["step 0: loss=1", "step 0: note: x"]
    assert (tmp_path / "m.csv").read_text().splitlines() == ["step,loss", "0,1.0"]
    assert {"loss", "w", "note/text_summary"} <= set(tensorboard_values(str(tmp_path / "tb")))
    with pytest.raises(RuntimeError, match="is closed"):
        multi.write_scalars(1, {"loss": 0.5})


def test_a_kind_none_of_them_writes_raises(tmp_path):
    with gyre.MultiWriter([gyre.CSVWriter(tmp_path / "m.csv")]) as multi, pytest.raises(TypeError, match="MultiWriter.*does not write images"):
        multi.write_images(0, {"i": np.zeros((2, 2, 3), np.uint8)})


def test_only_writers_are_accepted():
    with pytest.raises(TypeError, match="list of writers"):
        gyre.MultiWriter([print])

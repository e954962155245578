"""ConsoleWriter: one line per write, to the file given (sys.stdout by default)."""

import io

import numpy as np
import pytest

import gyre


def test_lines_for_scalars_texts_and_hparams():
    out = io.StringIO()
    with gyre.ConsoleWriter(out) as writer:
        writer.write_scalars(1, {"loss": np.float32(0.5), "n": 3})
        writer.write_texts(1, {"note": "hi"})
        writer.write_hparams({"lr": 0.001})
    assert out.getvalue().splitlines() == ["step 1: loss=0.5, n=3", "step 1: note: hi", "hparams: lr=0.001"]


def test_stdout_by_default(capsys):
    with gyre.ConsoleWriter() as writer:
        writer.write_scalars(0, {"x": 2.0})
    assert capsys.readouterr().out == "step 0: x=2\n"


def test_images_are_not_written():
    with gyre.ConsoleWriter(io.StringIO()) as writer, pytest.raises(TypeError, match="MLflowWriter, TensorBoardWriter, WandbWriter"):
        writer.write_images(0, {"i": np.zeros((2, 2, 3), np.uint8)})


def test_bfloat16_and_float8_scalars_are_numbers():
    import jax.numpy as jnp

    out = io.StringIO()
    with gyre.ConsoleWriter(out) as writer:
        writer.write_scalars(0, {"loss": jnp.bfloat16(0.5), "f8": jnp.asarray(0.25, jnp.float8_e5m2)})
    assert out.getvalue() == "step 0: loss=0.5, f8=0.25\n"

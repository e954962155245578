"""Padding the last, smaller batch to the batch shape, with a mask of its real rows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gyre.data import Padded, accepts_mask, pad_batch, padded


def test_pad_batch_repeats_the_last_row_and_masks_the_padding():
    x, y = np.arange(6.0).reshape(3, 2), np.array([7, 8, 9], np.int32)
    (px, py), mask = pad_batch((x, y), 5)
    assert px.tolist() == [[0, 1], [2, 3], [4, 5], [4, 5], [4, 5]] and px.dtype == x.dtype
    assert py.tolist() == [7, 8, 9, 9, 9] and py.dtype == np.int32
    assert mask.tolist() == [True, True, True, False, False] and mask.dtype == bool
    assert isinstance(px, np.ndarray)  # numpy stays numpy (no device transfer)


def test_pad_batch_with_zeros_keeps_jax_arrays_and_scalar_leaves():
    batch = {"x": jnp.ones((2, 3)), "step": 4, "w": jnp.float32(2.0)}
    out, mask = pad_batch(batch, 4, fill="zeros")
    assert isinstance(out["x"], jax.Array)
    assert out["x"].tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 0], [0, 0, 0]]
    assert out["step"] == 4 and float(out["w"]) == 2.0
    assert mask.tolist() == [True, True, False, False]


def test_a_full_batch_comes_back_unchanged_with_a_read_only_mask_of_ones():
    x = np.zeros((3, 2))
    out, mask = pad_batch(x, 3)
    assert out is x and mask.tolist() == [True] * 3
    with pytest.raises(ValueError, match="read-only"):
        mask[0] = False


@pytest.mark.parametrize(
    ("batch", "size", "kwargs", "match"),
    [
        (np.zeros((5, 2)), 4, {}, r"more rows than the size(.|\n)*size >= the batch's 5 rows"),
        ((np.zeros((3, 2)), np.zeros(2)), 4, {}, r"one leading dimension(.|\n)*leading dimensions \[2, 3\]"),
        ({"a": 1.0}, 4, {}, r"one leading dimension(.|\n)*no array leaf"),
        (np.zeros(3), 4, {"fill": "mean"}, r"unknown fill(.|\n)*'edge', 'zeros'"),
        (np.zeros(3), 2.5, {}, r"received: size=float 2\.5"),
    ],
)
def test_bad_padding_is_explained(batch, size, kwargs, match):
    with pytest.raises(ValueError, match=match):
        pad_batch(batch, size, **kwargs)


def test_padded_learns_the_size_from_the_first_batch_and_is_reiterable():
    x = np.arange(10.0)
    loader = [x[i : i + 4] for i in range(0, 10, 4)]
    p = padded(loader)
    assert isinstance(p, Padded) and len(p) == 3
    for _ in range(2):  # a list is re-iterable, so is its Padded
        pairs = list(p)
        assert [b.shape for b, _ in pairs] == [(4,), (4,), (4,)]
        assert [int(m.sum()) for _, m in pairs] == [4, 4, 2]
    assert pairs[-1][0].tolist() == [8.0, 9.0, 9.0, 9.0]
    exact = sum(float((b * m).sum()) for b, m in pairs) / sum(int(m.sum()) for _, m in pairs)
    assert exact == x.mean()


def test_padded_with_a_batch_size_pads_every_batch_and_refuses_a_larger_one():
    pairs = list(padded([np.ones(2), np.ones(3)], batch_size=3))
    assert [m.tolist() for _, m in pairs] == [[True, True, False], [True, True, True]]
    with pytest.raises(ValueError, match="more rows than the size"):
        list(padded([np.ones(2), np.ones(3)]))  # learnt 2 from the first batch
    with pytest.raises(ValueError, match=r"batch_size must be a whole number >= 1(.|\n)*received: int 0"):
        padded([], batch_size=0)


def test_accepts_mask_reads_the_signature():
    def step(state, batch, mask=None):
        return batch

    def kw_only(state, batch, *, mask):
        return batch

    def anything(state, batch, **kwargs):
        return batch

    assert accepts_mask(step) and accepts_mask(jax.jit(step)) and accepts_mask(kw_only)
    assert not accepts_mask(anything) and not accepts_mask(lambda state, batch: batch)
    assert not accepts_mask(print)  # no signature to read: not opted in

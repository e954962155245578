"""gyre.data._augment: random crop with zero padding, horizontal flip, seeded per
(seed, epoch, batch index), and the resumable augmented() source."""

import json

import numpy as np
import pytest

import gyre
from gyre.data import augment, augmented, random_crop, random_flip


def shifted(image, dy, dx):
    """``image`` (H, W, ...) moved down by dy and right by dx, zeros where nothing lands."""
    out = np.zeros_like(image)
    h, w = image.shape[:2]
    out[max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = image[
        max(-dy, 0) : h + min(-dy, 0), max(-dx, 0) : w + min(-dx, 0)
    ]
    return out


@pytest.fixture
def images():
    # Distinct positive values, so every shift gives a different image.
    return (np.arange(6 * 5 * 7 * 2, dtype=np.float32) + 1).reshape(6, 5, 7, 2)


def test_crop_equals_the_shift_with_zeros_drawn(images):
    padding = 2
    out = random_crop(images, 11, padding=padding)
    offsets = np.random.default_rng(11).integers(0, 2 * padding + 1, size=(6, 2))
    for image, cropped, (oy, ox) in zip(images, out, offsets, strict=True):
        np.testing.assert_array_equal(cropped, shifted(image, padding - oy, padding - ox))
    # Each crop matches exactly one of the (2p+1)^2 shifts.
    for image, cropped in zip(images, out, strict=True):
        matches = [
            (dy, dx)
            for dy in range(-padding, padding + 1)
            for dx in range(-padding, padding + 1)
            if np.array_equal(cropped, shifted(image, dy, dx))
        ]
        assert len(matches) == 1
    assert out.shape == images.shape and out.dtype == images.dtype


def test_crop_shifts_cover_the_range_and_padding_zero_is_identity():
    x = (np.arange(9, dtype=np.float32) + 1).reshape(1, 3, 3)
    many = np.repeat(x, 400, axis=0)
    out = random_crop(many, 0, padding=1)
    kinds = {out[i].tobytes() for i in range(len(out))}
    assert len(kinds) == 9  # every shift in {-1, 0, 1}^2 drawn
    np.testing.assert_array_equal(random_crop(many, 0, padding=0), many)


def test_flip_mirrors_the_drawn_images(images):
    out = random_flip(images, 5)
    flip = np.random.default_rng(5).random(6) < 0.5
    assert 0 < flip.sum() < 6
    for image, result, mirrored in zip(images, out, flip, strict=True):
        np.testing.assert_array_equal(result, image[:, ::-1] if mirrored else image)
    np.testing.assert_array_equal(random_flip(images, 5, p=0.0), images)
    np.testing.assert_array_equal(random_flip(images, 5, p=1.0), images[:, :, ::-1])


def test_same_seed_same_output_other_epoch_or_index_differs(images):
    a = augment(images, seed=3, epoch=2, index=7)
    np.testing.assert_array_equal(a, augment(images, seed=3, epoch=2, index=7))
    assert not np.array_equal(a, augment(images, seed=3, epoch=3, index=7))
    assert not np.array_equal(a, augment(images, seed=3, epoch=2, index=8))
    assert not np.array_equal(a, augment(images, seed=4, epoch=2, index=7))
    # augment is the crop then the flip, both drawn from default_rng((seed, epoch, index, AUGMENT_STREAM)).
    from gyre.data._augment import AUGMENT_STREAM

    rng = np.random.default_rng((3, 2, 7, AUGMENT_STREAM))
    np.testing.assert_array_equal(a, random_flip(random_crop(images, rng, 4), rng))
    np.testing.assert_array_equal(random_crop(images, (3, 2, 7), 4), random_crop(images, np.random.default_rng((3, 2, 7)), 4))
    np.testing.assert_array_equal(augment(images, seed=0, epoch=0, index=0, padding=0, flip=False), images)


def test_works_on_three_dim_batches_and_keeps_dtype():
    x = np.arange(2 * 4 * 4, dtype=np.uint8).reshape(2, 4, 4)
    out = augment(x, seed=0, epoch=0, index=0, padding=1)
    assert out.shape == x.shape and out.dtype == np.uint8


def test_augmented_source_resumes_exactly_and_keeps_the_protocol():
    rng = np.random.default_rng(0)
    x, y = rng.random((12, 6, 6, 1), dtype=np.float32), np.arange(12)
    source = augmented(gyre.data.batches((x, y), 4, seed=1), seed=2, padding=2)
    assert source.epoch_steps == 3 and iter(source) is source
    run = [next(source) for _ in range(7)]
    # Labels come through untouched, images are augment() of the plain batch at its position.
    plain = gyre.data.batches((x, y), 4, seed=1)
    for i, (xb, yb) in enumerate(run):
        px, py = next(plain)
        np.testing.assert_array_equal(yb, py)
        np.testing.assert_array_equal(xb, augment(px, seed=2, epoch=i // 3, index=i % 3, padding=2))
    # Epochs differ (same samples reshuffled and re-augmented).
    assert not np.array_equal(run[0][0], run[3][0])
    # Resume at batch 4 (epoch 1, position 1) from a JSON round trip: the same batches.
    saved = json.loads(json.dumps(source.state_dict_at(4)))
    again = augmented(gyre.data.batches((x, y), 4, seed=1), seed=2, padding=2)
    again.load_state_dict(saved)
    for xb, yb in run[4:]:
        xa, ya = next(again)
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert again.state_dict() == source.state_dict()
    # Other attributes are the source's.
    assert (again.epoch, again.position, again.index, again.batch_size) == (2, 1, 7, 4)
    assert repr(again).startswith("Augmented(Batches(samples=12")


def test_augmented_single_array_source():
    x = np.ones((4, 3, 3, 1), np.float32)
    out = next(augmented(gyre.data.batches(x, 2, shuffle=False), seed=0, padding=1))
    np.testing.assert_array_equal(out, augment(x[:2], seed=0, epoch=0, index=0, padding=1))


@pytest.mark.parametrize("bad", [-1, 1.5, "a", None, (1, -2)])
def test_bad_seed(bad):
    with pytest.raises(TypeError, match="augmentation draws from a numpy Generator or a seed"):
        random_crop(np.zeros((1, 4, 4)), bad)


def test_jax_key_is_refused_with_a_pointer_to_numpy_seeds():
    import jax

    with pytest.raises(TypeError, match="a JAX key lives on the device"):
        random_flip(np.zeros((1, 4, 4)), jax.random.key(0))


def test_flat_images_are_refused():
    with pytest.raises(ValueError, match=r"random_crop works on a batch of images[\s\S]*received: an array of shape \(2, 64\)[\s\S]*reshape"):
        random_crop(np.zeros((2, 64)), 0)
    with pytest.raises(ValueError, match="random_flip works on a batch of images"):
        random_flip(np.zeros(3), 0)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_bad_padding(bad):
    with pytest.raises(ValueError, match="padding must be a whole number >= 0"):
        random_crop(np.zeros((1, 4, 4)), 0, padding=bad)
    with pytest.raises(ValueError, match="padding must be a whole number >= 0"):
        augmented(gyre.data.batches(np.zeros((4, 4, 4)), 2), padding=bad)


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.5", True])
def test_bad_flip_probability(bad):
    with pytest.raises(ValueError, match=r"the flip probability p must be a number in \[0, 1\]"):
        random_flip(np.zeros((1, 4, 4)), 0, p=bad)


@pytest.mark.parametrize("name", ["seed", "epoch", "index"])
def test_augment_bad_position(name):
    kwargs = {"seed": 0, "epoch": 0, "index": 0, name: -1}
    with pytest.raises(ValueError, match=f"augment's {name} must be a whole number >= 0"):
        augment(np.zeros((1, 4, 4)), **kwargs)


def test_augmented_needs_a_resumable_source():
    with pytest.raises(TypeError, match=r"augmented\(\) needs a source that knows its position"):
        augmented([(np.zeros((2, 4, 4)), np.zeros(2))])
    with pytest.raises(ValueError, match="a seed must be a whole number >= 0"):
        augmented(gyre.data.batches(np.zeros((4, 4, 4)), 2), seed=-1)


def test_the_augmentation_stream_is_not_the_shuffle_stream_of_the_same_seed():
    # numpy makes default_rng((s, e)) and default_rng((s, e, 0)) one stream: with the plain
    # (seed, epoch, index) words, batch 0's crops were drawn from the numbers of epoch 0's shuffle
    from gyre.data._augment import AUGMENT_STREAM

    assert AUGMENT_STREAM != 0
    x = np.zeros((6, 8, 8, 1), np.float32)
    x[:, 3:5, 3:5] = 1.0
    for seed in (0, 5):
        shuffle_numbers = np.random.default_rng((seed, 0))
        crops = gyre.data.random_crop(x, shuffle_numbers, 4)
        assert not np.array_equal(gyre.data.augment(x, seed=seed, epoch=0, index=0, flip=False), crops)
        assert np.array_equal(
            gyre.data.augment(x, seed=seed, epoch=0, index=0, flip=False),
            gyre.data.random_crop(x, np.random.default_rng((seed, 0, 0, AUGMENT_STREAM)), 4),
        )


def test_a_position_saved_with_another_augmentation_is_refused():
    # the saved position held the source's arguments only: a resume that augmented with another
    # seed, padding or flip (or not at all) drew other images than the run that saved it, silently
    x, y = np.random.default_rng(0).random((12, 4, 4, 1), dtype=np.float32), np.arange(12)
    source = lambda: gyre.data.batches((x, y), 4, seed=0)  # noqa: E731
    saved = json.loads(json.dumps(augmented(source(), seed=1, padding=1).state_dict()))
    for other in (dict(seed=2, padding=1), dict(seed=1, padding=2), dict(seed=1, padding=1, flip=False)):
        with pytest.raises(ValueError, match="augmented otherwise"):
            augmented(source(), **other).load_state_dict(saved)
    with pytest.raises(ValueError, match="augment: saved .*here none"):
        source().load_state_dict(saved)
    with pytest.raises(ValueError, match=r"(?s)augmented otherwise.*None: the run did not augment"):
        augmented(source(), seed=1, padding=1).load_state_dict(source().state_dict())
    same = augmented(source(), seed=1, padding=1)
    same.load_state_dict(saved)  # the same augmentation continues
    grain = gyre.data.arrays((x, y), 4, augment={"seed": 1, "padding": 1}, workers=1).train
    with pytest.raises(ValueError, match="augmented otherwise"):  # grain's path checks it as numpy's
        grain.load_state_dict(augmented(source(), seed=1, padding=2).state_dict())
    grain.load_state_dict(saved)
    assert np.array_equal(next(grain)[0], next(same)[0])
    grain.close()

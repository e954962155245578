"""The trainer's data: the parts of a batch, found by key or position."""

from gyre.trainer._module import INPUT_KEYS, TARGET_KEYS, batch_part


def test_batch_parts_are_found_by_key_or_position():
    assert batch_part({"image": 1, "label": 2}, TARGET_KEYS, 1, "target") == 2
    assert batch_part((1, 2), INPUT_KEYS, 0, "input") == 1

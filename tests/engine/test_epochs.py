"""The epoch stream of the trainer and fit: epochs of a re-iterable loader as one resumable iterator."""

import pytest

from gyre.engine._epochs import EpochStream, epoch_length, is_iterator


def test_epochs_of_a_list_and_a_resume_mid_epoch():
    stream = EpochStream([1, 2, 3], epochs=3)
    assert stream.epoch_steps == 3 and list(stream) == [1, 2, 3] * 3
    assert stream.index == 9 and stream.state_dict() == {"epoch": 3, "position": 0}
    assert stream.state_dict_at(4) == {"epoch": 1, "position": 1}
    resumed = EpochStream([1, 2, 3], epochs=3)
    resumed.load_state_dict({"epoch": 1, "position": 2})
    assert list(resumed) == [3, 1, 2, 3] and resumed.index == 9


def test_a_loader_without_a_length_an_empty_one_or_an_iterator_is_refused():
    with pytest.raises(TypeError, match="how many batches one epoch of train_loader holds"):
        epoch_length((b for b in [1]), what="train_loader")
    with pytest.raises(TypeError, match=r"its length is 0"):
        epoch_length([], what="train_loader")
    with pytest.raises(TypeError, match="is an iterator, which one epoch would exhaust"):
        EpochStream(iter([1, 2]), epochs=2)


def test_a_loader_whose_length_changes_between_epochs_is_named():
    class Shrinking:
        def __init__(self):
            self.calls = 0

        def __len__(self):
            return 3

        def __iter__(self):
            self.calls += 1
            return iter(range(3 if self.calls == 1 else 2))

    with pytest.raises(ValueError, match=r"changed its length between epochs(.|\n)*2 batches in epoch 2"):
        list(EpochStream(Shrinking(), epochs=2))


def test_iterators_are_told_from_loaders():
    assert (is_iterator(iter([1])), is_iterator([1])) == (True, False)

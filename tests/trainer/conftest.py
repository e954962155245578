"""Fixtures of the trainer tests."""

import pytest

from gyre.trainer import DigitsDataset


@pytest.fixture
def digits():  # fresh loaders for each test: a loader's position carries over between runs
    return DigitsDataset(global_batch_size=32, val_size=200)

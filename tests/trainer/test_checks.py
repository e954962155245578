"""Checks of a trainer subclass's methods at construction."""


import pytest

import gyre
from tests.trainer.helpers import trainer


def test_a_wrong_loss_signature_or_a_misspelt_name_is_named_at_construction(tmp_path):
    class Misspelt(gyre.TrainerModule):
        def loss_fucntion(self, model, batch, train=True):
            return 0.0

    with pytest.raises(TypeError, match=r"Misspelt defines no loss_function\. Did you mean 'loss_fucntion'\?"):
        trainer(tmp_path, cls=Misspelt)

    class TwoArgs(gyre.TrainerModule):
        def loss_function(self, batch):
            return 0.0

    with pytest.raises(TypeError, match=r"TwoArgs\.loss_function cannot take the trainer's arguments "
                                        r"\(model, batch, train\)(.|\n)*received: def loss_function\(batch\)"):
        trainer(tmp_path, cls=TwoArgs)

    class NoTrainFlag(gyre.TrainerModule):
        def loss_function(self, model, batch):
            return 0.0

    with pytest.raises(TypeError, match=r"NoTrainFlag\.loss_function cannot take"):
        trainer(tmp_path, cls=NoTrainFlag)

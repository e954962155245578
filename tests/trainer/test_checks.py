"""Checks of a trainer subclass's methods at construction."""


import numpy as np
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


def test_a_batch_that_is_not_a_pytree_is_explained_before_tracing(tmp_path):
    import dataclasses

    import numpy as np

    @dataclasses.dataclass
    class PlainBatch:  # as a plain dataclass, one opaque leaf to JAX
        input: np.ndarray
        target: np.ndarray

    t = trainer(tmp_path)
    batch = PlainBatch(np.zeros((4, 64), np.float32), np.zeros(4, np.int32))
    with pytest.raises(TypeError, match=r"(?s)a batch holds a PlainBatch, which JAX cannot put in a compiled step"
                                        r".*register PlainBatch as a pytree"):
        t.train_model([batch])
    assert t.state is None
    good = gyre.data.SupervisedBatch(batch.input, batch.target)
    t.init_model(good)
    assert t.state is not None


@pytest.mark.parametrize("loader, error", [
    ([], r"needs to know how many batches one epoch of train_loader holds(.|\n)*its length is 0"),
    ((b for b in []), r"the training loader is an iterator"),
])
def test_an_empty_or_one_pass_train_loader_is_explained_before_the_model_is_built_from_it(tmp_path, loader, error):
    # the model is built from the loader's first batch: an empty list or a generator gave a bare StopIteration
    with pytest.raises(TypeError, match=error):
        trainer(tmp_path).train_model(loader)


@pytest.mark.parametrize("optimizer", [{"class_name": "SGD", "learning_rate": 0.1}, 1e-3])
def test_a_config_section_passed_as_optimizer_is_named_at_construction(tmp_path, optimizer):
    # it failed at train_model's first batch as "tx= must be an optax optimizer": a name the user never wrote
    from tests.trainer.helpers import mlp

    with pytest.raises(TypeError, match=r"TrainerModule's optimizer= must be an optax optimizer(.|\n)*optimizer_config="):
        gyre.trainer.ImgClassifierTrainer(model=mlp(), optimizer=optimizer, log_dir=str(tmp_path))


def test_a_second_train_model_into_the_same_log_dir_is_explained_in_the_trainers_words(tmp_path):
    # it was the checkpoint's refusal: "resume='latest' on the loop ... gyre.checkpoint(directory,
    # overwrite=True)", options a TrainerModule user does not have
    import numpy as np

    x = np.zeros((8, 64), np.float32)
    data = [(x, np.zeros(8, np.int32))] * 2
    trainer(tmp_path, train_epochs=1).train_model(data)
    with pytest.raises(FileExistsError, match=r"the trainer's log_dir .* already holds a run \(resume/\)(.|\n)*resume='latest'"):
        trainer(tmp_path, train_epochs=1).train_model(data)
    assert trainer(tmp_path, train_epochs=1, resume="latest").train_model(data, num_epochs=2) == {}  # epoch 2


def test_a_resume_into_a_loader_of_another_epoch_length_is_refused(tmp_path):
    # was: resumed 10 saved steps with 8-batch epochs as epoch 1 at step 10 (clock: epochs=1 at
    # step 16), so num_epochs=2 ended after 16 steps, one epoch short and its validation lost
    import numpy as np

    x = np.zeros((8, 64), np.float32)
    batch = (x, np.zeros(8, np.int32))
    trainer(tmp_path, train_epochs=1).train_model([batch] * 10)
    with pytest.raises(ValueError, match=r"(?s)the trainer: resume continues a run of 10 batches per epoch, "
                       r"and train_loader now gives 8.*fix: .*or train in a new log_dir without resume"):
        trainer(tmp_path, train_epochs=1, resume="latest").train_model([batch] * 8, num_epochs=2)
    with pytest.raises(ValueError, match="a run of 10 batches per epoch, and train_loader now gives 6"):
        trainer(tmp_path, train_epochs=1, resume="latest", max_steps_per_epoch=6).train_model([batch] * 10, num_epochs=2)
    # a refused resume leaves the saved run's config.yaml (it recorded max_steps_per_epoch: 6, and the
    # next resume warned of a change 6 -> None the saved run never had)
    assert "max_steps_per_epoch: null" in (tmp_path / "config.yaml").read_text()
    resumed = trainer(tmp_path, train_epochs=1, resume="latest")
    resumed.train_model([batch] * 10, num_epochs=2)
    assert resumed.global_step == 20
    with pytest.raises(ValueError, match="past stop=10") as info:  # the engine's stop, said in the trainer's terms
        trainer(tmp_path, train_epochs=1, resume="latest").train_model([batch] * 10)
    assert "num_epochs x batches per epoch = 1 x 10 = 10 steps: pass train_model a larger num_epochs" in info.value.__notes__[0]


def test_concat_metrics_returned_in_training_are_said_to_be_dropped_there(tmp_path):
    # was: silently absent from on_training_step, the epoch's metrics and the writers
    import jax.numpy as jnp
    import numpy as np
    import optax

    class Labels(gyre.TrainerModule):
        def loss_function(self, model, batch, train=True):
            x, y = batch
            loss = ((model(x)[:, 0] - y) ** 2).mean()
            return loss, {"ids": {"value": y, "mode": "concat"}, "seen": {"value": y, "mode": "concat", "log_mode": "eval"}}

    from flax import nnx

    batch = (jnp.ones((4, 3)), jnp.arange(4, dtype=jnp.float32))
    t = Labels(model=nnx.Linear(3, 1, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1), log_dir=str(tmp_path),
               enable_progress_bar=False)
    with pytest.warns(gyre.LoopWarning, match=r"(?s)returns the CONCAT metrics \['ids'\] in training.*fix: give them log_mode 'eval'"):
        t.init_model(batch)
    assert np.asarray(t.state.step) == 0


def test_a_training_batch_the_devices_cannot_split_is_refused_before_training(tmp_path):
    # was: found when the loader reached it (here after 3 steps), as gyre.fit had checked before training
    import numpy as np

    x, y = np.zeros((16, 64), np.float32), np.zeros(16, np.int32)
    loader = [(x, y)] * 3 + [(x[:12], y[:12])]
    t = trainer(tmp_path, num_devices=8, train_epochs=1)
    with pytest.raises(ValueError, match=r"(?s)the trainer: a training batch of 12 examples cannot be split over "
                       r"the 8 devices.*batch 3 of train_loader.*or trainer.num_devices=1"):
        t.train_model(loader)
    assert t.global_step == 0


def test_an_evaluation_batch_that_does_not_split_is_refused_with_several_processes(tmp_path, monkeypatch):
    # was: run whole, so each of 2 processes evaluated only its own rows of the short last batch
    # (a validation of 326 digits logged val/acc 0.7802 where one process gives 0.7822, and a
    # val/loss that differed between the processes)
    import jax

    x, y = np.zeros((8, 64), np.float32), np.zeros(8, np.int32)
    t = trainer(tmp_path, num_devices=8, train_epochs=1)
    t.init_model((x, y))
    loader = [(x[:6], y[:6]), (x[:5], y[:5])]  # padded to the largest, 6 rows (the loss takes mask=)
    assert "val/loss" in t.eval_model(loader)  # one process: the 6 rows run whole
    monkeypatch.setattr(jax, "process_count", lambda: 2)  # 8 devices: 4 of each process
    with pytest.raises(ValueError, match=r"(?s)a val batch of 6 rows cannot be split over this process's 4 "
                       r"devices, and with 2 processes.*make the largest val batch a multiple of 4"):
        t.eval_model(loader)


@pytest.mark.parametrize("where", ["val", "test", "dict"])
def test_an_endless_evaluation_loader_is_refused_before_training(tmp_path, where):
    # was: val_loader=gyre.data.batches((x, y), 64), the trainer's own training source, made the
    # first validation read batches forever (a hang, no error)
    x, y = np.zeros((64, 64), np.float32), np.zeros(64, np.int32)
    train, endless = gyre.data.batches((x, y), 32), gyre.data.batches((x, y), 32)
    loaders = {"val": {"val_loader": endless}, "test": {"test_loader": endless},
               "dict": {"val_loader": {"main": [(x, y)], "ood": endless}}}[where]
    t = trainer(tmp_path, train_epochs=1)
    with pytest.raises(ValueError, match=r"(?s)loader repeats forever.*received: Batches with epochs=None"):
        t.train_model(train, **loaders)
    assert t.global_step == 0


@pytest.mark.parametrize("val", ["one_pass", "generator"])
def test_a_one_pass_val_loader_for_several_validations_is_refused_before_training(tmp_path, val):
    # was: the second validation found it used up, and said "the val loader gave no batch ...
    # received: an empty Batches ... check the val split (its size and batch size)", after training
    x, y = np.zeros((64, 64), np.float32), np.zeros(64, np.int32)
    loader = {"one_pass": gyre.data.batches((x, y), 32, epochs=1), "generator": ((x, y) for _ in range(2))}[val]
    t = trainer(tmp_path, train_epochs=2)
    with pytest.raises(TypeError, match=r"(?s)val loader is an iterator: the first of the run's 2 validations"):
        t.train_model(gyre.data.batches((x, y), 32), val_loader=loader)
    assert t.global_step == 0

"""MLflowWriter: the local file store holds the metrics at their steps, the params, texts
and images; MLflow has no histograms; a missing mlflow names the extra."""

import re
import sys

import numpy as np
import pytest

import gyre
from gyre.engine._nan import POLL_EVERY


def test_the_store_holds_metrics_params_texts_and_images(tmp_path):
    from mlflow.tracking import MlflowClient

    with gyre.MLflowWriter(tmp_path / "mlruns", experiment_name="tests", run_name="r") as writer:
        for step in range(3):
            writer.write_scalars(step, {"loss": 1.0 / (step + 1)})
        writer.write_texts(1, {"note": "hello"})
        writer.write_images(2, {"digit": np.zeros((4, 4, 3), np.uint8)})
        writer.write_hparams({"learning_rate": 0.1}, {"final": 0.9})
        with pytest.raises(TypeError, match="MLflowWriter.*does not write histograms"):
            writer.write_histograms(0, {"w": np.ones(3)})
    client = MlflowClient(writer.tracking_uri)
    history = client.get_metric_history(writer.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    run = client.get_run(writer.run_id)
    assert run.data.params == {"learning_rate": "0.1"} and run.data.metrics["final"] == 0.9
    assert run.info.status == "FINISHED" and run.info.run_name == "r"
    assert client.download_artifacts(writer.run_id, "texts/note/step_00000001.txt", str(tmp_path)).endswith(".txt")
    assert [f.path for f in client.list_artifacts(writer.run_id)] == ["images", "texts"]


def test_a_missing_mlflow_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(ImportError, match=r"pip install 'gyre\[mlflow\]'"):
        gyre.MLflowWriter(tmp_path)


def test_a_bad_tracking_uri_is_refused():
    with pytest.raises(TypeError, match="needs a tracking URI"):
        gyre.MLflowWriter(None)


def test_write_to_sends_steps_in_batches_at_their_own_times(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    batches = []
    log_batch = MlflowClient.log_batch
    monkeypatch.setattr(MlflowClient, "log_batch", lambda self, run_id, **kw: batches.append(kw) or log_batch(self, run_id, **kw))
    writer = gyre.MLflowWriter(tmp_path / "mlruns", experiment_name="tests")
    step = lambda elapsed: gyre.logs().add_loss("loss", 1.0 / (elapsed.steps + 1)).add_metric("acc", 0.5)  # noqa: E731
    _, history, _ = gyre.loop(None, range(600), {gyre.every(1): step, **gyre.write_to(writer)})
    writer.close()
    metrics = MlflowClient(writer.tracking_uri).get_metric_history(writer.run_id, "loss")
    assert [(m.step, m.value) for m in metrics] == [(i, pytest.approx(1 / (i + 1))) for i in range(600)]
    assert [m.timestamp for m in metrics] == [round(d * 1000) for d in history.collect("date")]
    # not one per step: one per send of the history, which the NaN check makes every POLL_EVERY
    # steps (a writer's reads land records in between without adding sends)
    assert len(batches) <= 600 // POLL_EVERY + 2 and max(len(kw["metrics"]) for kw in batches) <= 1000


def test_bfloat16_scalars_are_logged(tmp_path):
    import jax.numpy as jnp
    from mlflow.tracking import MlflowClient

    with gyre.MLflowWriter(tmp_path / "mlruns", experiment_name="tests", run_name="r") as writer:
        writer.write_scalars(3, {"loss": jnp.bfloat16(0.5)})
    history = MlflowClient(writer.tracking_uri).get_metric_history(writer.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(3, 0.5)]


@pytest.mark.parametrize("uri, hint", [("s3://bucket/mlruns", ""), ("htp://localhost:5000", "Did you mean 'http'?"),
                                       ("sqlite:///m.db", "")])
def test_an_unsupported_uri_is_refused_naming_what_works(uri, hint):
    with pytest.raises(ValueError, match="MLflowWriter cannot log to") as info:
        gyre.MLflowWriter(uri)
    text = str(info.value)
    assert hint in text and f"received: {uri!r}" in text and "gyre.MLflowWriter('runs/mlruns'" in text


def test_a_server_uri_with_no_server_fails_at_once_with_the_cause():
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed below: nothing listens there
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match=f"no MLflow tracking server answers at http://127.0.0.1:{port}") as info:
        gyre.MLflowWriter(f"http://127.0.0.1:{port}")
    assert time.perf_counter() - start < 10 and "mlflow server" in str(info.value)


@pytest.mark.parametrize("name", ["acc@top1", "val//loss", "/loss", "loss/"])
def test_a_name_mlflow_refuses_is_refused_at_the_call_and_the_others_are_kept(tmp_path, name):
    # was: the write was queued, MLflow refused the whole log_batch on the writer's thread (loss too),
    # and the WriterError came at the next call
    from mlflow.tracking import MlflowClient

    with gyre.MLflowWriter(tmp_path / "mlruns") as writer:
        writer.write_scalars(0, {"loss": 1.0})
        with pytest.raises(ValueError, match=rf"(?s)cannot write the metric '{re.escape(name)}'.*alphanumerics, underscores.*fix: rename it"):
            writer.write_scalars(1, {"loss": 0.5, name: 0.9})
        with pytest.raises(ValueError, match=rf"the param '{re.escape(name)}'"):
            writer.write_hparams({name: 1})
        with pytest.raises(ValueError, match=rf"the metric '{re.escape(name)}'"):
            gyre.MultiWriter([writer]).write_scalars(1, {name: 0.9})  # (not closed: it would close writer)
        writer.write_scalars(2, {"loss": 0.25, "a-b.c d:e/f_1": 1.0})  # every character MLflow takes
    history = MlflowClient(writer.tracking_uri).get_metric_history(writer.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(0, 1.0), (2, 0.25)]


@pytest.mark.parametrize("name", ["epoch:3", "acc@1", "größe"])
def test_an_image_name_mlflows_log_image_refuses_is_refused_at_the_call(tmp_path, name):
    # was: queued; log_image refused the key on the writer's thread (its rule has no colon and is ASCII
    # only, unlike a metric's), the image was lost and the WriterError came at the next call
    with gyre.MLflowWriter(tmp_path / "mlruns") as writer:
        with pytest.raises(ValueError, match=rf"(?s)cannot write the image '{name}'.*ASCII alphanumerics.*fix: rename it"):
            writer.write_images(0, {name: np.zeros((4, 4, 3))})
        writer.write_images(0, {"val/a-b.c d_1": np.zeros((4, 4, 3))})  # every character log_image takes
        writer.write_scalars(0, {"loss": 1.0})


def test_a_param_written_again_with_another_value_is_refused_at_the_call(tmp_path):
    # was: queued; MLflow refused the request ('Changing param values is not allowed') on the writer's
    # thread, with the other params and metrics of that call, and the WriterError came at close
    from mlflow.tracking import MlflowClient

    with gyre.MLflowWriter(tmp_path / "mlruns") as writer:
        writer.write_hparams({"lr": 0.1, "layers": 2})
        with pytest.raises(ValueError, match=r"(?s)the param 'lr' again with another value.*expected: lr=0.1"):
            writer.write_hparams({"lr": 0.2, "seed": 3})
        writer.write_hparams({"lr": 0.1, "seed": 3}, {"acc": 0.9})  # the same value again: MLflow takes it
    run = MlflowClient(writer.tracking_uri).get_run(writer.run_id)
    assert run.data.params == {"lr": "0.1", "layers": "2", "seed": "3"} and run.data.metrics == {"acc": 0.9}


def test_a_name_longer_than_mlflow_takes_is_refused_at_the_call(tmp_path):
    with gyre.MLflowWriter(tmp_path / "mlruns") as writer:
        writer.write_scalars(0, {"x" * 250: 1.0})  # MLflow's longest
        with pytest.raises(ValueError, match=r"(?s)the metric 'x{60}'... \(251 characters\).*at most 250 characters"):
            writer.write_scalars(1, {"x" * 251: 1.0})


def test_write_to_refuses_a_history_entry_mlflow_refuses_before_sending_its_block(tmp_path):
    from mlflow.tracking import MlflowClient

    def step(state, batch):
        return gyre.logs().add_loss("loss", state).add_metric("acc@top1", state), state + 1.0

    writer = gyre.MLflowWriter(tmp_path / "mlruns")
    with pytest.raises(ValueError, match="(?s)cannot write the metric 'acc@top1'.*fix: rename it, e.g. 'acc_top1'"):
        gyre.loop(np.float32(0), range(3), {gyre.every(1): [step, gyre.write_to(writer)]})
    writer.close()
    assert MlflowClient(writer.tracking_uri).get_metric_history(writer.run_id, "loss") == []  # nothing sent

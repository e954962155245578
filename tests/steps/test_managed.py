"""The managed API: gradients from logged losses, accumulation, clipping, precision, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre import managed


def init_params():
    return {"w": jax.random.normal(jax.random.PRNGKey(1), (5, 3)) * 0.5, "b": jnp.zeros(3)}


def batch_of(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 5)).astype(np.float32), rng.normal(size=(n, 3)).astype(np.float32)


def mse(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"][None] - y) ** 2)


def regression(**options):
    @managed.train_step(**options)
    def train_step(state, batch):
        x, y = batch
        return gyre.logs().add_loss("mse", mse(state.params, x, y)).add_metric("n", x.shape[0]), state

    return train_step


def fresh(tx=None, **kwargs):
    return managed.ManagedState.create(params=init_params(), tx=tx or optax.sgd(0.1), **kwargs)


def test_train_step_matches_hand_written_gradient_descent():
    x, y = batch_of(8)
    logs, state = regression()(fresh(), (x, y))
    grads = jax.grad(mse)(init_params(), x, y)
    expected = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, init_params(), grads)
    np.testing.assert_allclose(state.params["w"], expected["w"], atol=1e-6)
    assert int(state.step) == 1 and float(logs.losses.mse) == pytest.approx(float(mse(init_params(), x, y)))


def test_accumulating_four_microbatches_of_16_equals_one_batch_of_64():
    batch = batch_of(64)
    logs_big, big = regression()(fresh(), batch)
    logs_acc, acc = regression(accumulate_steps=4)(fresh(), batch)
    for name in ("w", "b"):
        np.testing.assert_allclose(acc.params[name], big.params[name], atol=1e-6)
    assert float(logs_acc.losses.mse) == pytest.approx(float(logs_big.losses.mse), abs=1e-6)
    assert int(logs_acc.metrics.n) == 16  # metrics are averaged over microbatches


def test_microbatches_get_their_own_keys():
    @managed.train_step(accumulate_steps=2)
    def noisy(state, batch):
        draw = jax.random.normal(state.step_key("noise"))
        logs = gyre.logs().add_loss("l", jnp.sum(state.params["b"] ** 2))
        return logs.add_metric("draw", draw).add_output("last_draw", draw), state

    logs, _ = noisy(fresh(), batch_of(4))
    # microbatch i draws from fold_in(rng, i), then the step and stream are folded in
    draws = []
    for i in range(2):
        sub = gyre.TrainState.create(params=(), rng=jax.random.fold_in(jax.random.PRNGKey(0), i))
        draws.append(float(jax.random.normal(sub.step_key("noise"))))
    assert draws[0] != draws[1]
    assert float(logs.outputs.last_draw) == pytest.approx(draws[1], abs=1e-6)
    assert float(logs.metrics.draw) == pytest.approx(sum(draws) / 2, abs=1e-6)


def test_clipping_limits_the_update_and_logs_the_norm():
    x, y = batch_of(8)
    logs, clipped = regression(clip_grad_norm=1e-3)(fresh(tx=optax.sgd(1.0)), (x, y))
    delta = jax.tree_util.tree_map(lambda a, b: a - b, clipped.params, init_params())
    assert float(optax.global_norm(delta)) == pytest.approx(1e-3, rel=1e-3)
    assert float(logs.metrics.grad_norm) > 1e-3


def test_bfloat16_policy_computes_low_and_keeps_float32_params():
    dtypes = []

    @managed.train_step(policy="bfloat16")
    def train_step(state, batch):
        x, y = batch
        dtypes.append((state.params["w"].dtype, x.dtype))
        return gyre.logs().add_loss("mse", mse(state.params, x, y)), state

    state = fresh()
    for _ in range(30):
        logs, state = train_step(state, batch_of(16, seed=0))
    assert dtypes[0] == (jnp.bfloat16, jnp.bfloat16)
    assert state.params["w"].dtype == jnp.float32
    assert float(logs.losses.mse) < float(mse(init_params(), *batch_of(16, seed=0)))


def test_method_form_and_loops():
    class State(managed.ManagedState):
        @managed.train_step
        def train_step(self, batch):
            x, y = batch
            return gyre.logs().add_loss("mse", mse(self.params, x, y)), self

        @managed.step
        def test_step(self, batch):
            x, y = batch
            return gyre.logs().add_metric("mse", mse(self.params, x, y)), self

    state = State.create(params=init_params(), tx=optax.sgd(0.1))
    logs, state = state.train_step(batch_of(8))
    assert int(state.step) == 1
    batches = [batch_of(8, seed=i) for i in range(6)]
    state, history, _ = gyre.train_loop(state, batches, test_dataset=lambda: batches[:2], epoch_duration=3)
    assert int(state.step) == 7
    losses = history.collect("mse")
    assert len(history.collect("mse_test")) == 2 and losses[-1] < losses[0]


def test_managed_step_does_not_update():
    @managed.step
    def evaluate(state, batch):
        x, y = batch
        return gyre.logs().add_metric("mse", mse(state.params, x, y)), state

    state = fresh()
    logs, after = evaluate(state, batch_of(8))
    assert int(after.step) == 0 and evaluate.compiled_count() == 1


def test_fuse_runs_steps_in_one_scan():
    batches = [batch_of(8, seed=i) for i in range(3)]
    stacked = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *batches)
    step = regression()
    logs, fused = step.fuse(3)(fresh(), stacked)
    state = fresh()
    for b in batches:
        _, state = step(state, b)
    np.testing.assert_allclose(fused.params["w"], state.params["w"], atol=1e-6)
    assert logs.losses.mse.shape == (3,) and int(fused.step) == 3


# -- bad input ---------------------------------------------------------------------------------


def test_no_loss_logged():
    @managed.train_step
    def no_loss(state, batch):
        return gyre.logs().add_metric("acc", 1.0), state

    with pytest.raises(ValueError, match="logged no loss") as err:
        no_loss(fresh(), batch_of(4))
    assert "add_loss" in str(err.value) and "metrics" in str(err.value)


def test_loss_that_is_not_a_scalar():
    @managed.train_step
    def per_example(state, batch):
        x, y = batch
        return gyre.logs().add_loss("mse", jnp.mean((x[:3, :3] - y[:3]) ** 2, axis=1)), state

    with pytest.raises(ValueError, match="loss 'mse' is not a scalar") as err:
        per_example(fresh(), batch_of(4))
    assert "(3,)" in str(err.value) and ".mean()" in str(err.value)


def test_bad_options():
    with pytest.raises(ValueError, match="accumulate_steps"):
        managed.train_step(accumulate_steps=0)
    with pytest.raises(ValueError, match="clip_grad_norm"):
        managed.train_step(clip_grad_norm=-1)
    with pytest.raises(ValueError, match="unknown precision policy 'bf16'"):
        managed.train_step(policy="bf16")
    with pytest.raises(ValueError, match="cannot be split into 4 microbatches"):
        regression(accumulate_steps=4)(fresh(), batch_of(6))
    with pytest.raises(TypeError, match="must return \\(logs, state\\)"):
        managed.train_step(lambda s, b: 3.0)(fresh(), batch_of(4))
    with pytest.raises(TypeError, match="optax optimizer"):
        managed.ManagedState.create(params=init_params(), tx="adam")


# -- silent mistakes that are errors -----------------------------------------------------------


def test_params_of_another_shape_are_an_error_not_silently_dropped():
    @managed.train_step
    def grows(state, batch):
        x, y = batch
        params = {**state.params, "w": jnp.zeros((6, 3))}
        return gyre.logs().add_loss("mse", mse(state.params, x, y)), state.replace(params=params)

    with pytest.raises(ValueError, match="grows returned params of another structure or shape") as info:
        grows(fresh(), batch_of(4))
    text = str(info.value)
    assert "float32[5, 3]" in text and "float32[6, 3]" in text
    assert "computes the params update itself" in text and "model_state or extras" in text

    @managed.train_step
    def drops(state, batch):
        x, y = batch
        return gyre.logs().add_loss("mse", mse(state.params, x, y)), state.replace(params={"w": state.params["w"]})

    with pytest.raises(ValueError, match="drops returned params of another structure"):
        drops(fresh(), batch_of(4))


@pytest.mark.parametrize("value", [jnp.int32(3), jnp.array(True), 2], ids=["int32", "bool", "python int"])
def test_an_integer_loss_is_an_error(value):
    @managed.train_step
    def counts(state, batch):
        return gyre.logs().add_loss("hits", value), state

    with pytest.raises(TypeError, match="loss 'hits' of .*counts is (int32|bool)") as info:
        counts(fresh(), batch_of(4))
    assert "gradient would be zero" in str(info.value) and "astype(jnp.float32)" in str(info.value)


def test_the_compiled_count_comes_from_the_compat_module():
    step = regression()
    assert step.compiled_count() == 0
    _, state = step(fresh(), batch_of(8))
    _, state = step(state, batch_of(8))
    assert step.compiled_count() == 1
    step(state, batch_of(16))
    assert step.compiled_count() == 2


# -- what a step function may return and take --------------------------------------------------


def test_returns_logs_alone_state_alone_or_none_parts():
    state = fresh()
    only_logs = managed.step(lambda s, b: gyre.logs().add_metric("m", b.sum()))
    logs, same = only_logs(state, jnp.ones(3))
    assert float(logs.metrics.m) == 3.0 and int(same.step) == 0
    bump = managed.step(lambda s: s.replace(extras={"n": s.extras.get("n", 0) + 1}))  # ciclo's reset style
    logs, bumped = bump(state)
    assert logs == {} and int(bumped.extras["n"]) == 1
    logs, same = managed.step(lambda s, b: (None, None))(state, 0)
    assert logs == {} and same.params["w"].shape == (5, 3)


def test_a_step_taking_more_than_state_and_batch_is_explained():
    with pytest.raises(TypeError, match="takes 3 arguments; a managed step gets \\(state, batch\\)") as info:
        managed.train_step(lambda state, batch, elapsed: (gyre.logs(), state))
    assert "state.step" in str(info.value)


def test_swapped_pair_is_explained():
    swapped = managed.step(lambda s, b: (s, gyre.logs()))
    with pytest.raises(TypeError, match="wrong order") as info:
        swapped(fresh(), 0)
    assert "return logs, state" in str(info.value)


# -- stateful metric objects, as ciclo's managed API merges them ------------------------------


def _clu():
    return pytest.importorskip("clu.metrics")


def test_clu_metrics_logged_as_stateful_metrics_are_merged_in_the_state():
    clu = _clu()
    AverageLoss = clu.Average.from_output("loss")

    class State(managed.ManagedState):  # ciclo's example 04: fields without defaults
        accuracy: clu.Accuracy
        loss: AverageLoss

    w = jax.random.normal(jax.random.PRNGKey(0), (5, 4))

    def step_fn(state, batch):
        x, y = batch
        logits = x @ state.params["w"]
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        logs = gyre.logs().add_loss("loss", loss)
        logs.add_stateful_metric("accuracy", clu.Accuracy.from_model_output(logits=logits, labels=y))
        logs.add_stateful_metric("loss", AverageLoss.from_model_output(loss=loss))
        return logs, state

    evaluate = managed.step(step_fn)

    @managed.step
    def reset(state):
        return state.replace(accuracy=clu.Accuracy.empty(), loss=AverageLoss.empty())

    rng = np.random.default_rng(0)
    batches = [(rng.normal(size=(8, 5)).astype(np.float32), rng.integers(0, 4, 8).astype(np.int32)) for _ in range(3)]
    state = State.create(params={"w": w}, tx=optax.sgd(0.0), accuracy=clu.Accuracy.empty(), loss=AverageLoss.empty())
    evaluate(state, batches[0])  # compile outside the guard
    with jax.transfer_guard_device_to_host("disallow"):
        for batch in batches:
            logs, state = evaluate(state, batch)
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    expected = float(np.mean(np.argmax(x @ np.asarray(w), -1) == y))
    assert float(logs.stateful_metrics.accuracy) == pytest.approx(expected)
    assert int(state.accuracy.count) == 24
    _, state = reset(state)
    assert int(state.accuracy.count) == 0
    # the train step merges them as well, after its update
    train = managed.train_step(step_fn)
    logs, state = train(state, batches[0])
    assert int(state.accuracy.count) == 8 and int(state.step) == 1


def test_gyre_metric_objects_in_extras_and_dict_results():
    from gyre.core.metrics import Mean
    from gyre.frameworks import Accuracy, Metrics

    @managed.step
    def evaluate(state, batch):
        x, y = batch
        logits = x @ state.params["w"][:, :3]
        logs = gyre.logs().add_stateful_metric("mean_x", Mean.from_value(x.mean(), count=x.shape[0]))
        both = Metrics({"acc": Accuracy(), "other": Accuracy()}).update(preds=logits, target=y.argmax(-1))
        return logs.add_stateful_metric("both", both), state

    state = managed.ManagedState.create(params=init_params(), mean_x=Mean.empty(),
                                        both=Metrics({"acc": Accuracy(), "other": Accuracy()}))
    batches = [batch_of(4, seed=i) for i in range(2)]
    for b in batches:
        logs, state = evaluate(state, b)
    all_x = np.concatenate([b[0] for b in batches])
    assert float(logs.stateful_metrics.mean_x) == pytest.approx(all_x.mean(), rel=1e-5)
    assert sorted(logs.stateful_metrics) == ["acc", "mean_x", "other"]  # a dict adds its entries
    assert float(state.both.metrics["acc"].total) == 8.0


def test_accumulated_microbatches_merge_metric_objects():
    from gyre.core.metrics import Mean

    def fn(state, batch):
        x, y = batch
        logs = gyre.logs().add_loss("mse", mse(state.params, x, y))
        return logs.add_stateful_metric("seen", Mean.from_value(x[:, 0].mean(), count=x.shape[0])), state

    batch = batch_of(16)
    whole = managed.train_step(fn)
    micro = managed.train_step(fn, accumulate_steps=4)
    logs_a, a = whole(fresh(seen=Mean.empty()), batch)
    logs_b, b = micro(fresh(seen=Mean.empty()), batch)
    assert float(b.seen.count) == float(a.seen.count) == 16.0
    assert float(logs_b.stateful_metrics.seen) == pytest.approx(float(logs_a.stateful_metrics.seen), abs=1e-6)


def test_a_metric_object_without_an_accumulator_is_explained():
    from gyre.core.metrics import Mean

    orphan = managed.step(lambda s, b: gyre.logs().add_stateful_metric("acc", Mean.from_value(1.0)))
    with pytest.raises(ValueError, match="no 'acc' to accumulate it in") as info:
        orphan(fresh(), 0)
    assert "acc=Mean.empty()" in str(info.value)
    wrong = managed.step(lambda s, b: gyre.logs().add_stateful_metric("acc", Mean.from_value(1.0)))
    with pytest.raises(TypeError, match="state.acc cannot accumulate"):
        from gyre.core.metrics import Sum

        wrong(fresh(acc=Sum.empty()), 0)


# -- non-finite updates: nan_policy="skip" -----------------------------------------------------


def nan_batch(n=8):
    x, y = batch_of(n)
    return np.full_like(x, np.nan), y


def test_a_skipping_step_keeps_the_whole_state_and_counts_the_skip():
    from gyre.core.metrics import Mean

    @managed.train_step(nan_policy="skip")
    def step(state, batch):
        x, y = batch
        loss = mse(state.params, x, y)
        logs = gyre.logs().add_loss("mse", loss).add_stateful_metric("seen", Mean.from_value(loss))
        return logs, state

    state = fresh(tx=optax.adam(0.1), seen=Mean.empty())
    logs, state = step(state, batch_of(8))
    before = jax.device_get(state)
    logs, state = step(state, nan_batch())
    after = jax.device_get(state)
    # params, optimizer state, step and the metric accumulator are those before the NaN batch
    for a, b in zip(jax.tree_util.tree_leaves(before.replace(skipped_steps=0)),
                    jax.tree_util.tree_leaves(after.replace(skipped_steps=0)), strict=True):
        np.testing.assert_array_equal(a, b)
    assert int(after.skipped_steps) == 1 and int(after.step) == 1
    assert int(logs.stateful_metrics.skipped_steps) == 1 and np.isnan(float(logs.losses.mse))
    logs, state = step(state, batch_of(8, seed=1))  # and trains on
    assert int(state.step) == 2 and int(state.skipped_steps) == 1
    assert step.compiled_count() == 1  # no retrace: the skip keeps every dtype


def test_accumulated_microbatches_skip_when_one_is_not_finite():
    x, y = batch_of(16)
    x[3] = np.inf
    logs, state = regression(accumulate_steps=4, nan_policy="skip")(fresh(), (x, y))
    assert int(state.skipped_steps) == 1 and int(state.step) == 0
    np.testing.assert_array_equal(np.asarray(state.params["w"]), np.asarray(init_params()["w"]))


def test_a_skipping_step_with_clipping_and_data_parallel():
    step = regression(clip_grad_norm=1.0, nan_policy="skip")
    state = fresh(strategy="data_parallel")
    logs, state = step(state, nan_batch(16))
    assert int(state.skipped_steps) == 1 and np.isnan(float(logs.metrics.grad_norm))
    logs, state = step(state, batch_of(16))
    assert int(state.skipped_steps) == 1 and int(state.step) == 1


def test_with_nan_policy_builds_the_skipping_step_once():
    step = regression()
    skipping = step.with_nan_policy("skip")
    assert skipping is step.with_nan_policy("skip") and skipping.nan_policy == "skip"
    assert skipping.with_nan_policy("skip") is skipping
    assert step.with_nan_policy("ignore") is step and step.nan_policy is None
    evaluate = managed.step(lambda state, batch: gyre.logs())
    assert evaluate.with_nan_policy("skip") is evaluate and evaluate.nan_policy is None
    skipping(fresh(), batch_of(4))
    assert step.compiled_count() == 1  # the skipping form's program counts as the step's


def test_a_bad_nan_policy_for_a_step_is_explained():
    with pytest.raises(ValueError, match="train_step's nan_policy= must be None or 'skip'") as info:
        managed.train_step(nan_policy="raise")
    assert "pass nan_policy='raise' or 'ignore' to the loop, not to the step" in str(info.value)
    with pytest.raises(ValueError, match="received: str 'drop'"):
        managed.train_step(nan_policy="drop")


def test_a_skipping_step_that_changes_the_state_structure_is_explained():
    @managed.train_step(nan_policy="skip")
    def grows(state, batch):
        x, y = batch
        return gyre.logs().add_loss("mse", mse(state.params, x, y)), state.replace(extras={"new": jnp.zeros(())})

    with pytest.raises(ValueError, match="returned a state of another structure than it received"):
        grows(fresh(), batch_of(4))


def test_skip_non_finite_keeps_the_state_on_a_non_finite_gradient_alone():
    before = fresh()
    after = before.replace(params=jax.tree_util.tree_map(lambda p: p + 1, before.params), step=before.step + 1)
    grads = {"w": jnp.full((5, 3), jnp.inf), "b": jnp.zeros(3)}
    kept = managed.skip_non_finite(before, after, jnp.float32(0.5), grads, gyre.logs())
    assert int(kept.step) == 0 and int(kept.skipped_steps) == 1
    kept = managed.skip_non_finite(before, after, jnp.float32(0.5), jax.tree_util.tree_map(jnp.zeros_like, grads), gyre.logs())
    assert int(kept.step) == 1 and int(kept.skipped_steps) == 0


# -- evaluation without recompiles: a managed test step that takes mask ----------------------------


def _masked_test_step():
    @managed.step
    def test_step(state, batch, mask=None):
        x, y = batch
        errors = jnp.mean((x @ state.params["w"] + state.params["b"][None] - y) ** 2, axis=1)
        return gyre.logs().add_metric("mse", jnp.sum(errors * mask) / jnp.sum(mask)), state

    return test_step


def test_a_managed_test_step_with_mask_compiles_once_and_its_mean_is_exact():
    from gyre.loop._named import DEFAULT_TEST_AGGREGATION

    x, y = batch_of(1000)
    test = [(x[i : i + 64], y[i : i + 64]) for i in range(0, 1000, 64)]  # 15 of 64, one of 40
    test_step, state = _masked_test_step(), fresh()
    assert test_step.takes_mask
    for steps_per_call in (1, 4):
        evaluate = gyre.inner_loop("test", lambda s, k=steps_per_call: gyre.test_loop(
            s, test, {gyre.on_test_step: test_step}, steps_per_call=k), aggregation=DEFAULT_TEST_AGGREGATION)
        logs, _ = evaluate(state)
        exact = np.mean((x.astype(np.float64) @ np.asarray(state.params["w"]) - y) ** 2)
        assert float(logs.metrics.mse_test) == pytest.approx(exact, abs=1e-6)
    assert test_step.compiled_count() == 2  # one step, one fused scan of 4


def test_a_managed_step_takes_mask_by_hand_and_refuses_it_without_a_mask_parameter():
    x, y = batch_of(4)
    mask = np.array([True, True, True, False])
    logs, _ = _masked_test_step()(fresh(), (x, y), mask=mask)
    errors = np.mean((x @ np.asarray(init_params()["w"]) - y) ** 2, axis=1)
    assert float(logs.metrics.mse) == pytest.approx(errors[:3].mean(), rel=1e-5)
    unmasked = managed.step(lambda state, batch: (gyre.logs().add_metric("n", batch[0].shape[0]), state))
    assert not unmasked.takes_mask
    with pytest.raises(TypeError, match="got the mask of a padded batch, and takes no mask") as info:
        unmasked(fresh(), (x, y), mask=mask)
    assert "add mask=None" in str(info.value)

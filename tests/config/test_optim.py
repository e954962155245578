"""Optimizers from the ``optimizer`` section: exact updates, the injected learning rate, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gyre.config import (
    OPTIMIZERS,
    RunLengthUnknown,
    assemble_optimizer,
    build_optimizer,
    build_schedule,
    learning_rate_of,
    optax_optimizers,
    run_length,
)

SEED = {  # seed file 003's optimizer section, verbatim
    "class_name": "AdamW",
    "b1": 0.9,
    "b2": 0.999,
    "eps": 1.0e-08,
    "learning_rate": {
        "class_name": "WarmupCosineDecaySchedule",
        "decay_factor": 0.1,
        "decay_steps": 1555,
        "init_value": 0.0,
        "peak_value": 0.001,
        "steps": 1755,
        "warmup_steps": 200,
    },
    "nesterov": False,
    "weight_decay": {
        "class_name": "WeightDecay",
        "mode": "whitelist",
        "parameter_regex_exclude": "",
        "parameter_regex_include": "((.*weight$)|(.*kernel$))",
        "value": 0.01,
    },
}


def params():
    return {"Dense_0": {"bias": jnp.ones(1), "kernel": jnp.full((1,), 2.0)}}


def like(value):
    return jax.tree.map(lambda p: jnp.full_like(p, value), params())


def step(section, grads, p=None):
    """One update from a fresh state: {path: list}."""
    tx = build_optimizer(section)
    p = params() if p is None else p
    updates = tx.update(grads, tx.init(p), p)[0]
    return {k: np.asarray(v).tolist() for k, v in updates["Dense_0"].items()}


# -- the optimizers ----------------------------------------------------------------------------


def test_seed_section_follows_its_schedule_inside_jit():
    tx = build_optimizer(SEED)
    schedule = build_schedule(SEED["learning_rate"])
    state = tx.init(params())
    assert float(learning_rate_of(state)) == 0.0  # before any update: the first one's rate

    @jax.jit
    def update(state, p):
        updates, state = tx.update(like(1.0), state, p)
        return state, optax.apply_updates(p, updates), learning_rate_of(state)

    p, seen = params(), []
    for _ in range(3):
        state, p, rate = update(state, p)
        assert isinstance(rate, jax.Array)  # on the device, not read
        seen.append(rate)
    np.testing.assert_array_equal(jax.device_get(seen), np.asarray(schedule(jnp.arange(3))))


def test_adamw_weight_decay_section_decays_only_the_masked_leaves():
    # zero gradients: Adam's part is 0, the update is -lr * value * param on the kernel only
    section = {
        "class_name": "AdamW",
        "learning_rate": 0.5,
        "weight_decay": {"value": 0.25, "parameter_regex_include": "kernel$"},
    }
    assert step(section, like(0.0)) == {"bias": [0.0], "kernel": [-0.25]}
    # a plain number decays every parameter (optax's default)
    assert step({**section, "weight_decay": 0.25}, like(0.0)) == {
        "bias": [-0.125],
        "kernel": [-0.25],
    }
    assert step({**section, "weight_decay": 0.0}, like(0.0)) == {"bias": [0.0], "kernel": [0.0]}


def test_sgd_exact_with_and_without_momentum():
    assert step({"class_name": "SGD", "learning_rate": 0.5}, like(1.0)) == {
        "bias": [-0.5],
        "kernel": [-0.5],
    }
    tx = build_optimizer({"class_name": "SGD", "learning_rate": 0.5, "momentum": 0.5})
    state, g = tx.init(params()), like(1.0)
    first, state = tx.update(g, state, params())
    second, state = tx.update(g, state, params())
    assert [first["Dense_0"]["kernel"].tolist(), second["Dense_0"]["kernel"].tolist()] == [
        [-0.5],
        [-0.75],
    ]


def test_adam_first_step_is_the_sign_times_the_rate():
    g = {"Dense_0": {"bias": jnp.array([-3.0]), "kernel": jnp.array([2.0])}}
    out = step({"class_name": "Adam", "learning_rate": 0.5}, g)
    np.testing.assert_allclose([out["bias"][0], out["kernel"][0]], [0.5, -0.5], rtol=1e-5)


def test_lamb_trust_ratio_on_the_decay_only_where_masked():
    # zero gradients: the update is wd*p, rescaled by ||p|| / ||wd*p|| = 4 on the kernel: -lr * 2
    section = {
        "class_name": "Lamb",
        "learning_rate": 0.5,
        "weight_decay": {"class_name": "WeightDecay", "value": 0.25},
    }
    assert step(section, like(0.0)) == {"bias": [0.0], "kernel": [-1.0]}


def test_any_optax_optimizer_by_lowercase_name():
    assert {"adabelief", "lion", "rmsprop", "sgd"} <= set(optax_optimizers())
    assert not {"scale_by_adam", "inject_hyperparams", "chain"} & set(optax_optimizers())
    g = {"Dense_0": {"bias": jnp.array([-3.0]), "kernel": jnp.array([2.0])}}
    expected = optax.adabelief(0.5, b1=0.8)
    direct = expected.update(g, expected.init(params()), params())[0]["Dense_0"]
    built = step({"class_name": "adabelief", "learning_rate": 0.5, "b1": 0.8}, g)
    assert built == {k: np.asarray(v).tolist() for k, v in direct.items()}
    clipped = {
        "class_name": "sgd",
        "learning_rate": 1.0,
        "transforms": [{"class_name": "GradClipValue", "max_delta": 1.0}],
    }
    assert step(clipped, g) == {"bias": [1.0], "kernel": [-1.0]}
    state = build_optimizer({"class_name": "lion", "learning_rate": 0.25}).init(params())
    assert float(learning_rate_of(state)) == 0.25


def test_user_registered_optimizer_through_assemble(monkeypatch):
    def SignSGD(*, learning_rate: float, transforms: list = ()):  # noqa: N802
        return assemble_optimizer(
            lambda lr: optax.chain(optax.scale_by_sign(), optax.scale(-lr)),
            learning_rate=learning_rate,
            transforms=transforms,
        )

    monkeypatch.setitem(OPTIMIZERS._items, "SignSGD", SignSGD)
    g = {"Dense_0": {"bias": jnp.array([-3.0]), "kernel": jnp.array([0.5])}}
    assert step({"class_name": "SignSGD", "learning_rate": 0.25}, g) == {
        "bias": [0.25],
        "kernel": [-0.25],
    }


def test_learning_rate_of_through_multisteps_and_none_without_injection():
    schedule = {"class_name": "Linear", "init_value": 1.0, "end_value": 0.0, "steps": 4}
    tx = optax.MultiSteps(
        build_optimizer({"class_name": "SGD", "learning_rate": schedule}), every_k_schedule=2
    )
    update = jax.jit(lambda state: tx.update(like(1.0), state, params())[1])
    state, rates = tx.init(params()), []
    for _ in range(6):  # the inner optimizer steps on every 2nd call: 3 inner updates
        state = update(state)
        rates.append(learning_rate_of(state))
    np.testing.assert_array_equal(jax.device_get(rates), [1.0, 1.0, 1.0, 0.75, 0.75, 0.5])
    assert learning_rate_of(optax.adam(0.1).init(params())) is None
    assert learning_rate_of({}) is None


def test_learning_rate_of_reads_nothing_from_the_device(sync_detector):
    tx = build_optimizer({"class_name": "SGD", "learning_rate": 0.125})
    state = tx.update(like(1.0), tx.init(params()), params())[1]
    rate = learning_rate_of(state)  # an implicit read here would raise
    assert sync_detector.explicit == 0
    assert jax.device_get(rate) == 0.125


def test_nnx_optimizer_state_and_parameter_paths():
    from flax import nnx

    model = nnx.Linear(1, 1, rngs=nnx.Rngs(0))
    model.kernel.value = jnp.full((1, 1), 2.0)
    model.bias.value = jnp.ones(1)
    section = {
        "class_name": "AdamW",
        "learning_rate": 0.5,
        "weight_decay": {"value": 0.25, "parameter_regex_include": "kernel$"},
    }
    optimizer = nnx.Optimizer(model, build_optimizer(section), wrt=nnx.Param)
    optimizer.update(model, jax.tree.map(jnp.zeros_like, nnx.state(model, nnx.Param)))
    assert (model.kernel.value.tolist(), model.bias.value.tolist()) == ([[1.75]], [1.0])
    assert isinstance(learning_rate_of(optimizer.opt_state), jax.Array)
    assert float(learning_rate_of(optimizer.opt_state)) == 0.5


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "section, error, match",
    [
        (
            {"class_name": "AdamWW", "learning_rate": 0.1},
            KeyError,
            r"unknown optimizer 'AdamWW' at optimizer.class_name\. Did you mean 'AdamW'\?",
        ),
        (
            {"class_name": "Nope", "learning_rate": 0.1},
            KeyError,
            r"(?s)registered optimizers: Adam, AdamW, (Doc[A-Za-z]*, )*Lamb, SGD.*optax optimizer: adabelief, adadelta",
        ),
        ({"class_name": "scale_by_adam"}, KeyError, r"unknown optimizer 'scale_by_adam'"),
        (
            {"learning_rate": 0.1},
            ValueError,
            r"(?s)optimizer has no class_name.*Adam, AdamW, (Doc[A-Za-z]*, )*Lamb, SGD; or an optax optimizer",
        ),
        (
            {"class_name": "SGD"},
            ValueError,
            r"missing required key learning_rate at optimizer \(SGD\)",
        ),
        (
            {"class_name": "AdamW", "learning_rate": 0.1, "beta1": 0.9},
            ValueError,
            r"(?s)unknown key 'beta1' at optimizer \(AdamW\).*the keys of AdamW: learning_rate",
        ),
        (
            {"class_name": "adabelief", "learning_rate": 0.1, "beta1": 0.9},
            ValueError,
            r"(?s)unknown key 'beta1' at optimizer \(optax.adabelief\).*b1 \(default 0.9\)",
        ),
        (
            {"class_name": "adabelief", "b1": 0.9},
            ValueError,
            r"missing required key learning_rate at optimizer \(optax.adabelief\)",
        ),
        (
            {"class_name": "AdamW", "learning_rate": 0.1, "b1": 1.0},
            ValueError,
            r"optimizer.b1 must be in \[0, 1\)",
        ),
        (
            {"class_name": "AdamW", "learning_rate": 0.1, "weight_decay": -1.0},
            ValueError,
            r"optimizer.weight_decay must be a finite number >= 0",
        ),
        (
            {
                "class_name": "AdamW",
                "learning_rate": 0.1,
                "weight_decay": {"value": 0.1, "before_optimizer": True},
            },
            ValueError,
            r"optimizer.weight_decay must be a WeightDecay section applied inside the optimizer",
        ),
        (
            {
                "class_name": "Lamb",
                "learning_rate": 0.1,
                "weight_decay": {"class_name": "GradClipNorm", "max_norm": 1.0},
            },
            ValueError,
            r"received: GradClipNorm",
        ),
        (
            {
                "class_name": "AdamW",
                "learning_rate": 0.1,
                "weight_decay": {"value": 0.1, "parameter_regex_include": "("},
            },
            ValueError,
            r"optimizer.weight_decay.parameter_regex_include is not a valid regular expression",
        ),
        (
            {"class_name": "SGD", "learning_rate": 0.1, "nesterov": True},
            ValueError,
            r"Nesterov momentum needs a momentum",
        ),
        (
            {"class_name": "SGD", "learning_rate": -0.1},
            ValueError,
            r"optimizer.learning_rate must be a finite number >= 0",
        ),
        (
            {"class_name": "SGD", "learning_rate": [0.1]},
            TypeError,
            r"optimizer.learning_rate must be a number or a schedule section",
        ),
        (
            {
                "class_name": "SGD",
                "learning_rate": {
                    "class_name": "Cosine",
                    "init_value": 0.1,
                    "decay_step": 10,
                },
            },
            ValueError,
            r"unknown key 'decay_step' at optimizer.learning_rate \(Cosine\)\. Did you mean 'decay_steps'",
        ),
        (
            {
                "class_name": "SGD",
                "learning_rate": 0.1,
                "transforms": [{"class_name": "GradClipNorm", "max_norm": -1}],
            },
            ValueError,
            r"optimizer.transforms\[0\].max_norm must be a finite number > 0",
        ),
    ],
)
def test_bad_optimizer_sections(section, error, match):
    with pytest.raises(error, match=match):
        build_optimizer(section)


def test_not_a_section_and_a_registered_optimizer_returning_something_else(monkeypatch):
    with pytest.raises(TypeError, match=r"optimizer must be a section"):
        build_optimizer("AdamW")  # type: ignore[arg-type]

    def Broken(*, learning_rate: float):  # noqa: N802
        return optax.sgd  # the factory, not a transformation

    monkeypatch.setitem(OPTIMIZERS._items, "Broken", Broken)
    with pytest.raises(
        TypeError,
        match=r"the optimizer 'Broken' at optimizer did not return an optax.GradientTransformation",
    ):
        build_optimizer({"class_name": "Broken", "learning_rate": 0.1})


def test_optax_rejecting_a_value_is_reported_with_the_path():
    with pytest.raises(TypeError, match=r"optax.lbfgs rejected the keys at opt: '<' not supported"):
        build_optimizer(
            {"class_name": "lbfgs", "learning_rate": 0.1, "memory_size": "x"}, where="opt"
        )


# -- the kpoeppel fork's optimizers: Lamb's trust ratio, SGD's momentum, log_learning_rate --------


def lamb_params():
    return {"layer": {"bias": jnp.full(2, 3.0), "weight": jnp.full(2, 3.0)}}


def test_lamb_applies_the_trust_ratio_where_the_weight_decay_mask_says():
    g = {"layer": {"bias": jnp.full(2, 2.0), "weight": jnp.full(2, 2.0)}}
    tx = build_optimizer({"class_name": "Lamb", "learning_rate": 0.1})
    u = tx.update(g, tx.init(lamb_params()), lamb_params())[0]["layer"]
    # Adam's first step is ~1 per element; the trust ratio ||p|| / ||u|| = 3 on the weight only
    np.testing.assert_allclose([u["bias"][0], u["weight"][0]], [-0.1, -0.3], rtol=1e-5)
    masked = build_optimizer({"class_name": "Lamb", "learning_rate": 0.1,
                              "weight_decay": {"value": 0.5, "parameter_regex_include": "bias$"}})
    u = masked.update(g, masked.init(lamb_params()), lamb_params())[0]["layer"]
    # bias: (1 + 0.5 * 3) scaled to ||p|| = 3 per element; weight: no decay, no trust ratio
    np.testing.assert_allclose([u["bias"][0], u["weight"][0]], [-0.3, -0.1], rtol=1e-5)
    # a plain number decays every parameter, and the trust ratio applies to all (optax.lamb)
    every = build_optimizer({"class_name": "Lamb", "learning_rate": 0.1, "weight_decay": 0.0})
    u = every.update(g, every.init(lamb_params()), lamb_params())[0]["layer"]
    np.testing.assert_allclose([u["bias"][0], u["weight"][0]], [-0.3, -0.3], rtol=1e-5)


def test_sgd_momentum_null_is_no_momentum():
    p, g = {"w": jnp.zeros(1)}, {"w": jnp.ones(1)}
    tx = build_optimizer({"class_name": "SGD", "learning_rate": 0.5, "momentum": None})
    state = tx.init(p)
    first, state = tx.update(g, state, p)
    second, _ = tx.update(g, state, p)
    assert first["w"].tolist() == second["w"].tolist() == [-0.5]


def test_log_learning_rate_false_leaves_no_rate_in_the_state():
    schedule = {"class_name": "Linear", "init_value": 1.0, "end_value": 0.0, "steps": 4}
    p, g = {"w": jnp.zeros(1)}, {"w": jnp.ones(1)}
    for name in ("SGD", "Adam", "AdamW", "Lamb"):
        tx = build_optimizer({"class_name": name, "learning_rate": schedule, "log_learning_rate": False})
        assert learning_rate_of(tx.init(p)) is None
        logged = build_optimizer({"class_name": name, "learning_rate": schedule})
        a, _ = tx.update(g, tx.init(p), p)
        b, _ = logged.update(g, logged.init(p), p)
        np.testing.assert_allclose(a["w"], b["w"], rtol=1e-6)  # the same maths either way
    with pytest.raises(TypeError, match=r"log_learning_rate must be true or false"):
        build_optimizer({"class_name": "SGD", "learning_rate": 0.1, "log_learning_rate": "no"})


# -- the run's length: schedules that leave theirs out, and schedules that do not fit ------------

SEED_RATE = {"class_name": "WarmupCosineDecaySchedule", "decay_factor": 0.1, "decay_steps": 1555,
             "init_value": 0.0, "peak_value": 0.001, "steps": 1755, "warmup_steps": 200}


def test_a_schedule_that_does_not_fit_the_run_warns(recwarn):
    # seed 003's YAML: a 1,755-step schedule in a 45-step run never leaves its warmup
    with pytest.warns(UserWarning, match=r"lasts 1755 steps, but the run trains 45: the run stops at 3% of it") as caught:
        build_optimizer({"class_name": "AdamW", "learning_rate": SEED_RATE}, run_steps=45)
    assert "leave its length out" in str(caught[0].message)
    short = {"class_name": "Linear", "init_value": 1.0, "end_value": 0.0, "steps": 40}
    with pytest.warns(UserWarning, match=r"holds its last value for the run's last 5 steps"):
        build_optimizer({"class_name": "SGD", "learning_rate": short}, run_steps=45)
    recwarn.clear()
    # a fitting schedule, a constant and no run length: no warning
    build_optimizer({"class_name": "SGD", "learning_rate": {**short, "steps": 45}}, run_steps=45)
    build_optimizer({"class_name": "SGD", "learning_rate": 0.1}, run_steps=45)
    build_optimizer({"class_name": "AdamW", "learning_rate": SEED_RATE})
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)]


def test_a_schedule_without_its_length_lasts_the_run():
    rate = {k: v for k, v in SEED_RATE.items() if k not in ("steps", "decay_steps")}
    tx = build_optimizer({"class_name": "AdamW", "learning_rate": rate}, run_steps=1000)
    state = tx.init({"w": jnp.zeros(1)})
    assert float(learning_rate_of(state)) == 0.0
    with run_length(1000):  # what the trainer and gyre fit set
        same = build_optimizer({"class_name": "AdamW", "learning_rate": rate})
    end = {"w": jnp.zeros(1)}
    for tx_ in (tx, same):
        s = tx_.init(end)
        for _ in range(1001):
            _, s = tx_.update({"w": jnp.ones(1)}, s, end)
        np.testing.assert_allclose(float(learning_rate_of(s)), 1e-4, rtol=1e-5)
    with pytest.raises(RunLengthUnknown, match=r"needs steps or decay_steps: no run length is known") as err:
        build_optimizer({"class_name": "AdamW", "learning_rate": rate})
    assert "build_optimizer(section, run_steps=<the run's steps>)" in str(err.value)  # the keyword it takes
    with pytest.raises(ValueError, match=r"run_steps must be a whole number >= 1"):
        build_optimizer({"class_name": "AdamW", "learning_rate": rate}, run_steps=0)

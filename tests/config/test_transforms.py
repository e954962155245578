"""Gradient transforms from config sections: exact outputs on tiny pytrees, and errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gyre.config import TRANSFORMS, Transform, build_optimizer, build_transforms, parameter_path
from gyre.config._transforms import GradClipNorm, GradClipValue, WeightDecay


def params():
    return {
        "Dense_0": {"bias": jnp.ones(1), "kernel": jnp.full((1,), 2.0)},
        "LayerNorm_0": {"scale": jnp.full((1,), 4.0)},
        "head": {"weight": jnp.full((1,), 8.0)},
    }


def zeros():
    return jax.tree.map(jnp.zeros_like, params())


def flat(tree):
    """{'Dense_0/kernel': [...], ...} with plain lists, for exact comparisons."""
    return {
        parameter_path(p): np.asarray(v).tolist()
        for p, v in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def decoupled_step(**weight_decay):
    """One update of a WeightDecay after the optimizer with lr 0.5 on zero updates."""
    tx = WeightDecay(**weight_decay, before_optimizer=False).make(learning_rate=0.5)
    return flat(tx.update(zeros(), tx.init(params()), params())[0])


def sgd_step(grads, *transforms, lr=0.5, p=None):
    p = p if p is not None else jax.tree.map(jnp.zeros_like, grads)
    tx = build_optimizer({"class_name": "SGD", "learning_rate": lr, "transforms": list(transforms)})
    return flat(tx.update(grads, tx.init(p), p)[0])


# -- paths and masks ---------------------------------------------------------------------------


def test_parameter_path_format():
    tree = {"Dense_0": {"kernel": 1}, "layers": [{"bias": 2}]}
    assert [parameter_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]] == [
        "Dense_0/kernel",
        "layers/0/bias",
    ]
    # an nnx Variable's trailing `.value` is dropped: nnx and linen paths read alike
    nnx_like = (
        jax.tree_util.DictKey("out"),
        jax.tree_util.DictKey("kernel"),
        jax.tree_util.GetAttrKey("value"),
    )
    assert parameter_path(nnx_like) == "out/kernel"
    assert (
        parameter_path((jax.tree_util.GetAttrKey("value"), jax.tree_util.DictKey("b"))) == "value/b"
    )


@pytest.mark.parametrize(
    "keys, decayed",
    [
        ({}, {"Dense_0/kernel", "head/weight"}),  # whitelist, jax_trainer's default include
        ({"parameter_regex_exclude": "^head/"}, {"Dense_0/kernel"}),
        (
            {"parameter_regex_include": "Dense|Norm"},
            {"Dense_0/bias", "Dense_0/kernel", "LayerNorm_0/scale"},
        ),
        ({"parameter_regex_include": ""}, set()),  # an empty regex matches nothing
        (
            {"mode": "blacklist", "parameter_regex_exclude": "bias$"},
            {"Dense_0/kernel", "LayerNorm_0/scale", "head/weight"},
        ),
        (
            {"mode": "blacklist"},
            {"Dense_0/bias", "Dense_0/kernel", "LayerNorm_0/scale", "head/weight"},
        ),
    ],
)
def test_weight_decay_masks(keys, decayed):
    mask = flat(WeightDecay(value=0.25, **keys).mask(params()))
    assert {path for path, on in mask.items() if on} == decayed


def test_decoupled_weight_decay_exact_numbers():
    # -lr * value * param = -0.5 * 0.25 * p on the decayed leaves, 0 elsewhere
    assert decoupled_step(value=0.25) == {
        "Dense_0/bias": [0.0],
        "Dense_0/kernel": [-0.25],
        "LayerNorm_0/scale": [0.0],
        "head/weight": [-1.0],
    }
    assert decoupled_step(
        value=0.25, mode="blacklist", parameter_regex_exclude="(bias|weight)$"
    ) == {
        "Dense_0/bias": [0.0],
        "Dense_0/kernel": [-0.25],
        "LayerNorm_0/scale": [-0.5],
        "head/weight": [0.0],
    }


def test_weight_decay_in_the_chain_before_and_after_the_optimizer():
    g = jax.tree.map(jnp.ones_like, params())
    coupled = {"class_name": "WeightDecay", "value": 0.25, "parameter_regex_include": "kernel$"}
    decay = {**coupled, "before_optimizer": False}
    after = sgd_step(g, decay, p=params())
    before = sgd_step(g, coupled, p=params())  # jax_trainer's default: coupled
    # SGD: coupled -lr*(g + wd*p) equals decoupled -lr*g - lr*wd*p
    assert (
        after
        == before
        == {
            "Dense_0/bias": [-0.5],
            "Dense_0/kernel": [-0.75],
            "LayerNorm_0/scale": [-0.5],
            "head/weight": [-0.5],
        }
    )
    # Adam normalises a coupled decay away on the first step; the decoupled one stays
    adam = {"class_name": "Adam", "learning_rate": 0.5}
    tx_after = build_optimizer({**adam, "transforms": [decay]})
    tx_before = build_optimizer({**adam, "transforms": [coupled]})
    u_after = tx_after.update(g, tx_after.init(params()), params())[0]["Dense_0"]["kernel"]
    u_before = tx_before.update(g, tx_before.init(params()), params())[0]["Dense_0"]["kernel"]
    np.testing.assert_allclose([u_after[0], u_before[0]], [-0.75, -0.5], rtol=1e-5)


# -- clipping ----------------------------------------------------------------------------------


def test_clip_by_norm_before_and_after_the_optimizer_differ():
    g = {"a": jnp.array([3.0]), "b": jnp.array([4.0])}  # global norm 5
    clip = {"class_name": "GradClipNorm", "max_norm": 1.0}
    assert sgd_step(g) == {"a": [-1.5], "b": [-2.0]}
    # before: clipped to norm 1, then scaled by -0.5; after: scaled (norm 2.5), then clipped to 1
    assert sgd_step(g, clip) == {"a": [float(np.float32(-0.3))], "b": [float(np.float32(-0.4))]}
    assert sgd_step(g, {**clip, "before_optimizer": False}) == {
        "a": [float(np.float32(-0.6))],
        "b": [float(np.float32(-0.8))],
    }
    # below the bound: untouched
    small = {"a": jnp.array([0.375]), "b": jnp.array([0.5])}
    assert sgd_step(small, clip) == {"a": [-0.1875], "b": [-0.25]}


def test_clip_by_value_before_and_after_the_optimizer():
    g = {"w": jnp.array([-3.0, 0.25, 2.0])}
    clip = {"class_name": "GradClipValue", "max_delta": 1.0}
    assert sgd_step(g, clip) == {"w": [0.5, -0.125, -0.5]}
    assert sgd_step(g, {**clip, "before_optimizer": False}) == {"w": [1.0, -0.125, -1.0]}


def test_transforms_apply_in_the_order_written_list_or_mapping():
    g = {"w": jnp.array([3.0, 4.0])}
    value = {"class_name": "GradClipValue", "max_delta": 1.0}
    norm = {"class_name": "GradClipNorm", "max_norm": 1.0}
    value_first = sgd_step(g, value, norm, lr=1.0)  # [1, 1] then norm sqrt(2) -> 1/sqrt(2) each
    np.testing.assert_allclose(value_first["w"], [-(2**-0.5)] * 2, rtol=1e-6)
    as_mapping = build_transforms({"v": value, "n": norm})
    assert [t.name for t in as_mapping] == ["GradClipValue", "GradClipNorm"]
    norm_first = sgd_step(g, norm, value, lr=1.0)  # [0.6, 0.8], already within 1
    assert norm_first == {"w": [float(np.float32(-0.6)), float(np.float32(-0.8))]}


def test_registered_transforms_and_flags():
    assert {"WeightDecay", "GradClipNorm", "GradClipValue"} <= set(TRANSFORMS)
    assert GradClipNorm(max_norm=1.0).before_optimizer is True
    assert GradClipValue(max_delta=1.0).before_optimizer is True
    # coupled by default, as jax_trainer's WeightDecay transform (before the optimizer)
    assert WeightDecay(value=0.1).before_optimizer is True
    assert WeightDecay(value=0.1, before_optimizer=False).before_optimizer is False
    assert build_transforms(None) == [] == build_transforms([])


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "section, error, match",
    [
        (
            {"class_name": "WeightDecay", "value": 0.1, "parameter_regex_include": "(kernel"},
            ValueError,
            r"transforms\[0\]\.parameter_regex_include is not a valid regular expression",
        ),
        (
            {"class_name": "WeightDecay", "value": 0.1, "parameter_regex_exclude": "[bias"},
            ValueError,
            r"parameter_regex_exclude is not a valid regular expression",
        ),
        (
            {"class_name": "WeightDecay", "value": 0.1, "parameter_regex_exclude": 3},
            TypeError,
            r"parameter_regex_exclude must be a regex string",
        ),
        (
            {"class_name": "WeightDecay", "value": -0.1},
            ValueError,
            r"value must be a finite number >= 0",
        ),
        (
            {"class_name": "WeightDecay", "value": 0.1, "mode": "graylist"},
            ValueError,
            r"mode must be 'whitelist' or 'blacklist'",
        ),
        (
            {
                "class_name": "WeightDecay",
                "value": 0.1,
                "mode": "blacklist",
                "parameter_regex_include": "bias",
            },
            ValueError,
            r"parameter_regex_include is not used in blacklist mode",
        ),
        (
            {"class_name": "GradClipNorm", "max_norm": -1.0},
            ValueError,
            r"max_norm must be a finite number > 0",
        ),
        (
            {"class_name": "GradClipNorm", "max_norm": 0},
            ValueError,
            r"max_norm must be a finite number > 0",
        ),
        (
            {"class_name": "GradClipValue", "max_delta": float("inf")},
            ValueError,
            r"max_delta must be a finite number > 0",
        ),
        (
            {"class_name": "GradClipValue", "max_delta": 1.0, "before_optimizer": "no"},
            TypeError,
            r"before_optimizer must be true or false",
        ),
        # jax_trainer's silent misspelling: a clear error here
        (
            {"class_name": "GradClipNorm", "max_nrom": 1.0},
            ValueError,
            r"unknown key 'max_nrom' at optimizer.transforms\[0\] \(GradClipNorm\)\. Did you mean 'max_norm'",
        ),
        ({"class_name": "GradClipNorm"}, ValueError, r"missing required key max_norm"),
        (
            {"class_name": "GradClip", "max_norm": 1.0},
            KeyError,
            r"unknown transforms name 'GradClip'.*GradClipNorm, GradClipValue, WeightDecay",
        ),
        ({"max_norm": 1.0}, ValueError, r"optimizer.transforms\[0\] has no class_name"),
        (1.0, TypeError, r"optimizer.transforms\[0\] must be a section"),
    ],
)
def test_bad_transform_sections(section, error, match):
    with pytest.raises(error, match=match):
        build_transforms([section])


def test_bad_transforms_values():
    with pytest.raises(
        TypeError, match=r"optimizer.transforms must be a list of transform sections"
    ):
        build_transforms(5)
    with pytest.raises(TypeError, match=r"received: one section"):
        build_transforms({"class_name": "GradClipNorm", "max_norm": 1.0})
    with pytest.raises(ValueError, match=r"optimizer.transforms.clip \(GradClipNorm\)"):
        build_transforms({"clip": {"class_name": "GradClipNorm", "max_nrom": 1.0}})


def test_decoupled_decay_needs_the_learning_rate():
    with pytest.raises(ValueError, match=r"needs the current learning rate"):
        WeightDecay(value=0.1, before_optimizer=False).make()
    assert isinstance(WeightDecay(value=0.1).make(), optax.GradientTransformation)
    # an optimizer that does not inject its rate cannot run a decoupled decay
    with pytest.raises(ValueError, match=r"log_learning_rate: true"):
        build_optimizer({"class_name": "SGD", "log_learning_rate": False, "learning_rate": {
                         "class_name": "Linear", "init_value": 0.1, "end_value": 0.0, "steps": 10},
                         "transforms": [{"class_name": "WeightDecay", "value": 0.1, "before_optimizer": False}]})


def test_a_registered_transform_must_return_a_transform(monkeypatch):
    def Scale(*, factor: float = 2.0):  # noqa: N802
        return optax.scale(factor)

    monkeypatch.setitem(TRANSFORMS._items, "Scale", Scale)
    with pytest.raises(
        TypeError,
        match=r"the transform 'Scale' at optimizer.transforms\[0\] did not return a gyre.config.Transform",
    ):
        build_transforms([{"class_name": "Scale"}])

    def Scaled(*, factor: float = 2.0, before_optimizer: bool = False):  # noqa: N802
        return Transform("Scaled", before_optimizer, lambda lr: optax.scale(factor))

    monkeypatch.setitem(TRANSFORMS._items, "Scaled", Scaled)
    assert sgd_step({"w": jnp.ones(1)}, {"class_name": "Scaled", "factor": 3.0}) == {"w": [-1.5]}

"""Framework support: flax linen, flax nnx and equinox models behind one pure ``apply``, and
:func:`create_flax_state`, a state whose steps need no code. ``losses`` and ``metrics`` are
shaped like jax_metrics' namespaces (``import gyre.frameworks as jm``).

Example:
    >>> import flax.linen as nn, gyre, jax.numpy as jnp, optax
    >>> state = gyre.create_flax_state(nn.Dense(3), inputs=jnp.zeros((1, 4)), tx=optax.adam(1e-3),
    ...     losses={"loss": optax.softmax_cross_entropy_with_integer_labels})
    >>> state.adapter.framework
    'linen'
"""

from gyre.frameworks import losses as losses
from gyre.frameworks import metrics as metrics
from gyre.frameworks._adapters import STEP_COLLECTIONS as STEP_COLLECTIONS
from gyre.frameworks._adapters import Adapter as Adapter
from gyre.frameworks._adapters import EquinoxAdapter as EquinoxAdapter
from gyre.frameworks._adapters import LinenAdapter as LinenAdapter
from gyre.frameworks._adapters import NnxAdapter as NnxAdapter
from gyre.frameworks._adapters import adapt as adapt
from gyre.frameworks._adapters import framework_of as framework_of
from gyre.frameworks._calling import KEYWORDS as KEYWORDS
from gyre.frameworks._calling import KeySeq as KeySeq
from gyre.frameworks._flax_state import FlaxState as FlaxState
from gyre.frameworks._flax_state import create_flax_state as create_flax_state
from gyre.frameworks._flax_state import unpack_batch as unpack_batch
from gyre.frameworks.losses import Crossentropy as Crossentropy
from gyre.frameworks.losses import MeanSquaredError as MeanSquaredError
from gyre.frameworks.metrics import Accuracy as Accuracy
from gyre.frameworks.metrics import Mean as Mean
from gyre.frameworks.metrics import Metrics as Metrics

__all__ = [
    "KEYWORDS",
    "STEP_COLLECTIONS",
    "Accuracy",
    "Adapter",
    "Crossentropy",
    "EquinoxAdapter",
    "FlaxState",
    "KeySeq",
    "LinenAdapter",
    "Mean",
    "MeanSquaredError",
    "Metrics",
    "NnxAdapter",
    "adapt",
    "create_flax_state",
    "framework_of",
    "losses",
    "metrics",
    "unpack_batch",
]

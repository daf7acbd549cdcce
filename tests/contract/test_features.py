"""What each backend declares agrees with what it does, and docs/backends.md says it."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path

import pytest

from queuey_core.backends.features import CAPABILITIES
from queuey_core.backends.features import Features
from queuey_core.backends.features import declared_flags
from queuey_core.backends.features import feature_table
from queuey_core.backends.features import features_of
from queuey_core.backends.features import supports
from queuey_core.backends.open import OPENERS
from queuey_core.results.setup import results_url
from queuey_core.settings import Settings
from tests.backend_kinds import BACKENDS
from tests.backend_kinds import BackendKind

DOCS = Path(__file__).parents[2] / "docs" / "backends.md"

#: A broker URL of each backend a user can name in ``[broker] url``.
URLS = {"sqlite": "sqlite:////tmp/features.db", "rabbitmq": "amqp://guest:guest@127.0.0.1/"}


@pytest.mark.parametrize("kind", BACKENDS, ids=lambda k: k.name)
def test_every_backend_declares_its_features(kind: BackendKind) -> None:
    declared = features_of(kind.backend)
    assert isinstance(declared, Features)
    assert set(declared_flags()) <= {f for f in dir(declared) if not f.startswith("_")}


def members(capability: type) -> set[str]:
    """The public methods and properties a capability Protocol asks for."""
    return {name for name in vars(capability) if not name.startswith("_")}


@pytest.mark.parametrize("kind", BACKENDS, ids=lambda k: k.name)
def test_a_backend_supports_a_capability_exactly_when_it_implements_it(kind: BackendKind) -> None:
    for name, capability in CAPABILITIES.items():
        implemented = all(
            hasattr(kind.backend, member)
            and getattr(kind.backend, member) is not getattr(capability, member)
            for member in members(capability)
        )
        assert supports(kind.backend, name) == implemented, (
            f"{kind.name}: {capability.__name__} is declared exactly when its methods are"
        )


@pytest.mark.parametrize("kind", BACKENDS, ids=lambda k: k.name)
def test_across_processes_is_having_a_broker_url(kind: BackendKind) -> None:
    package = kind.backend.__module__.rsplit(".", 1)[0]
    openable = any(opener.rsplit(".", 1)[0] == package for opener in OPENERS.values())
    assert kind.supports("across_processes") == openable, (
        "another process reaches a backend only through the URL that opens it"
    )


@pytest.mark.parametrize("kind", BACKENDS, ids=lambda k: k.name)
def test_following_the_given_clock_is_taking_one(kind: BackendKind) -> None:
    takes_clock = "clock" in inspect.signature(kind.backend).parameters
    assert kind.supports("follows_given_clock") == takes_clock


@pytest.mark.parametrize("kind", BACKENDS, ids=lambda k: k.name)
def test_a_built_in_store_is_the_one_a_worker_records_to_without_results(
    kind: BackendKind,
) -> None:
    if kind.name not in URLS:
        assert not kind.supports("store_built_in"), "no URL, no worker of the CLI to record"
        return
    settings = Settings.model_validate({"broker": {"url": URLS[kind.name]}})
    assert kind.supports("store_built_in") == (results_url(settings) is not None)


@pytest.mark.parametrize("kind", BACKENDS, ids=lambda k: k.name)
def test_leases_are_options_of_the_backends_url(kind: BackendKind) -> None:
    # A backend package's URL options are its options.py (the embedded file's lease).
    options = kind.backend.__module__.rsplit(".", 1)[0] + ".options"
    lease = importlib.util.find_spec(options) is not None and hasattr(
        importlib.import_module(options), "DEFAULT_LEASE"
    )
    assert kind.supports("leases") == lease


def test_an_unknown_feature_is_an_error_not_a_no() -> None:
    with pytest.raises(KeyError, match="nosuch"):
        supports(BACKENDS[0].backend, "nosuch")


def test_the_docs_table_is_the_declarations() -> None:
    table = feature_table({kind.name: kind.backend for kind in BACKENDS})
    assert table in DOCS.read_text(), f"docs/backends.md must hold this table:\n{table}"

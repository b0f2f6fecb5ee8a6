"""A plugin's view of an audited session: every charge, release, info record and data access made through it is
attributed to the plugin (``Session.for_plugin``).

The view holds no state of its own beyond the plugin's name: budget, ledger, coverage and randomness stay in the
session, so two views of one session share one budget filter. The plugin is registered once, when the view is
made, and is listed (with its version) in the certificate. Releases are attributed through their charge: a charge
made through the view names the plugin, and so does every release the session records on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dpaudit.errors import InvalidParameter

if TYPE_CHECKING:
    import torch

    from dpaudit.coverage import CoverageState
    from dpaudit.data.catalog import DataSet
    from dpaudit.events import ExponentialEvent, LaplaceEvent, PrivacyEvent
    from dpaudit.mechanisms.randomness import RandomSource
    from dpaudit.sensitivity import Neighbouring, Sensitivity
    from dpaudit.session import AboveThresholdRounds, AuditedAboveThreshold, Charge, Session

#: the attribution of records the session makes on its own behalf; no plugin may take it
SESSION_ATTRIBUTION = "session"


def check_plugin_identity(name: object, version: object) -> tuple[str, str]:
    """Validate a plugin's name and version.

    Raises:
        InvalidParameter: an empty or non-string name or version, or the reserved name ``"session"``.
    """
    for what, value in (("plugin name", name), ("plugin version", version)):
        if not isinstance(value, str) or not value.strip():
            raise InvalidParameter(f"the {what} must be a non-empty string, got {value!r}")
    if name == SESSION_ATTRIBUTION:
        raise InvalidParameter(f"{SESSION_ATTRIBUTION!r} is the session's own attribution, not a plugin name")
    return name, version  # type: ignore[return-value]


class PluginSession:
    """The session as one plugin sees it (made by :meth:`dpaudit.session.Session.for_plugin`, never directly).

    Every method delegates to the session with ``plugin=`` this plugin's name; none accepts another attribution.
    """

    def __init__(self, session: Session, name: str, version: str) -> None:
        self._session = session
        self._name, self._version = check_plugin_identity(name, version)

    # --- identity and public state ----------------------------------------------------------------------------

    @property
    def plugin(self) -> str:
        """The plugin's name (the attribution of everything done through this view)."""
        return self._name

    @property
    def version(self) -> str:
        return self._version

    @property
    def name(self) -> str:
        """The session's name."""
        return self._session.name

    @property
    def protected(self) -> tuple[str, ...]:
        return self._session.protected

    @property
    def public(self) -> tuple[str, ...]:
        return self._session.public

    @property
    def neighbouring(self) -> Neighbouring:
        return self._session.neighbouring

    @property
    def rng(self) -> RandomSource:
        return self._session.rng

    @property
    def device(self) -> torch.device:
        return self._session.device

    @property
    def budget(self) -> tuple[float, float]:
        return self._session.budget

    def spent_epsilon(self) -> float:
        return self._session.spent_epsilon()

    def remaining_epsilon(self) -> float:
        return self._session.remaining_epsilon()

    # --- data -------------------------------------------------------------------------------------------------

    def data(self, name: str, **parameters: Any) -> DataSet:
        """A declared data set, its access recorded under this plugin (:func:`dpaudit.data.access.open_data`)."""
        return self._session.data(name, plugin=self._name, **parameters)

    # --- the audited path -------------------------------------------------------------------------------------

    def charge(self, event: PrivacyEvent, *, mechanism: str) -> Charge:
        return self._session.charge(event, plugin=self._name, mechanism=mechanism)

    def check_affordable(self, events: Sequence[PrivacyEvent]) -> float:
        return self._session.check_affordable(events)

    def holds(self, charge: Charge) -> bool:
        return self._session.holds(charge)

    def claim(self, charge: Charge) -> None:
        self._session.claim(charge)

    def start_claimed_run(self, charge: Charge) -> None:
        self._session.start_claimed_run(charge)

    def coverage(self, charge: Charge) -> CoverageState:
        return self._session.coverage(charge)

    def record_release(self, charge: Charge, output: Any) -> None:
        """Record a release on ``charge`` (attributed to the plugin that made the charge)."""
        self._session.record_release(charge, output)

    def record_info(self, body: Mapping[str, Any]) -> None:
        self._session.record_info(self._name, body)

    def log_public_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        self._session.log_public_metrics(metrics, step, plugin=self._name)

    def log_public_artifact(self, name: str, data: bytes) -> None:
        """Attach a file of public content to the session's MLflow run (:meth:`Session.log_public_artifact`)."""
        self._session.log_public_artifact(name, data, plugin=self._name)

    def log_confidential(self, values: Mapping[str, float], step: int = 0) -> None:
        self._session.log_confidential(values, step)

    @contextlib.contextmanager
    def trial(self, name: str, params: Mapping[str, Any] | None = None) -> Iterator[None]:
        """A nested MLflow run for one trial, with its (public) hyperparameters as params (:meth:`Session.trial`)."""
        with self._session.trial(name, params):
            yield

    # --- mechanisms -------------------------------------------------------------------------------------------

    def laplace(self, value: Any, sensitivity: float | Sensitivity, epsilon: float, **kwargs: Any) -> Any:
        return self._session.laplace(value, sensitivity, epsilon, plugin=self._name, **kwargs)

    def gaussian(self, value: Any, sensitivity: float | Sensitivity, epsilon: float, delta: float,
                 **kwargs: Any) -> Any:
        return self._session.gaussian(value, sensitivity, epsilon, delta, plugin=self._name, **kwargs)

    def exponential(self, scores: Sequence[float], sensitivity: float | Sensitivity, epsilon: float,
                    **kwargs: Any) -> int:
        return self._session.exponential(scores, sensitivity, epsilon, plugin=self._name, **kwargs)

    def randomized_response(self, bit: bool, epsilon: float, **kwargs: Any) -> bool:
        return self._session.randomized_response(bit, epsilon, plugin=self._name, **kwargs)

    def above_threshold(self, threshold: float, sensitivity: float | Sensitivity, epsilon: float,
                        **kwargs: Any) -> AuditedAboveThreshold:
        return self._session.above_threshold(threshold, sensitivity, epsilon, plugin=self._name, **kwargs)

    def above_threshold_rounds(self, sensitivity: float | Sensitivity, epsilon: float,
                               **kwargs: Any) -> AboveThresholdRounds:
        return self._session.above_threshold_rounds(sensitivity, epsilon, plugin=self._name, **kwargs)

    def repeat_and_select(self, base_event: PrivacyEvent, distribution: str, params: Mapping[str, float], *,
                          label: str = "") -> tuple[Charge, int]:
        return self._session.repeat_and_select(base_event, distribution, params, plugin=self._name, label=label)

    # --- events, calibrated, not charged (for check_affordable) -----------------------------------------------

    def laplace_event(self, sensitivity: float | Sensitivity, epsilon: float, **kwargs: Any) -> LaplaceEvent:
        return self._session.laplace_event(sensitivity, epsilon, **kwargs)

    def exponential_event(self, sensitivity: float | Sensitivity, epsilon: float, **kwargs: Any) -> ExponentialEvent:
        return self._session.exponential_event(sensitivity, epsilon, **kwargs)

    def above_threshold_rounds_event(self, sensitivity: float | Sensitivity, epsilon: float,
                                     **kwargs: Any) -> PrivacyEvent:
        return self._session.above_threshold_rounds_event(sensitivity, epsilon, **kwargs)

    # --- training the plugin's model (dpaudit/privacy_engine.py) ----------------------------------------------

    @property
    def accountant(self) -> Any:
        """The session's accountant (None in an adaptive session)."""
        return self._session.accountant

    def make_private(self, **kwargs: Any) -> tuple[Any, ...]:
        """:meth:`dpaudit.session.Session.make_private`, the charge and release attributed to the plugin."""
        from dpaudit.privacy_engine import PrivacyEngine

        return PrivacyEngine(self).make_private(**kwargs)

"""The confidential log: raw, NON-private values, kept in a separate and clearly marked MLflow experiment.

Debugging a private tuning run sometimes needs the true (unnoised) scores. Logging them into the main run would be
a leak that no certificate covers, so they go, only on request, into the experiment ``<experiment>.CONFIDENTIAL``,
tagged ``dpaudit.confidential=true`` and described as outside the differentially private release. Nothing in
dpaudit creates this experiment unless a :class:`ConfidentialLog` is constructed.
"""

from __future__ import annotations

import threading
import time

from mlflow.entities import Metric
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

from dpaudit.errors import InvalidParameter
from dpaudit.tracking.entities import check_metric_key, finite
from dpaudit.tracking.mirror import MirrorError, MlflowMirror, ensure_experiment

CONFIDENTIAL_SUFFIX = ".CONFIDENTIAL"
CONFIDENTIAL_TAG = "dpaudit.confidential"
DESCRIPTION = (
    "CONFIDENTIAL. The values in this experiment are NOT differentially private: they are raw, data-dependent "
    "values logged for debugging, outside the release and outside every dpaudit privacy certificate. "
    "Do not share, publish or export them."
)
_MARKS = {CONFIDENTIAL_TAG: "true", MLFLOW_RUN_NOTE: DESCRIPTION}


class ConfidentialLog:
    """Raw values, logged into the separate experiment ``<experiment>.CONFIDENTIAL`` (created here).

    Args:
        mirror: the mirror whose store (tracking URI, artifact location) is used.
        experiment: base experiment name; the mirror's experiment when omitted.

    Raises:
        MirrorError: MLflow cannot be reached or the confidential experiment is deleted.
    """

    def __init__(self, mirror: MlflowMirror, experiment: str | None = None) -> None:
        base = mirror.experiment if experiment is None else experiment
        if not isinstance(base, str) or not base.strip():
            raise InvalidParameter(f"experiment must be a non-empty string, got {experiment!r}")
        self.experiment_name = base + CONFIDENTIAL_SUFFIX
        self._client = mirror.client
        self.experiment_id = ensure_experiment(self._client, self.experiment_name, mirror.artifact_location, _MARKS)
        self._runs: dict[str, str] = {}
        self._lock = threading.Lock()

    def log(self, run_name: str, values: dict[str, float], step: int) -> None:
        """Log ``values`` at ``step`` into the confidential run ``run_name`` (created on first use), immediately.

        Raises:
            InvalidParameter: empty run name or values, a bad metric name, a non-finite value, or a bad step.
            MirrorError: MLflow could not be written.
        """
        if not isinstance(run_name, str) or not run_name.strip():
            raise InvalidParameter(f"run name must be a non-empty string, got {run_name!r}")
        if not isinstance(values, dict) or not values:
            raise InvalidParameter("values must be a non-empty dict of name -> number")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise InvalidParameter(f"step must be a whole number >= 0, got {step!r}")
        now = int(time.time() * 1000)
        metrics = [Metric(check_metric_key(k), finite(k, v), now, step) for k, v in values.items()]
        with self._lock:
            try:
                if run_name not in self._runs:
                    run = self._client.create_run(self.experiment_id, run_name=run_name, tags=_MARKS)
                    self._runs[run_name] = run.info.run_id
                self._client.log_batch(self._runs[run_name], metrics=metrics)
            except Exception as exc:
                raise MirrorError(f"cannot write the confidential log {self.experiment_name!r}: {exc}") from exc

    def close(self) -> None:
        """Mark every confidential run this log created as finished.

        Raises:
            MirrorError: MLflow could not be written.
        """
        with self._lock:
            try:
                for run_id in self._runs.values():
                    self._client.set_terminated(run_id, status="FINISHED")
            except Exception as exc:
                raise MirrorError(f"cannot close the confidential log {self.experiment_name!r}: {exc}") from exc
            self._runs.clear()

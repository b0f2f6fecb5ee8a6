"""The ``dp-gp`` plugin: DP GP regression at public test points, by the standard or the cloaking mechanism (Smith,
Álvarez, Zwiessele & Lawrence 2018; docs/plugins/dp-gp.md).

The configured catalog set's target is protected; its ``inputs`` columns and the test points are public (the
certificate lists the conditional assumption ``dp-gp-public-inputs``, and ``dataset-size-public``: n is the number
of public inputs). The whole release is planned on public data first, the budget is asked, and only then is the
posterior mean computed and released through ``view.gaussian`` (:mod:`dpaudit_plugins.dp_gp.release`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit.data.access import require_data
from dpaudit.errors import InvalidParameter
from dpaudit_plugins.dp_gp.binning import release_and_predict
from dpaudit_plugins.dp_gp.config import DpGpConfig
from dpaudit_plugins.dp_gp.release import plan, release

if TYPE_CHECKING:
    from dpaudit.session import Session

PLUGIN_NAME = "dp-gp"
VERSION = "0.1.0"


def run(session: Session, config: Mapping[str, Any]) -> dict[str, Any]:
    """Plan, charge and release the configured GP predictions; return the public results.

    Raises:
        PluginError: the session does not protect the configured data set.
        InvalidParameter: a bad configuration, an unknown input column, a set without a target.
        BudgetExceeded: the release does not fit the budget (checked before the posterior mean is computed).
    """
    cfg = DpGpConfig.from_mapping(config)
    view = session.for_plugin(PLUGIN_NAME, VERSION)
    require_data(view, protected=(cfg.data,))
    data = view.data(cfg.data)
    missing = [c for c in cfg.inputs if c not in data.feature_names]
    if missing or data.y is None:
        raise InvalidParameter(f"{cfg.data} has no input columns {missing} or no target (columns: "
                               f"{list(data.feature_names)})")
    X = np.asarray(data.X[:, [data.feature_names.index(c) for c in cfg.inputs]], dtype=np.float64)
    if cfg.binning is not None:
        out = release_and_predict(view, cfg.binning, X, data.y, cfg.rule(), np.array(cfg.test_points),
                                  cfg.lengthscale, cfg.variance, cfg.noise, cfg.prior_mean, cfg.epsilon, cfg.delta)
        kind = out.pop("guarantee_kind")
        return {**out, "data": cfg.data, "inputs": list(cfg.inputs), "output_rule": cfg.rule().formula_inputs(),
                "guarantee": f"{kind} for the outputs of {cfg.data} under replace-one neighbours, CONDITIONAL on the "
                "inputs and test points being public (dp-gp-public-inputs)"}
    planned = plan(cfg.method, cfg.model(X), cfg.rule(), np.array(cfg.test_points), view.neighbouring,
                   **cfg.plan_options())
    view.record_info({"dp_gp": {"method": cfg.method, "data": cfg.data, "inputs": list(cfg.inputs),
                                "output_rule": cfg.rule().formula_inputs(), "covariance": planned.summary,
                                "sensitivity": planned.sensitivity.value}})
    out = release(view, planned, data.y, cfg.epsilon, cfg.delta)
    return {**out.to_public(), "data": cfg.data, "inputs": list(cfg.inputs), "output_rule": cfg.rule().formula_inputs(),
            "guarantee": f"({cfg.epsilon:g}, {cfg.delta:g})-DP for the outputs of {cfg.data} under replace-one "
            "neighbours, CONDITIONAL on the inputs and test points being public (dp-gp-public-inputs)"}

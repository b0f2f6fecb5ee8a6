"""mean-column: the mean of one [0, 1]-scaled column of a protected data set, by the Laplace mechanism."""

import numpy as np

from dpaudit.registry import Plugin
from dpaudit.sensitivity import from_formula

NAME, VERSION, DATA = "mean-column", "1.0", "adult-train"


def run(session, config):
    view = session.for_plugin(NAME, VERSION)  # every charge, release and data access below names this plugin
    data = view.data(DATA, rows=config["rows"])  # the only way to the protected records; the access is recorded
    column = np.clip(data.X[:, data.feature_names.index(config["column"])], 0.0, 1.0)  # public bounds [0, 1]
    half = config["epsilon"] / 2  # the size is private too (add/remove): a noisy sum over a noisy count
    total = view.laplace(float(column.sum()), from_formula("bounded_sum", view.neighbouring, lower=0.0, upper=1.0),
                         half, label=f"sum of {config['column']}, clipped to [0, 1]")
    count = view.laplace(float(len(column)), from_formula("count", view.neighbouring), half, label="record count")
    return {"column": config["column"], "mean": float(total) / max(float(count), 1.0)}


PLUGIN = Plugin(name=NAME, version=VERSION, summary="mean of one [0, 1]-scaled column, by the Laplace mechanism",
                citation="Dwork & Roth 2014, Sec. 3.3 (the Laplace mechanism)", event_kinds=("laplace",), run=run,
                smoke_config={"column": "age", "epsilon": 1.0, "rows": 2000}, protected=(DATA,))

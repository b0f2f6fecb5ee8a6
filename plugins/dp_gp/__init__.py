"""``dp-gp``: differentially private GP regression at public test points, by the standard (Hall et al. 2013) or the
cloaking mechanism (Smith, Álvarez, Zwiessele & Lawrence, AISTATS 2018), with sensitivities ``dpaudit verify``
recomputes (docs/plugins/dp-gp.md).

Exposes :data:`PLUGIN` (entry point ``dpaudit.plugins: dp-gp``) and the pieces it is built from: the public model and
output rule, release plans and the release, the cloaking solver, and the formulas.
"""

from dpaudit.registry import Plugin
from dpaudit_plugins.dp_gp.cloaking import CloakingDesign, DesignResult, d_optimal_design, solve_cloaking
from dpaudit_plugins.dp_gp.config import DEFAULT_DATA, DpGpConfig, check_cli_config
from dpaudit_plugins.dp_gp.formulas import (
    CLOAKING_FORMULA,
    STANDARD_FORMULA,
    cloaking_matrix,
    eq_kernel,
    paper_b_bound,
    paper_c,
)
from dpaudit_plugins.dp_gp.plugin import PLUGIN_NAME, VERSION, run
from dpaudit_plugins.dp_gp.release import (
    ASSUMPTIONS,
    CLOAKING,
    PUBLIC_INPUTS,
    STANDARD,
    GpModel,
    OutputRule,
    Release,
    ReleasePlan,
    plan,
    plan_cloaking,
    plan_standard,
    release,
)

SMOKE_CONFIG = {"method": "cloaking", "epsilon": 1.0, "delta": 1e-6, "data": DEFAULT_DATA, "inputs": ["bmi"],
                "test_grid": {"lower": [18.0], "upper": [42.0], "points": 25}, "lengthscale": 4.0, "variance": 1.0,
                "noise": 0.5, "clip_lower": 25.0, "clip_upper": 350.0, "centre": 150.0, "scale": 80.0}

PLUGIN = Plugin(
    name=PLUGIN_NAME,
    version=VERSION,
    summary="DP GP regression at public test points: the cloaking or the standard mechanism, a whitened discrete "
    "Gaussian release whose sensitivity verify recomputes from the public inputs",
    citation="Smith, Álvarez, Zwiessele & Lawrence 2018 (Differentially private regression with Gaussian "
    "processes, AISTATS), Sec. 2-3; Hall, Rinaldo & Wasserman 2013, Prop. 3; Todd & Yildirim 2007 (the cloaking "
    "solver)",
    event_kinds=("gaussian", "laplace"),
    run=run,
    smoke_config=SMOKE_CONFIG,
    protected=(DEFAULT_DATA,),
    dataset_size_public=True,  # X is public, so n is (assumption dataset-size-public)
    check_config=check_cli_config,  # `dpaudit run` refuses a bad config (or another data set) before opening a run
)

__all__ = [
    "ASSUMPTIONS",
    "CLOAKING",
    "CLOAKING_FORMULA",
    "PLUGIN",
    "PUBLIC_INPUTS",
    "SMOKE_CONFIG",
    "STANDARD",
    "STANDARD_FORMULA",
    "CloakingDesign",
    "DesignResult",
    "DpGpConfig",
    "GpModel",
    "OutputRule",
    "Release",
    "ReleasePlan",
    "check_cli_config",
    "cloaking_matrix",
    "d_optimal_design",
    "eq_kernel",
    "paper_b_bound",
    "paper_c",
    "plan",
    "plan_cloaking",
    "plan_standard",
    "release",
    "run",
    "solve_cloaking",
]

"""``randtune`` over the user's trainer and objective (``dpaudit.tune(method="randtune", ...)``).

The same selection as :func:`dpaudit_plugins.randtune.plugin.tune` (Liu & Talwar 2019; Papernot & Steinke 2022):
one repeat-and-select charged on the settings' envelope (:func:`~dpaudit_plugins.randtune.base_event.dominating_event`)
before K is drawn; each repetition trains a setting drawn uniformly from the public list through
``trial.make_private`` under that charge (nothing of its own is written); the best repetition by the user's
objective on public validation data is released.

Independence. The theorems bound the best of K *independent* runs of one algorithm: a repetition must not
continue an earlier one (a warm start from an earlier repetition's weights makes the selected model the
composition of several repetitions' DP-SGD runs, which the charge of one run per repetition does not cover). Each
repetition gets its own :class:`~dpaudit.tuning.user.CoveredView`, which pays for one DP-SGD run only (a second
``PrivacyEngine(trial.view)`` or ``make_private`` is refused), and the run's
:class:`~dpaudit.tuning.user.TrialHistory` refuses a repetition that starts from, holds or trains a tensor an
earlier repetition trained or holds (checked at ``trial.make_private`` and again at the repetition's first
optimizer step, so weights loaded right after ``make_private`` are refused too); the selected model is checked
unchanged since its release. What cannot be checked (state kept elsewhere by ``train``) is the conditional
assumption ``independent-repetitions`` (:data:`~dpaudit.tuning.user.INDEPENDENT_REPETITIONS`), listed with the
charge.

Sensitivity of the selection: none is needed. Papernot & Steinke's Thms. 2 and 6 hold for the best of K outputs under
*any* fixed total order on the outputs, so the score may be any function of the model and public data; its declared
range is not used (NaN ranks last; ties go to the higher setting index, then the larger model digest).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch import nn

from dpaudit.session import Session
from dpaudit.tuning.user import (
    INDEPENDENT_REPETITIONS,
    CoveredView,
    Objective,
    Setting,
    Trial,
    TrialHistory,
    check_released,
    run_trial,
    setting_event,
)
from dpaudit_plugins.randtune.base_event import dominating_event
from dpaudit_plugins.randtune.plugin import PLUGIN_NAME, VERSION, best_of_repetitions


def tune_user(session: Session, settings: Sequence[Setting], train: Callable[[Trial], nn.Module],
              objective: Objective, *, dataset: Any, distribution: str, parameters: Mapping[str, float],
              grad_sample_mode: str, assumptions: tuple[Any, ...]) -> dict[str, Any]:
    """Random-repetition selection over ``settings`` (module docstring).

    Returns:
        ``{"public": {...}, "model": the selected module or None}``; the public part holds the selected setting,
        its score and digest, the charge; never K or another repetition's score.

    Raises:
        PluginError: a repetition that continues an earlier one (:class:`~dpaudit.tuning.user.TrialHistory`).
        UncoveredRelease: a second DP-SGD run in one repetition; a selected model changed after its release.
    """
    view = session.for_plugin(PLUGIN_NAME, VERSION)
    n = len(dataset)
    assumptions = (*assumptions, INDEPENDENT_REPETITIONS)
    mechanism = f"DP-SGD ({grad_sample_mode}) user model"
    base = dominating_event([setting_event(s.params, n, mechanism, assumptions) for s in settings],
                            f"one repetition: {mechanism}, a setting drawn uniformly from the list")
    view.record_info({"distribution": distribution, "parameters": dict(parameters), "objective": objective.to_dict(),
                      "base_event": {"sample_rate": base.sample_rate, "noise_multiplier": base.noise_multiplier,
                                     "steps": base.steps},
                      "selection": "best objective on public validation data; ties by the higher setting index, "
                                   "then the larger digest"})
    charge, repetitions = view.repeat_and_select(base, distribution, parameters,
                                                 label="best of K repetitions by the user's public objective")
    history = TrialHistory("repetition", shared=False)

    def repetition(index: int) -> tuple[float, str, Any]:
        covered = CoveredView(session, PLUGIN_NAME, VERSION, charge)  # one per repetition: it pays for one run
        trial = Trial(params=settings[index].params, dataset=dataset, device=session.device, mode="covered",
                      view=covered, grad_sample_mode=grad_sample_mode, history=history)
        model, digest = run_trial(train, trial)
        value = objective.value(model)
        return objective.key(value), digest or "", (value, model)

    best = best_of_repetitions(view, len(settings), repetitions, repetition)
    public: dict[str, Any] = {"method": PLUGIN_NAME, "distribution": distribution, "parameters": dict(parameters),
                              "charge_seq": charge.seq}
    if best is None:
        view.record_release(charge, {"selected": None})
        return {"public": {**public, "selected": None, "score": None, "model_sha256": None}, "model": None}
    index, digest, (value, model) = best
    check_released(model, digest)
    view.record_release(charge, {"setting": settings[index].to_dict(), "model_sha256": digest, "score": value})
    return {"public": {**public, "selected": settings[index].to_dict(), "score": value, "model_sha256": digest},
            "model": model}

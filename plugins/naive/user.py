"""``naive`` over the user's trainer and objective (``dpaudit.tune(method="naive", ...)``).

The baseline of Ding et al. (Table 1 "Naive"), as :func:`dpaudit_plugins.naive.plugin.tune`: every setting is
trained through ``trial.make_private``, each charging its own DP-SGD event (the whole list is checked affordable
before the first training), and every model is released (its digest, recorded by the engine). Selecting the best by
the user's objective on public validation data is post-processing of released models, so it costs nothing more and
needs no sensitivity: the declared range is not used (NaN ranks last; ties go to the lower setting index). The
total is the composition of the settings' events, bounded by the session's accountant in the certificate.

Warm starts are sound here: a setting's run may start from an earlier setting's model, which was charged and
released before it (adaptive composition; the selection is post-processing), so the trials need not be
independent and no :class:`~dpaudit.tuning.user.TrialHistory` is kept. Every extra DP-SGD run ``train`` makes
through the view (another ``PrivacyEngine(trial.view)``) is charged on its own. The selected model is checked
unchanged since its release (a later setting training a module it shares is refused).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from dpaudit.session import Session
from dpaudit.tuning.user import Objective, Setting, Trial, check_released, run_trial, setting_event
from dpaudit_plugins.naive.plugin import PLUGIN_NAME, VERSION


def tune_user(session: Session, settings: Sequence[Setting], train: Callable[[Trial], nn.Module],
              objective: Objective, *, dataset: Any, grad_sample_mode: str,
              assumptions: tuple[Any, ...]) -> dict[str, Any]:
    """Train every setting, select the best by the objective (module docstring).

    Raises:
        BudgetExceeded: the session cannot pay for every setting (nothing is trained).
        UncoveredRelease: the selected model changed after its release.
    """
    view = session.for_plugin(PLUGIN_NAME, VERSION)
    n = len(dataset)
    view.check_affordable([setting_event(s.params, n, f"setting {s.index}", assumptions) for s in settings])
    best: tuple[float, int, str, float, nn.Module] | None = None
    scores = []
    for setting in settings:
        # one nested MLflow run per setting (public: every setting is trained, so the count reveals nothing)
        with view.trial(f"setting {setting.index}", params=setting.params):
            trial = Trial(params=setting.params, dataset=dataset, device=session.device, mode="charged", view=view,
                          grad_sample_mode=grad_sample_mode, assumptions=assumptions)
            model, digest = run_trial(train, trial)
            value = objective.value(model)
            scores.append(value)
            view.log_public_metrics({"score": value}, step=setting.index)
        if best is None or objective.key(value) > best[0]:
            best = (objective.key(value), setting.index, digest or "", value, model)
    assert best is not None
    _, index, digest, value, model = best
    check_released(model, digest)
    public = {"method": PLUGIN_NAME, "selected": settings[index].to_dict(), "score": value, "model_sha256": digest,
              "scores": scores, "charges": len(settings)}
    view.record_info({k: public[k] for k in ("selected", "score", "model_sha256", "scores")})
    return {"public": public, "model": model}

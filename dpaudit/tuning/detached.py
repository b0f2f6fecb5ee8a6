"""One candidate's DP-SGD training in a parallel worker, as the tuning plugins (``naive``, ``randtune``) run it.

The driver charges (or covers) the training and draws its seeds from the session's randomness
(:func:`~dpaudit.parallel.predraw`); the worker trains behind a :class:`~dpaudit.parallel.DetachedView`, which
replays exactly those seeds and can write nothing, and scores the model on the public validation half. The result
is a pure function of its inputs, so it is the same in the driver (one worker), a process pool or Ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dpaudit.parallel import DetachedView, ReplaySeeds
from dpaudit.tuning.candidates import Candidate, accuracy, train_candidate

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit.sensitivity import Neighbouring
    from dpaudit.session import Charge
    from dpaudit.tuning.data import TuningData
    from dpaudit.tuning.options import ModelOptions
    from dpaudit.tuning.training import TrainResult


@dataclass(frozen=True)
class WorkerInputs:
    """What every training of one tuning run shares, sent to each worker once: the data, the public model options,
    and the session facts the trainer reads (device, neighbouring relation, whether its randomness is for
    release)."""

    data: TuningData
    options: ModelOptions
    device: str
    neighbouring: Neighbouring
    for_release: bool

    @classmethod
    def of(cls, view: PluginSession, data: TuningData, options: ModelOptions) -> WorkerInputs:
        """The inputs for trainings in ``view``'s session."""
        return cls(data=data, options=options, device=str(view.device), neighbouring=view.neighbouring,
                   for_release=view.rng.for_release)


def train_replayed(shared: WorkerInputs, candidate: Candidate, seeds: tuple[tuple[int, int], ...], charge: Charge,
                   label: str, *, claimed: bool) -> tuple[TrainResult, float]:
    """Train ``candidate`` under ``charge`` with the driver's ``seeds`` behind a view that can write nothing, and
    score it on the public validation half.

    Args:
        seeds: exactly the seeds :func:`~dpaudit.tuning.candidates.train_candidate` draws
            (:data:`~dpaudit.tuning.candidates.SEEDS_PER_TRAINING`); drawing another fails.
        claimed: ``charge`` is this training's own event, charged and claimed by the driver, which writes the
            returned :attr:`~dpaudit.tuning.training.TrainResult.pending` record; False for a covering
            (repeat-and-select) charge.

    Returns:
        (the training result, accuracy on the public validation half).
    """
    view = DetachedView(ReplaySeeds(seeds, shared.for_release), shared.device, shared.neighbouring, (charge.seq,))
    result = train_candidate(view, candidate, shared.data, shared.options,  # type: ignore[arg-type]
                             label=label, charge=charge, claimed=claimed)
    view.rng.check_exhausted()
    return result, accuracy(result, shared.data.X_val, shared.data.y_val, view)  # type: ignore[arg-type]

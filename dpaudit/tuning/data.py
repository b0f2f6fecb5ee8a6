"""The tuning plugins' data, obtained through the session (``Session.data``) after the one check that the session
declares what they read (:func:`dpaudit.data.access.require_data`).

Selection uses public data only: the public Adult test split is cut in two fixed halves, the first for validation
(scoring candidates) and the second as the final test set, so the score of a DP-trained model is a post-processing
of that model and costs no privacy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dpaudit.data.access import require_data
from dpaudit.data.catalog import FINAL_TEST_NAME, TRAIN_NAME, VALIDATION_NAME

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession

TUNING_PROTECTED = (TRAIN_NAME,)
"""What a tuning plugin protects: the Adult training set."""

TUNING_PUBLIC = (VALIDATION_NAME, FINAL_TEST_NAME)
"""What a tuning plugin reads as public: the two halves of the Adult test split."""


@dataclass(frozen=True)
class TuningData:
    """The private training set (with its stable record ids) and the two public halves of the evaluation split."""

    X_train: np.ndarray
    y_train: np.ndarray
    record_ids: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def tuning_data(session: PluginSession, train_rows: int | None, test_rows: int | None) -> TuningData:
    """Adult through the session: the protected training set and the public validation and final-test halves.

    Raises:
        PluginError: the session does not declare them (:func:`require_data`).
        InvalidParameter: a bad row limit, or fewer than 2 public records.
    """
    require_data(session, protected=TUNING_PROTECTED, public=TUNING_PUBLIC)
    train = session.data(TRAIN_NAME, rows=train_rows)
    validation = session.data(VALIDATION_NAME, rows=test_rows)
    final_test = session.data(FINAL_TEST_NAME, rows=test_rows)
    assert train.record_ids is not None  # the training set has ids
    return TuningData(train.X, train.y, train.record_ids, validation.X, validation.y, final_test.X, final_test.y)

"""The mechanisms: one module per mechanism, over a shared layer of exact samplers.

Each mechanism module (:mod:`~dpaudit.mechanisms.laplace`, :mod:`~dpaudit.mechanisms.gaussian`,
:mod:`~dpaudit.mechanisms.exponential`, :mod:`~dpaudit.mechanisms.above_threshold`,
:mod:`~dpaudit.mechanisms.randomized_response`, :mod:`~dpaudit.mechanisms.subsampled_gaussian`,
:mod:`~dpaudit.mechanisms.repeat_and_select`) holds what its event means: how the event is built and calibrated, its
privacy map (a pure function of the event, the one that calibration, the accountants, the budget filter and
``dpaudit verify`` all evaluate), what one charge covers, and its release through the exact samplers
(:mod:`~dpaudit.mechanisms.discrete`, :mod:`~dpaudit.mechanisms.randomness`; grid rounding in
:mod:`~dpaudit.mechanisms.grid`). :mod:`dpaudit.accounting` imports only the privacy maps. What is checked of a
private input before the charge, and the public rule for a NaN or infinity inside the data, are in
:mod:`~dpaudit.mechanisms.private_inputs`.
"""

import importlib
import pkgutil

# Every module of this package is imported here, so that each mechanism module's register_mechanism call has run
# before anything reads the table (dpaudit.mechanisms.registry): a new mechanism is one new module plus its event.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

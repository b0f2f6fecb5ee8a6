"""The mechanisms: one module per mechanism, over a shared layer of exact samplers.

Each mechanism module (:mod:`~dpaudit.mechanisms.laplace`, :mod:`~dpaudit.mechanisms.gaussian`,
:mod:`~dpaudit.mechanisms.exponential`, :mod:`~dpaudit.mechanisms.above_threshold`,
:mod:`~dpaudit.mechanisms.randomized_response`, :mod:`~dpaudit.mechanisms.subsampled_gaussian`,
:mod:`~dpaudit.mechanisms.repeat_and_select`) holds what its event means: how the event is built and calibrated, its
privacy map (a pure function of the event, the one that calibration, the accountants, the budget filter and
``dpaudit verify`` all evaluate), what one charge covers, and its release through the exact samplers
(:mod:`~dpaudit.mechanisms.discrete`, :mod:`~dpaudit.mechanisms.randomness`; grid rounding in
:mod:`~dpaudit.mechanisms.grid`). :mod:`dpaudit.accounting` imports only the privacy maps.
"""

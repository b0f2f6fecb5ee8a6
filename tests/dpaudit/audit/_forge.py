"""Forgeries shared by the audit tests: an audit record's evidence replaced (the rest of the ledger kept), and a
DP-SGD optimizer that adds less noise than it charges."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from dpaudit.audit.evidence import audit_problems


def with_evidence(records: list, seq: int, evidence: dict) -> list:
    """``records`` with the audit record numbered ``seq`` stating ``evidence`` instead of its own."""
    at = next(i for i, r in enumerate(records) if r.seq == seq)
    body = {**records[at].body, "info": {"audit": evidence}}
    return [*records[:at], dataclasses.replace(records[at], body=body), *records[at + 1:]]


def forger(records: list, charges: list, seq: int, evidence: dict) -> Callable[..., list[str]]:
    """``forged(**changes)``: the audit problems of the ledger whose record ``seq`` states ``evidence`` changed."""
    def forged(**changes) -> list[str]:
        return audit_problems(with_evidence(records, seq, {**evidence, **changes}), charges)[0]
    return forged


def add_less_noise(monkeypatch, divisor: float) -> None:
    """DP-SGD that charges σ but adds σ / ``divisor`` (the optimizer's σ restored after each step)."""
    from dpaudit.tuning import training  # deferred: it loads torch and Opacus

    honest_noise = training.CappedDPOptimizer.add_noise

    def add_little_noise(self):
        sigma = self.noise_multiplier
        self.noise_multiplier = sigma / divisor
        try:
            honest_noise(self)
        finally:
            self.noise_multiplier = sigma

    monkeypatch.setattr(training.CappedDPOptimizer, "add_noise", add_little_noise)

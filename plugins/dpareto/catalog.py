"""The tasks ``dpareto`` can explore, by name: ``{"task": {"name": ..., ...}}`` in the plugin's configuration.

Each entry names a builder ``build(config: Mapping[str, Any]) -> Task`` (:class:`~dpaudit_plugins.dpareto.task.Task`)
as ``"module:function"`` inside this package, imported only when the task is asked for (a task's module may import
torch; the configuration check must not need it). A builder parses its own section of the configuration (the task's
keys, without ``name``), raises :class:`~dpaudit.errors.InvalidParameter` for a bad one, and reads no data: data are
read through the session view when a trial first needs them.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from dpaudit.errors import InvalidParameter
from dpaudit_plugins.dpareto.task import Task

TASKS: dict[str, str] = {
    "svt": "tasks_svt:build",
    "adult-logreg-sgd": "tasks_adult:build_logreg_sgd",
    "adult-logreg-adam": "tasks_adult:build_logreg_adam",
    "adult-svm-sgd": "tasks_adult:build_svm_sgd",
    "mnist-mlp-sgd": "tasks_mnist:build",
}
"""Registered task names → builder (module of this package : function)."""

MNIST_TRAIN_NAME, MNIST_TEST_NAME = "mnist-5000-train", "mnist-5000-test"
"""The MNIST task's data sets (:mod:`dpaudit.data.shipped`), named here so that the plugin declares them without
importing the task's module."""


def build_task(config: Mapping[str, Any]) -> Task:
    """The task the configuration's ``task`` section names, built from the rest of that section.

    Raises:
        InvalidParameter: not a mapping, an unknown name, or the builder's refusal.
    """
    if not isinstance(config, Mapping):
        raise InvalidParameter("the dpareto 'task' section must be a mapping with a 'name'")
    name = config.get("name")
    if name not in TASKS:
        raise InvalidParameter(f"unknown dpareto task {name!r}; known: {', '.join(sorted(TASKS))}")
    module, function = TASKS[name].split(":")
    builder = getattr(importlib.import_module(f"dpaudit_plugins.dpareto.{module}"), function)
    task = builder({k: v for k, v in config.items() if k != "name"})
    if not isinstance(task, Task):
        raise InvalidParameter(f"the builder of task {name!r} did not return a Task")
    return task

"""`edgeopt sweep --search optuna --trials N`: a multi-objective search instead of the grid.

For each device, an Optuna study with NSGA-II (optuna's multi-objective genetic sampler)
chooses the axes' values (model, format, scheme, recipe, prune, distill) to maximize the
candidate's quality and minimize its estimated latency, N trials per device, asked in
batches the size of the engine's workers. A choice that is not a candidate (a combination
the device refuses) is a failed trial and builds nothing; a choice already built (in
this sweep or an earlier one) is told its stored figures and builds nothing either.

    >>> search(tasks, trials=20, batch=2, seed=0, point_of=store.point, build=run_batch)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from edgeopt.errors import ConfigError
from edgeopt.sweep_engine import Task
from edgeopt.sweep_report import LOWER_IS_BETTER

AXIS_FIELDS = ("model", "format", "scheme", "recipe", "prune", "distill")


def _optuna():
    try:
        import optuna
    except ImportError:
        raise ConfigError("--search optuna needs the optuna package: pip install "
                          "'edgeopt[optuna]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _combination(task: Task) -> tuple:
    return tuple(task.config[name] for name in AXIS_FIELDS)


def _objectives(point: dict | None) -> list[float] | None:
    """(quality, latency) of a built point; None when it cannot be compared."""
    if point is None or point["status"] != "ok":
        return None
    f = point["figures"]
    if f.get("quality") is None or f.get("latency_ms") is None:
        return None
    quality = -f["quality"] if f["metric"] in LOWER_IS_BETTER else f["quality"]
    return [quality, f["latency_ms"]]


def _study(optuna, seed: int, batch: int):
    sampler = optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, batch))
    return optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)


def _search_device(optuna, group: list[Task], trials: int, batch: int, seed: int,
                   point_of: Callable[[str], dict | None],
                   build: Callable[[list[Task]], None]) -> None:
    index = {_combination(t): t for t in group}
    axes = {name: list(dict.fromkeys(c[i] for c in index))
            for i, name in enumerate(AXIS_FIELDS)}
    study = _study(optuna, seed, batch)
    asked_so_far = 0
    while asked_so_far < trials:
        asked = [study.ask() for _ in range(min(batch, trials - asked_so_far))]
        chosen = [index.get(tuple(trial.suggest_categorical(name, values)
                                  for name, values in axes.items())) for trial in asked]
        new = {t.key: t for t in chosen if t is not None and point_of(t.key) is None}
        if new:
            build(list(new.values()))
        for trial, task in zip(asked, chosen):
            values = _objectives(point_of(task.key)) if task is not None else None
            if values is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(trial, values)
        asked_so_far += len(asked)


def search(tasks: list[Task], trials: int, batch: int, seed: int,
           point_of: Callable[[str], dict | None], build: Callable[[list[Task]], None]) -> None:
    """Run `trials` trials per device; `build` runs a batch of tasks and stores their points."""
    optuna = _optuna()
    groups: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        groups[task.config["device"]].append(task)
    for group in groups.values():
        _search_device(optuna, group, trials, batch, seed, point_of, build)

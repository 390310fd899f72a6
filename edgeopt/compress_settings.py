"""What `edgeopt compress` and `edgeopt build --prune` are asked to do, checked.

Kept apart from edgeopt/compress.py (which imports the compression stage and numpy) so
that reading a config file, and so every command's start-up, stays light.

    >>> CompressSettings(prune=0.5).check()
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.choices import PruneCriterion, PrunePattern, values
from edgeopt.errors import ConfigError

PATTERNS = values(PrunePattern)
CRITERIA_NAMES = values(PruneCriterion)


@dataclass(frozen=True)
class CompressSettings:
    """What to do to the model; shared by `edgeopt compress` and `edgeopt build --prune`."""

    prune: float | None = None
    pattern: str = "structured"
    criterion: str = "l1"
    recipe: str | None = None
    distill: bool = False
    epochs: int = 20
    channel_multiple: int = 8  # pruned layers keep whole CPU/NPU channel tiles (see README)
    student: str | None = None  # a smaller Keras model to distill into, instead of pruning
    seed: int = 0

    def check(self) -> None:
        if self.student is not None:
            if self.prune is not None or self.recipe is not None or self.pattern != "structured":
                raise ConfigError("--student distills into your own smaller model: leave out "
                                  "--prune, --recipe, --2:4 and --unstructured")
            if self.epochs < 1:
                raise ConfigError(f"--epochs must be at least 1, got {self.epochs}")
            return
        if self.pattern not in PATTERNS:
            raise ConfigError(f"unknown pruning pattern '{self.pattern}' "
                              f"(choose from {', '.join(PATTERNS)})")
        if self.pattern == "2:4" and self.prune not in (None, 0.5):
            raise ConfigError("--2:4 removes exactly half of the weights; leave out --prune "
                              f"or give 0.5 (got {self.prune})")
        if self.pattern != "2:4" and self.prune is None and self.recipe is None:
            raise ConfigError("nothing to compress: give --prune R (a share in (0, 1)) or "
                              "--recipe FILE")
        if self.prune is not None and not 0 < self.prune < 1:
            raise ConfigError(f"--prune must be between 0 and 1 (exclusive), got {self.prune}")
        if self.recipe is not None and self.pattern != "structured":
            raise ConfigError("--recipe gives channel ratios per layer: structured pruning only")
        if self.epochs < 1:
            raise ConfigError(f"--epochs must be at least 1, got {self.epochs}")
        if self.channel_multiple < 1:
            raise ConfigError(f"--channel-multiple must be at least 1, got "
                              f"{self.channel_multiple}")
        if self.criterion not in CRITERIA_NAMES:
            raise ConfigError(f"unknown prune criterion '{self.criterion}' "
                              f"(choose from {', '.join(CRITERIA_NAMES)})")

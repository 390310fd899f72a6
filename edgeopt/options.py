"""Parsing helpers shared by the click commands."""

from __future__ import annotations

import click


def comma_floats(text: str | None) -> tuple[float, ...] | None:
    """`127.5,127.5,127.5` -> (127.5, 127.5, 127.5); None stays None."""
    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise click.BadParameter(f"expected comma-separated numbers, got {text!r}") from exc

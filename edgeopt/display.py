"""Text from files and flags made safe to print on one terminal line.

A file name may hold a newline (which would split a `• step` line or the one-line error
into two, the second looking like edgeopt's own), a carriage return or an escape sequence
(which rewrite what the terminal shows), or bidirectional overrides that show a name in
another order than it has. They are printed as escapes, the way Python writes them:

    >>> printable("model\\n• wrote dist/ok.tflite")
    'model\\\\n• wrote dist/ok.tflite'
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, zero-width characters and the bidirectional embeddings,
# overrides and isolates.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text: str) -> str:
    """`text` with every control or invisible formatting character written as an escape."""
    return _UNSAFE.sub(_escape, text)

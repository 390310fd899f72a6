"""The `edgeopt` command line: the only part of edgeopt that imports click.

    $ edgeopt build samples/digits_cnn.onnx --calib samples/digits_calib.npz -o dist/
"""

from edgeopt.cli.app import cli, main
from edgeopt.cli.shared import EdgeoptGroup, emit_json

__all__ = ["EdgeoptGroup", "cli", "emit_json", "main"]

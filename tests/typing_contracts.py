"""Checked by mypy (tests/test_typecheck.py), never run: each implementation of a boundary
Protocol is assigned to it, so a method that drifts from its contract fails the type check.
"""

from __future__ import annotations

from edgeopt.calibration.backend import ActivationCapture, QuantFormat
from edgeopt.calibration.onnx_backend import OnnxCapture
from edgeopt.calibration.onnx_format import OnnxFormat
from edgeopt.calibration.tflite_backend import TFLiteCapture
from edgeopt.calibration.tflite_format import TFLiteFormat
from edgeopt.delegates.placement import OpPlacement, Placement
from edgeopt.devices.assignment import OpPlacementView, PlacementView
from edgeopt.devices.runners.adb import AdbClient
from edgeopt.devices.runners.sessions import HostSession, LiteRTSession, OrtSession
from edgeopt.devices.runners.ssh import SshClient
from edgeopt.devices.runners.workspace import DeviceClient
from edgeopt.runtime import (
    KerasRunner,
    LayoutAdapter,
    ModelRunner,
    OnnxRunner,
    SavedModelRunner,
    TFLiteRunner,
)


def formats(tflite: TFLiteFormat, onnx: OnnxFormat) -> list[QuantFormat]:
    return [tflite, onnx]


def captures(tflite: TFLiteCapture, onnx: OnnxCapture) -> list[ActivationCapture]:
    return [tflite, onnx]


def runners(a: TFLiteRunner, b: OnnxRunner, c: KerasRunner, d: SavedModelRunner,
            e: LayoutAdapter, f: OrtSession) -> list[ModelRunner]:
    return [a, b, c, d, e, f]


def host_sessions(a: LiteRTSession, b: OrtSession) -> list[HostSession]:
    return [a, b]


def device_clients(a: AdbClient, b: SshClient) -> list[DeviceClient]:
    return [a, b]


def placements(p: Placement, op: OpPlacement) -> tuple[PlacementView, OpPlacementView]:
    return p, op

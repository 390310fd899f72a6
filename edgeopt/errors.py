"""Errors that reach the user as one `edgeopt: error: ...` line and exit status 2."""


class EdgeoptError(Exception):
    """Bad input or an impossible request: the CLI prints the message, exits 2, no traceback."""

    exit_code = 2


class ModelLoadError(EdgeoptError):
    """The model file is missing, corrupt, unsafe or of an unsupported format."""


class DataError(EdgeoptError):
    """Calibration or evaluation data that does not fit the model."""


class DeviceError(EdgeoptError):
    """Unknown device or a device profile that does not validate."""


class ConversionError(EdgeoptError):
    """A converter or quantizer rejected the model."""


class ConfigError(EdgeoptError):
    """A config file or flag value that cannot be used."""


class OutputError(EdgeoptError):
    """The output location cannot take a bundle."""


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message, or its type name."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__

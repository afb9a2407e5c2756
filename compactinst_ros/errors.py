"""Narrow exception types, each carrying a message that names the problem and the fix."""


class CompactInstError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(CompactInstError, ValueError):
    """A configuration value (model name, parameter, threshold) is invalid."""


class BundleError(CompactInstError):
    """A model bundle is missing, incomplete or malformed."""


class InputError(CompactInstError, ValueError):
    """A camera frame cannot be processed (encoding, dtype, shape, corrupt data)."""


class BackendError(CompactInstError, RuntimeError):
    """An inference backend is unavailable or failed (runtime missing, engine stale, CUDA error)."""


class DataError(CompactInstError, ValueError):
    """A bag, data set or ground-truth file is missing, unreadable or does not fit the frames."""


class InterruptedJobError(CompactInstError):
    """Ctrl-C stopped a job after it wrote what was done so far (the message says where);
    ``compactinst`` exits 130 (128 + SIGINT), as a shell does for an interrupted command."""


class NodeError(CompactInstError, RuntimeError):
    """A running node did not answer, refused a request or failed a transition (``compactinst
    ros``); the message says what the node reported, where it did."""

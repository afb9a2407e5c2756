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

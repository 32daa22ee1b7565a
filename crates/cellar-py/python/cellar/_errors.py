"""Exceptions raised by cellar.

Every exception derives from :class:`CellarError` and carries a ``code`` attribute, a short
stable identifier (``"invalid_input"``, ``"corrupted"``, ``"io"``, ...; ``"panic"`` for an
internal bug). Bad input is also a :class:`ValueError`, and I/O failures are also an
:class:`OSError` (with ``errno`` and ``filename`` when the system gave them).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = [
    "CellarError",
    "InvalidInputError",
    "NotFoundError",
    "CorruptedError",
    "IncompatibleError",
    "ModelError",
    "LockedError",
    "UnsupportedError",
    "InternalError",
    "CellarIOError",
    "UnauthorizedError",
    "OverloadedError",
    "UnreachableError",
]


class CellarError(Exception):
    """Base class of every error cellar raises."""

    #: Stable identifier of the cause, e.g. ``"invalid_input"``.
    code: str = "cellar"
    #: The facts of a server's error answer (:class:`Client`): a field, a limit, the expected
    #: dimension; empty otherwise.
    details: Mapping[str, Any] = MappingProxyType({})
    #: The HTTP status of a server's error answer (:class:`Client`); ``None`` otherwise.
    status: int | None = None


class InvalidInputError(CellarError, ValueError):
    """The caller passed something unusable: an empty query, an unknown mode, ``k <= 0``, a
    malformed collection, a vector of the wrong dimension, a document id out of range."""

    code = "invalid_input"


class NotFoundError(CellarError, KeyError):
    """A streaming collection, group or document id that does not exist."""

    code = "not_found"

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class CorruptedError(CellarError):
    """Bytes on disk are not what cellar wrote (a damaged or truncated index)."""

    code = "corrupted"


class IncompatibleError(CellarError):
    """The index was written in a format version this build cannot read."""

    code = "incompatible_version"


class LockedError(CellarError):
    """Another process (or another open handle) holds the streaming collection, or the index:
    an index being built cannot be opened, and an index open anywhere (a server, another
    ``Index``) cannot be built. Close the other one, or go through the server that holds it."""

    code = "locked"


class ModelError(CellarError):
    """The encoder model is missing, incomplete, or does not match the index."""

    code = "model"


class UnsupportedError(CellarError):
    """The platform refuses a capability that was asked for (e.g. ``reader="direct"``)."""

    code = "unsupported"


class InternalError(CellarError):
    """A broken invariant inside cellar or a worker thread that vanished: a bug, not your input."""

    code = "internal"


class CellarIOError(CellarError, OSError):
    """A read or write failed; the message names the file."""

    code = "io"


class UnauthorizedError(CellarError, PermissionError):
    """A ``cellar serve`` started with an API key refused the request: the :class:`Client` sent
    no key (none given and ``CELLAR_API_KEY`` unset) or the wrong one (HTTP 401)."""

    code = "unauthorized"


class OverloadedError(CellarError):
    """The server could not serve the request now; retry later. Its queue, its admitted
    requests or its memory were full (HTTP 429, code ``"overloaded"``: nothing was done), or the
    request passed the server's deadline (HTTP 504, code ``"deadline_exceeded"``): a write may
    still have completed then, but for one stopped while its texts were encoded, which wrote
    nothing."""

    code = "overloaded"


class UnreachableError(CellarError, ConnectionError):
    """The :class:`Client` got no answer from the server: the connection was refused or broken,
    the name did not resolve (code ``"unreachable"``), or no answer came within the client's
    ``timeout`` (code ``"timeout"``; a write may still have been applied)."""

    code = "unreachable"

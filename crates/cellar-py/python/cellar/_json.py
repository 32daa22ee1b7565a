"""Python values → JSON text for the native module (streams take documents and queries as JSON).

Arrays with a ``tolist`` method (NumPy) are converted; anything else that JSON cannot hold raises
:class:`InvalidInputError`.
"""

from __future__ import annotations

import json
from typing import Any

from ._errors import InvalidInputError


def _default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise InvalidInputError(f"{type(value).__name__} is not a JSON value")


def dumps(value: Any) -> str:
    try:
        return json.dumps(value, default=_default, allow_nan=False)
    except ValueError as e:
        raise InvalidInputError(f"numbers must be finite ({e})") from None
    except TypeError as e:
        raise InvalidInputError(str(e)) from None

"""Which account and organization ids the server can hold. No I/O.

An id becomes LMDB keys (alone, and joined with a session or policy id behind a NUL), log fields and
UTF-8 on disk: so it is bounded well under LMDB's 511-byte key limit, encodable (no lone surrogates)
and free of control characters (a NUL would let one id's key range contain another's).
"""

MAX_IDENTITY_BYTES = 256


def identity_problem(value: str) -> str | None:
    """Why `value` cannot be an account or organization id, or None when it can."""
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid Unicode"
    if not size:
        return "is empty"
    if size > MAX_IDENTITY_BYTES:
        return f"is longer than {MAX_IDENTITY_BYTES} bytes"
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        return "contains control characters"
    return None

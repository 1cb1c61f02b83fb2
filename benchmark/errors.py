"""User-facing errors.

Anything raised as :class:`DecobenchError` is bad input or a missing resource that the user
can fix; the command line prints its message as one line (``decobench: error: ...``) and
exits with status 2 before any training starts.
"""


class DecobenchError(Exception):
    """A problem the user can fix; the message says what and how."""

"""The root of every error labeldist raises on purpose, so that each command catches one type and prints it as one
line (``labeldist: error: ...``, ``trainer fit: ...``), exit status 2, never a traceback.

Each error class of the project derives from :class:`LabeldistError` and keeps the built-in base it had
(``ValueError`` for bad input, ``RuntimeError`` for a store or a service that cannot be used), so code that catches
those still does. :class:`UsageError` is what the user can fix by changing how they call a command.
"""

from __future__ import annotations


class LabeldistError(Exception):
    """An error labeldist raises on purpose; its message is one line that names what is wrong and what to do."""


class UsageError(LabeldistError, ValueError):
    """Options that do not go together, or an input the user can fix; printed as one line by each command."""

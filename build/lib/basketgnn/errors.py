"""The one exception type for problems the user can fix (bad input, bad options).

The CLI prints these as a single message and exits non-zero without a traceback; anything else
is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A problem with the user's input or options; the message names it and says how to fix it."""

"""The one exception type that means "the user asked for something we cannot do".

The CLI turns a `UserError` into a single line on stderr and a non-zero exit code, with no
traceback: the message must name the setting and the fix.
"""


class UserError(Exception):
    """Bad input or an unmet precondition that the user can fix."""

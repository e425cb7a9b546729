"""The error of an integration imported without the framework it adapts.

Each integration module imports its framework first and, when that fails, raises what
``needs_extra`` makes: an ``ImportError`` naming the extra to install.

Example::

    try:
        from langchain_core.chat_history import BaseChatMessageHistory
    except ImportError as e:
        raise needs_extra("langchain", "langchain-core", "langchain", "langchain-core", e) from e
"""

from __future__ import annotations

__all__ = ["needs_extra"]


def needs_extra(module: str, what: str, extra: str, package: str, error: ImportError) -> ImportError:
    """``undertext.<module> needs <what>: pip install 'undertext[<extra>]' (or pip install
    <package>): <error>``."""
    return ImportError(
        f"undertext.{module} needs {what}: pip install 'undertext[{extra}]' (or pip install {package}): {error}"
    )

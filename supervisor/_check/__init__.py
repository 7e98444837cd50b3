"""The lifecycle conformance kit: run a language server or debug adapter through a battery of
lifecycle checks (``supervisor check lsp|dap -- CMD ARGS...``, and the pytest fixtures
``lsp_server_under_test`` / ``dap_adapter_under_test``).

Modules: ``_lsp`` (:func:`check_language_server`), ``_dap`` (:func:`check_debug_adapter`),
``_common`` (bounds and the checks judged over every instance), ``_report`` (the table and
JSON), ``_profiles`` (client capabilities, an editor's answers to server requests, what may
come before the initialize answer), ``_peer`` (the framed client), ``_watch`` (descendants
and zombies), ``_vanish`` (the client that gets SIGKILLed), ``_cli``.
This package imports nothing itself, so ``supervisor --help`` stays fast.
"""

from __future__ import annotations

__all__ = ()

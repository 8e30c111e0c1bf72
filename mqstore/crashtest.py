"""Crash-test an application built on mqstore (``tools.integrations.crashtest``; ``mqstore crashtest``)."""

from mqstore.tools.integrations.crashtest import (CrashReport, Failure, Ledger, LedgerView, crash_test, kill9,
                                     load_module, ready)

__all__ = ["CrashReport", "Failure", "Ledger", "LedgerView", "crash_test", "kill9",
           "load_module", "ready"]

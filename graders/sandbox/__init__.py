"""Running untrusted student code: a worker subprocess behind a small request protocol.

The grading process never imports a submission. `Worker` starts a sandboxed worker process
(bubblewrap namespaces where available, an unprivileged user, rlimits, an audit hook), sends it
requests (construct, call, state_dict, harness tasks) and gets plain values and tensors back.
See docs/sandbox.md.

The names below are imported on first use: `graders.sandbox.spawn` must be importable without
torch (`grade check` starts its worker before the grader imports torch).
"""

import importlib

_EXPORTS = {
    "BudgetExhausted": "errors", "MissingDependency": "errors", "ProtocolError": "errors",
    "RequestError": "errors", "SandboxError": "errors", "StudentError": "errors", "WorkerCrashed": "errors",
    "WorkerTimeout": "errors", "task": "harness", "Layers": "isolation", "Limits": "limits",
    "Handle": "protocol", "Worker": "client",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value

"""Running untrusted student code: a worker subprocess behind a small request protocol.

The grading process never imports a submission. `Worker` starts a sandboxed worker process
(bubblewrap namespaces where available, an unprivileged user, rlimits, an audit hook), sends it
requests (construct, call, state_dict, harness tasks) and gets plain values and tensors back.
See docs/sandbox.md.
"""

from .errors import (BudgetExhausted, MissingDependency, ProtocolError, RequestError, SandboxError, StudentError,
                     WorkerCrashed, WorkerTimeout)
from .harness import task
from .isolation import Layers
from .limits import Limits
from .protocol import Handle
from .client import Worker

__all__ = [
    "BudgetExhausted", "Handle", "Layers", "Limits", "MissingDependency", "ProtocolError", "RequestError", "SandboxError",
    "StudentError", "Worker", "WorkerCrashed", "WorkerTimeout", "task",
]

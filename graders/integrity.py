"""Integrity flags: a static scan of a submission for reaches into the grader or the sandbox.

The scan reads the submission's Python files as text and walks their syntax trees (`ast.parse`);
nothing is imported or run. It looks for what honest code for this assignment never does:
importing the grader, patching the import system or the builtins, walking frames or the garbage
collector's object graph, ctypes and re-loaded extension modules, starting or signalling
processes, mapping files from C, writing outside the working folder, naming `/proc` or the
protocol pipes' file descriptors, objects built to lie to comparisons, forged results.

A flag is for a person to review, never a penalty: no score changes because of one, and each
says in one line what was seen and where. The scan is a heuristic over the text, so it can
be evaded (code built at run time is not seen); what the sandbox refused while the code ran is
recorded separately (`graders.sandbox.audit`, results.json's `integrity.flags` with source
`sandbox`). docs/integrity.md lists the kinds and the honest look-alikes that are not flagged.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from graders.handin import is_bundle_file

# kind id -> what it means (docs/integrity.md has the same table with examples).
KINDS: dict[str, str] = {
    "grader-import": "imports the grader's own modules",
    "sys-modules": "changes the import system (sys.modules, sys.meta_path, sys.path_hooks)",
    "builtins-patch": "replaces builtins",
    "frame-introspection": "walks interpreter frames or installs a tracer",
    "gc-introspection": "walks the garbage collector's object graph",
    "ctypes": "uses ctypes or cffi (raw memory and native calls)",
    "extension-loading": "loads or re-loads native extension modules",
    "process": "starts processes or changes the process session",
    "signal": "sends signals or installs signal handlers",
    "exit": "exits the process outside an `if __name__ == \"__main__\"` block",
    "mmap": "maps memory (mmap)",
    "file-mapping": "opens files from native code (torch.from_file, safe_open, memmap)",
    "write-outside": "writes to an absolute path or outside the working folder",
    "read-outside": "lists or walks folders outside the working folder",
    "system-path": "names /proc, /dev/fd or another window into the process",
    "pipe-fd": "uses a raw file descriptor number (the worker's protocol pipes are fds 3 and up)",
    "dynamic-code": "runs code built at run time (exec, eval, compile, __import__, code objects)",
    "network": "imports a networking module",
    "library-patch": "replaces a function of a library the grader relies on",
    "comparison-override": "defines an object that can lie to comparisons",
    "forged-results": "builds something shaped like the grader's results",
    "endless-loop": "a loop that can never end",
    "huge-allocation": "allocates a constant size of a gigabyte or more",
    "unscannable": "could not be scanned",
}

MAX_FLAGS_PER_FILE = 50
MAX_FLAGS = 200
MAX_FILES = 200
MAX_FILE_BYTES = 1024 * 1024  # honest modules are a few KiB; a MiB takes about a second
MAX_TOTAL_BYTES = 4 * 1024 * 1024
MAX_CODE_CHARS = 200
MAX_REASON_CHARS = 300
HUGE_ELEMENTS = 1 << 30
# Steps spent following names to the paths they hold, per file: hostile text with many names
# bound to each other must not make the scan slow.
MAX_PATH_STEPS = 50_000
_UNKNOWN = "\x00"  # a part of a path that only run time knows

_GRADER_PACKAGES = ("graders",)
_FRAME_CALLS = {
    "sys._getframe": "sys._getframe", "sys._current_frames": "sys._current_frames",
    "sys.settrace": "sys.settrace", "sys.setprofile": "sys.setprofile",
    "threading.settrace": "threading.settrace", "threading.setprofile": "threading.setprofile",
    "inspect.currentframe": "inspect.currentframe", "inspect.stack": "inspect.stack",
    "inspect.trace": "inspect.trace", "inspect.getouterframes": "inspect.getouterframes",
    "inspect.getinnerframes": "inspect.getinnerframes", "traceback.walk_stack": "traceback.walk_stack",
    "sys._getframemodulename": "sys._getframemodulename",
}
_FRAME_ATTRIBUTES = frozenset({"f_back", "f_globals", "f_locals", "f_builtins", "f_trace", "tb_frame",
                               "gi_frame", "cr_frame", "ag_frame"})
_GC_CALLS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents"})
_EXTENSION_NAMES = ("_imp", "importlib.machinery.ExtensionFileLoader", "importlib._bootstrap",
                    "importlib._bootstrap_external", "imp.load_dynamic", "torch.ops.load_library",
                    "torch.classes.load_library", "torch.utils.cpp_extension", "zipimport")
_PROCESS_CALLS = frozenset({"os.system", "os.popen", "os.fork", "os.forkpty", "os.setsid", "os.setpgid",
                            "os.setpgrp", "os.posix_spawn", "os.posix_spawnp", "os.startfile", "pty.spawn",
                            "pty.fork", "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell",
                            "os.execv", "os.execve", "os.execl", "os.execle", "os.execlp", "os.execlpe",
                            "os.execvp", "os.execvpe", "os.spawnl", "os.spawnle", "os.spawnlp", "os.spawnlpe",
                            "os.spawnv", "os.spawnve", "os.spawnvp", "os.spawnvpe", "os.setuid", "os.setgid",
                            "os.setresuid", "os.setresgid", "os.setgroups", "os.unshare", "os.setns"})
_PROCESS_MODULES = ("subprocess", "_posixsubprocess", "pty", "pexpect", "sh", "plumbum")
_SIGNAL_CALLS = frozenset({"os.kill", "os.killpg", "os.pidfd_open", "signal.pthread_kill", "signal.signal",
                           "signal.alarm", "signal.setitimer", "signal.pthread_sigmask", "signal.raise_signal",
                           "signal.pidfd_send_signal", "signal.set_wakeup_fd", "os.getppid"})
_NETWORK_MODULES = ("socket", "_socket", "ssl", "socketserver", "http.client", "http.server", "urllib.request",
                    "urllib3", "requests", "httpx", "aiohttp", "ftplib", "smtplib", "telnetlib", "poplib",
                    "imaplib", "xmlrpc", "paramiko", "websocket", "websockets")
_FILE_MAPPING = frozenset({"torch.from_file", "safetensors.safe_open", "safetensors.torch.safe_open",
                           "numpy.memmap", "numpy.lib.format.open_memmap"})
_DYNAMIC_CODE = frozenset({"exec", "eval", "compile", "marshal.loads", "marshal.load", "types.CodeType",
                           "types.FunctionType", "builtins.exec", "builtins.eval", "builtins.compile",
                           "code.interact", "runpy.run_path", "runpy.run_module", "importlib.reload"})
# Libraries whose functions the grader's harness, oracles or encoder rely on in the worker.
_PATCHED_LIBRARIES = ("torch", "numpy", "math", "random", "safetensors", "json", "os", "sys", "builtins",
                      "importlib", "inspect", "traceback", "threading", "gc", "io", "types")
_PATCH_ALLOWED = ("torch.backends.", "sys.path", "sys.stdout", "sys.stderr", "sys.argv",
                  "sys.dont_write_bytecode", "numpy.random.seed", "os.environ")
_WRITE_PATH_FIRST = frozenset({"open", "io.open", "codecs.open", "os.open", "os.makedirs", "os.mkdir",
                               "os.remove", "os.unlink", "os.rmdir", "os.removedirs", "os.truncate",
                               "os.chmod", "os.chown", "os.utime", "shutil.rmtree", "numpy.save", "numpy.savez",
                               "numpy.savez_compressed", "numpy.savetxt", "os.mkfifo", "os.mknod",
                               "pathlib.Path.write_text", "sqlite3.connect"})
_WRITE_PATH_SECOND = frozenset({"torch.save", "safetensors.torch.save_file", "safetensors.numpy.save_file",
                                "shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree",
                                "shutil.move", "os.rename", "os.replace", "os.symlink", "os.link",
                                "json.dump", "pickle.dump"})
_READ_LISTING = frozenset({"os.walk", "os.listdir", "os.scandir", "os.fwalk", "glob.glob", "glob.iglob",
                           "os.chdir"})
_PATH_WRITE_METHODS = frozenset({"write_text", "write_bytes", "touch", "mkdir", "unlink", "rmdir", "symlink_to",
                                 "hardlink_to", "rename", "replace", "chmod"})
_PATH_LIST_METHODS = frozenset({"iterdir", "glob", "rglob", "walk"})
_FD_CALLS = frozenset({"os.write", "os.read", "os.fdopen", "os.close", "os.dup", "os.dup2", "os.lseek",
                       "os.set_blocking", "os.set_inheritable", "os.readv", "os.writev", "os.sendfile",
                       "os.ftruncate", "os.fsync", "os.fstat", "io.FileIO", "os.pipe2", "os.closerange",
                       "fcntl.fcntl", "fcntl.ioctl", "open", "io.open"})
_SYSTEM_PATH = re.compile(r"(^|[^\w.])/(proc(/|$)|dev/(fd|mem|kmem|shm|tty|pts)(/|$)|sys/(kernel|fs)/|run/)")
_ALLOCATORS = frozenset({"bytearray", "bytes", "torch.empty", "torch.zeros", "torch.ones", "torch.full",
                         "torch.rand", "torch.randn", "torch.randint", "numpy.zeros", "numpy.ones", "numpy.empty",
                         "numpy.full", "array.array", "mmap.mmap"})
_COMPARISONS = frozenset({"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__"})
_RESULT_KEYS = frozenset({"score", "max_score", "schema_version"})
_EXIT_CALLS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort", "builtins.exit"})


@dataclass(frozen=True)
class Flag:
    kind: str
    reason: str  # one line for a person: what was seen
    file: str  # relative to the submission's folder
    line: int
    code: str  # the source line, stripped and clipped

    def to_json(self) -> dict:
        return {"source": "code", "kind": self.kind, "reason": self.reason, "where": f"{self.file}:{self.line}",
                "file": self.file, "line": self.line, "code": self.code}


def scan_folder(root: Path) -> tuple[list[Flag], int]:
    """Flags for every `.py` file under `root` (sorted by path) but the student bundle's own
    (its conftest.py, unchanged: `handin.is_bundle_file`), and how many were left out because of
    the caps."""
    root = Path(root)
    flags: list[Flag] = []
    dropped = scanned = 0
    paths = sorted(p for p in root.rglob("*.py") if p.is_file() and not p.is_symlink()
                   and "__pycache__" not in p.parts)
    for index, path in enumerate(paths):
        name = path.relative_to(root).as_posix()
        if index >= MAX_FILES:
            dropped += 1
            continue
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            found = [Flag("unscannable", f"{size:,} bytes: too large to scan", name, 1, "")]
        elif scanned + size > MAX_TOTAL_BYTES:
            found = [Flag("unscannable", f"not scanned: the submission's code is over {MAX_TOTAL_BYTES:,} bytes",
                          name, 1, "")]
        elif is_bundle_file(name, data := path.read_bytes()):
            continue  # what the bundle's README tells the student to hand in: no reach of theirs
        else:
            scanned += size
            found = scan_source(data, name)
        room = MAX_FLAGS - len(flags)
        flags.extend(found[:room])
        dropped += max(0, len(found) - room)
    return flags, dropped


def scan_source(source: str | bytes, filename: str = "<submission>") -> list[Flag]:
    """Flags for one file's text. A syntax error gives none (such a file cannot be imported,
    so none of it runs); a file too deeply nested to parse is itself flagged."""
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return []
    except (RecursionError, MemoryError):
        return [Flag("unscannable", "nested too deeply to be parsed", filename, 1, "")]
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    try:
        return _Scanner(tree, text.splitlines(), filename).run()
    except RecursionError:
        return [Flag("unscannable", "nested too deeply to be scanned", filename, 1, "")]


class _Scanner:
    def __init__(self, tree: ast.Module, lines: list[str], filename: str) -> None:
        self.tree = tree
        self.lines = lines
        self.filename = filename
        self.flags: dict[tuple[str, int], Flag] = {}
        self.aliases: dict[str, str] = {}  # local name -> dotted name it was imported as
        self.parents: dict[ast.AST, ast.AST] = {}
        self.values: dict[str, list[ast.expr]] = {}  # name -> expressions assigned to it (any scope)
        self.docstrings: set[int] = set()
        self.path_steps = 0
        self.name_texts: dict[tuple[str, int], str | None] = {}

    # ------------------------------------------------------------------ driver

    def run(self) -> list[Flag]:
        nodes = list(ast.walk(self.tree))
        for node in nodes:
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                    self.docstrings.add(id(body[0].value))
        for node in nodes:
            self.collect(node)
        for node in nodes:
            self.visit(node)
            if len(self.flags) >= MAX_FLAGS_PER_FILE:
                break
        return sorted(self.flags.values(), key=lambda f: (f.line, f.kind))

    def flag(self, kind: str, reason: str, node: ast.AST) -> None:
        line = getattr(node, "lineno", 1)
        if (kind, line) in self.flags or len(self.flags) >= MAX_FLAGS_PER_FILE:
            return
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        if len(code) > MAX_CODE_CHARS:
            code = code[:MAX_CODE_CHARS - 1] + "…"
        self.flags[(kind, line)] = Flag(kind, _clip(reason, MAX_REASON_CHARS), self.filename, line, code)

    def collect(self, node: ast.AST) -> None:
        """Imports (for aliases) and simple bindings (for paths built from constants)."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
                else:
                    top = alias.name.partition(".")[0]
                    self.aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.values.setdefault(target.id, []).append(node.value)
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and isinstance(node.target, ast.Name) and node.value:
            self.values.setdefault(node.target.id, []).append(node.value)
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
            if isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)):
                self.values.setdefault(node.target.id, []).extend(node.iter.elts)
        elif isinstance(node, ast.arguments):
            positional = [*node.posonlyargs, *node.args]
            for arg, default in zip(positional[len(positional) - len(node.defaults):], node.defaults):
                self.values.setdefault(arg.arg, []).append(default)
            for arg, default in zip(node.kwonlyargs, node.kw_defaults):
                if default is not None:
                    self.values.setdefault(arg.arg, []).append(default)

    # ------------------------------------------------------------------ names

    def qualify(self, node: ast.AST, depth: int = 0) -> str | None:
        """`np.save` -> "numpy.save", `F.softmax` -> "torch.nn.functional.softmax",
        `Path(p).write_text` -> "pathlib.Path().write_text"; None for anything else."""
        parts = []
        while isinstance(node, ast.Attribute) and len(parts) < 50:
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Call) and depth < 10:
            inner = self.qualify(node.func, depth + 1)
            if inner is None:
                return None
            module = _string(node.args[0]) if node.args else None
            if inner in ("__import__", "importlib.import_module") and module is not None:
                parts.append(module)  # __import__("os").system is os.system
            else:
                parts.append(inner + "()")
        elif isinstance(node, ast.Name):
            parts.append(self.aliases.get(node.id, node.id))
        else:
            return None
        return ".".join(reversed(parts))

    # ------------------------------------------------------------------ visiting

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                self.check_module(alias.name, node)
        elif isinstance(node, ast.ImportFrom):
            if node.module and not node.level:
                self.check_module(node.module, node)
                for alias in node.names:
                    self.check_module(f"{node.module}.{alias.name}", node)
        elif isinstance(node, ast.Call):
            self.visit_call(node)
        elif isinstance(node, ast.Attribute):
            self.visit_attribute(node)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target])
            for target in targets:
                for each in _flatten_targets(target):
                    self.visit_store(each, node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            self.visit_string(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.visit_function(node)
        elif isinstance(node, ast.While):
            self.visit_while(node)
        elif isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            if "score" in keys and keys & (_RESULT_KEYS - {"score"}):
                self.flag("forged-results", "a dict with the grader's result keys "
                          f"({', '.join(sorted(keys & _RESULT_KEYS))})", node)
        elif isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if self.qualify(exc) in ("SystemExit", "builtins.SystemExit") and not self.under_main_guard(node):
                self.flag("exit", "raises SystemExit (ends the process)", node)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            for side, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(side, (ast.List, ast.Constant)) and not isinstance(getattr(side, "value", b""), (int, float)):
                    size = _constant_int(other)
                    if size is not None and size >= HUGE_ELEMENTS:
                        self.flag("huge-allocation", f"a sequence repeated {size:,} times", node)

    def check_module(self, name: str, node: ast.AST) -> None:
        if _within(name, _GRADER_PACKAGES):
            self.flag("grader-import", f"imports the grader's module {name}", node)
        elif _within(name, ("ctypes", "_ctypes", "cffi")):
            self.flag("ctypes", f"imports {name} (raw memory and native calls)", node)
        elif _within(name, ("mmap",)):
            self.flag("mmap", "imports mmap", node)
        elif any(_within(name, (ext,)) for ext in _EXTENSION_NAMES):
            self.flag("extension-loading", f"imports {name} (loads native extension modules)", node)
        elif _within(name, _PROCESS_MODULES):
            self.flag("process", f"imports {name} (starts processes)", node)
        elif _within(name, _NETWORK_MODULES):
            self.flag("network", f"imports {name} (networking)", node)
        elif name in _FILE_MAPPING or name == "safetensors.safe_open":
            self.flag("file-mapping", f"imports {name} (opens files from native code)", node)
        elif name in ("gc.get_objects", "gc.get_referrers", "gc.get_referents"):
            self.flag("gc-introspection", f"imports {name}", node)
        elif name in _FRAME_CALLS:
            self.flag("frame-introspection", f"imports {name}", node)

    def visit_call(self, node: ast.Call) -> None:
        name = self.qualify(node.func)
        if name is None:
            self.check_paths(node, None)
            return
        short = name.rpartition(".")[2]
        if name in _FRAME_CALLS:
            self.flag("frame-introspection", f"calls {name} (reaches the caller's frames)", node)
        elif name in _GC_CALLS:
            self.flag("gc-introspection", f"calls {name} (reaches every object, the sandbox's too)", node)
        elif name in _PROCESS_CALLS or name.startswith(("subprocess.", "_posixsubprocess.")):
            self.flag("process", f"calls {name}", node)
        elif name in _SIGNAL_CALLS:
            self.flag("signal", f"calls {name}", node)
        elif name in _EXIT_CALLS:
            if name in ("os._exit", "os.abort") or not self.under_main_guard(node):
                self.flag("exit", f"calls {name} (ends the worker process)", node)
        elif name in _FILE_MAPPING or short == "from_file" and name.startswith("torch.") or short == "safe_open":
            self.flag("file-mapping", f"calls {name} (opens a file from native code, unseen by the audit hook)", node)
        elif name == "_imp.create_dynamic" or any(_within(name, (ext,)) for ext in _EXTENSION_NAMES):
            self.flag("extension-loading", f"calls {name} (loads native code)", node)
        elif name in _DYNAMIC_CODE:
            self.flag("dynamic-code", f"calls {name} (runs code built at run time)", node)
        elif name in ("__import__", "builtins.__import__", "importlib.import_module", "importlib.__import__"):
            module = _string(node.args[0]) if node.args else None
            if module is not None and _within(module, _GRADER_PACKAGES):
                self.flag("grader-import", f"imports the grader's module {module}", node)
            elif module is not None:
                self.check_module(module, node)
            elif name != "importlib.import_module":
                self.flag("dynamic-code", f"calls {name} with a name built at run time", node)
        elif name in ("setattr", "delattr", "builtins.setattr", "object.__setattr__"):
            if node.args:
                self.visit_store(node.args[0], node, attribute=_string(node.args[1]) if len(node.args) > 1 else None,
                                 by_setattr=True)
        elif name in ("getattr", "builtins.getattr") and len(node.args) > 1:
            attribute = _string(node.args[1])
            if attribute in _FRAME_ATTRIBUTES or attribute in ("_getframe", "currentframe"):
                self.flag("frame-introspection", f"reads the attribute {attribute!r} by name", node)
            elif attribute in ("get_objects", "get_referrers", "get_referents"):
                self.flag("gc-introspection", f"reads gc's {attribute!r} by name", node)
            elif attribute in ("_exit", "fork", "system", "kill", "fork_exec", "create_dynamic", "from_file"):
                self.flag("process" if attribute != "from_file" else "file-mapping",
                          f"reads the attribute {attribute!r} by name", node)
        self.check_sys_modules_call(node, name)
        self.check_paths(node, name)
        self.check_fd(node, name)
        if name in _ALLOCATORS:
            sizes = [_constant_int(arg) for arg in node.args if not isinstance(arg, ast.Starred)]
            if name in ("torch.full", "numpy.full"):
                sizes = sizes[:1]
            elif name == "torch.randint":
                sizes = []
            shape_args = [_constant_int(e) for arg in node.args if isinstance(arg, (ast.Tuple, ast.List))
                          for e in arg.elts]
            total = _product(shape_args) if shape_args else _product(sizes)
            if total is not None and total >= HUGE_ELEMENTS:
                self.flag("huge-allocation", f"{name} of {total:,} elements", node)

    def check_sys_modules_call(self, node: ast.Call, name: str) -> None:
        owner, _, method = name.rpartition(".")
        if owner in ("sys.modules", "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache") and method in (
                "update", "pop", "popitem", "setdefault", "clear", "__setitem__", "__delitem__", "insert", "append",
                "extend", "remove"):
            self.flag("sys-modules", f"changes {owner} ({method})", node)
        elif owner in ("builtins", "builtins.__dict__", "__builtins__") and method in (
                "update", "pop", "popitem", "setdefault", "clear", "__setitem__", "__delitem__", "__setattr__"):
            self.flag("builtins-patch", f"changes {owner} ({method})", node)

    def visit_attribute(self, node: ast.Attribute) -> None:
        if node.attr in _FRAME_ATTRIBUTES:
            self.flag("frame-introspection", f"reads .{node.attr} (another frame's variables)", node)
        if not isinstance(self.parents.get(node), ast.Call) or self.parents[node].func is not node:
            name = self.qualify(node)
            if name in _GC_CALLS or name in _FRAME_CALLS:  # taken as a value: getter = sys._getframe
                self.flag("gc-introspection" if name in _GC_CALLS else "frame-introspection",
                          f"takes {name}", node)
            elif name == "_imp.create_dynamic" or name == "importlib.machinery.ExtensionFileLoader":
                self.flag("extension-loading", f"takes {name}", node)
        if node.attr == "__code__" and isinstance(node.ctx, ast.Store):
            self.flag("dynamic-code", "replaces a function's __code__", node)

    def visit_store(self, target: ast.AST, node: ast.AST, attribute: str | None = None,
                    by_setattr: bool = False) -> None:
        """An assignment, deletion or setattr() whose target is `target` (and, for setattr,
        whose attribute is `attribute`: None when it is computed)."""
        if isinstance(target, ast.Subscript):
            owner = self.qualify(target.value)
            if owner in ("sys.modules", "sys.path_importer_cache"):
                self.flag("sys-modules", f"changes an entry of {owner}", node)
            elif owner in ("__builtins__", "builtins.__dict__") or self.is_vars_of_builtins(target.value):
                self.flag("builtins-patch", "changes an entry of the builtins", node)
            elif owner is not None and owner.endswith(".__dict__") and self.root_is_module(target.value):
                self.flag("library-patch" if not _within(owner, _GRADER_PACKAGES) else "grader-import",
                          f"changes {owner}", node)
            return
        if not by_setattr and isinstance(target, ast.Name):
            if target.id == "__builtins__":
                self.flag("builtins-patch", "replaces __builtins__", node)
            return
        if not (isinstance(target, (ast.Name, ast.Attribute)) and self.root_is_module(target)):
            return  # self.x = ..., obj.attr = ...: the student's own objects
        name = self.qualify(target)
        if name is None:
            return
        if by_setattr:
            name = f"{name}.{attribute}" if attribute is not None else f"{name}.<computed name>"
        if name in ("sys.modules", "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache"):
            self.flag("sys-modules", f"replaces {name}", node)
        elif _within(name, ("builtins", "__builtins__")):
            self.flag("builtins-patch", f"replaces {name}", node)
        elif _within(name, _GRADER_PACKAGES):
            self.flag("grader-import", f"patches the grader's {name}", node)
        elif _within(name, _PATCHED_LIBRARIES) and "." in name and not name.startswith(_PATCH_ALLOWED):
            self.flag("library-patch", f"replaces {name}", node)

    def is_vars_of_builtins(self, node: ast.AST) -> bool:
        return (isinstance(node, ast.Call) and self.qualify(node.func) == "vars" and len(node.args) == 1
                and self.qualify(node.args[0]) in ("builtins", "__builtins__"))

    def root_is_module(self, target: ast.AST) -> bool:
        """Whether an expression starts from an imported module (or the builtins)."""
        for _ in range(100):
            if not isinstance(target, (ast.Attribute, ast.Subscript)):
                break
            target = target.value
        return isinstance(target, ast.Name) and (target.id in self.aliases or target.id == "__builtins__")

    def visit_string(self, node: ast.Constant) -> None:
        if id(node) in self.docstrings:
            return
        value = node.value
        if len(value) > 4096:
            value = value[:4096]
        if _SYSTEM_PATH.search(value):
            self.flag("system-path", f"names {_clip(value, 80)!r}", node)
        elif re.fullmatch(r"graders(\.[\w.]+)?", value):
            self.flag("grader-import", f"names the grader's module {value!r}", node)
        elif value in ("_posixsubprocess", "_ctypes", "ctypes", "_imp"):
            self.flag({"_posixsubprocess": "process", "_imp": "extension-loading"}.get(value, "ctypes"),
                      f"names the module {value!r}", node)

    def visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        in_class = isinstance(self.parents.get(node), ast.ClassDef)
        if not in_class:
            return
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.flag("comparison-override", f"defines {node.name} (a tensor that can answer torch's "
                      "functions, allclose and == too, with anything)", node)
        elif node.name in _COMPARISONS:
            body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            if (len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, bool)):
                self.flag("comparison-override",
                          f"{node.name} always returns {body[0].value.value} (equal to anything)", node)
        elif node.name in ("__instancecheck__", "__subclasscheck__") and isinstance(self.parents.get(node), ast.ClassDef):
            self.flag("comparison-override", f"defines {node.name} (can pass isinstance checks for any type)", node)

    def visit_while(self, node: ast.While) -> None:
        test = node.test
        if not (isinstance(test, ast.Constant) and test.value):
            return
        if not _can_leave(node.body):
            self.flag("endless-loop", "`while True` without a break, return or raise", node)

    # ------------------------------------------------------------------ paths and fds

    def check_paths(self, node: ast.Call, name: str | None) -> None:
        """Writes to, and listings of, places outside the working folder, where constants say so."""
        if name in _WRITE_PATH_FIRST or name in _WRITE_PATH_SECOND:
            if name in ("open", "io.open", "codecs.open"):
                mode = _string(node.args[1]) if len(node.args) > 1 else _string(_keyword(node, "mode"))
                if mode is None or not set(mode) & set("wax+"):
                    return  # reading: the audit hook guards the secrets
            elif name == "os.open":
                return  # its flags are an expression; the audit hook sees what it opens
            index = 1 if name in _WRITE_PATH_SECOND else 0
            keyword = "f" if name == "torch.save" else "dst" if name.startswith("shutil.") else "file"
            path = node.args[index] if len(node.args) > index else _keyword(node, keyword)
            self.flag_outside("write-outside", name, path, node)
        elif name in _READ_LISTING:
            path = node.args[0] if node.args else _keyword(node, "top" if name == "os.walk" else "path")
            self.flag_outside("read-outside", name, path, node)
        elif isinstance(node.func, ast.Attribute):
            method, owner = node.func.attr, node.func.value
            if method in _PATH_LIST_METHODS:
                kind = "read-outside"
            elif method in _PATH_WRITE_METHODS or method == "open" and self.writes(node):
                kind = "write-outside"
            else:
                return
            if self.is_path_object(owner):
                self.flag_outside(kind, f"Path(...).{method}", owner, node)

    def flag_outside(self, kind: str, what: str, path: ast.AST | None, node: ast.AST) -> None:
        where = self.outside(path)
        if where is not None:
            self.flag(kind, f"{what} on {where}", node)

    def writes(self, node: ast.Call) -> bool:
        mode = _string(node.args[0]) if node.args else _string(_keyword(node, "mode"))
        return mode is not None and bool(set(mode) & set("wax+"))

    def is_path_object(self, node: ast.AST, depth: int = 0) -> bool:
        if depth > 4 or not self.take_path_step(node):
            return False
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return True
        if isinstance(node, ast.Call):
            name = self.qualify(node.func) or ""
            return name.rpartition(".")[2] in ("Path", "PurePath", "PosixPath", "home", "cwd") or (
                isinstance(node.func, ast.Attribute) and self.is_path_object(node.func.value, depth + 1))
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            return self.is_path_object(node.value, depth + 1)
        if isinstance(node, ast.Name):
            return any(self.is_path_object(value, depth + 1) for value in self.values.get(node.id, [])[:20])
        return False

    def outside(self, path: ast.AST | None) -> str | None:
        """How `path` leaves the working folder, when its constants say it does (a path
        computed at run time is not judged here: the audit hook sees it)."""
        if path is None:
            return None
        candidates = [path]
        if isinstance(path, ast.Name):
            candidates = self.values.get(path.id, [])[:20]
        for candidate in candidates:
            text = self.leading_text(candidate, 0)
            if text is None:
                continue
            shown = repr(_clip(text.replace(_UNKNOWN, "…"), 80))
            if text.startswith(("/", "~", "\\")) and not text.startswith(("/dev/null", "/dev/stdout", "/dev/stderr")):
                return shown
            if _climbs(text):
                return f"{shown} (above the working folder)"
        return None

    def take_path_step(self, node: ast.AST) -> bool:
        self.path_steps += 1
        if self.path_steps == MAX_PATH_STEPS:
            self.flag("unscannable", "too many names to follow: the rest of its paths were not judged", node)
        return self.path_steps < MAX_PATH_STEPS

    def leading_text(self, path: ast.AST, depth: int) -> str | None:
        """A path expression as text, as far as constants say: unknown parts are `_UNKNOWN`
        (one folder or file name), the submission's own folder is `.`."""
        if depth > 12 or not self.take_path_step(path):
            return None
        if isinstance(path, ast.Constant):
            if isinstance(path.value, bytes):
                return path.value.decode("utf-8", "replace")
            return path.value if isinstance(path.value, str) else None
        if isinstance(path, ast.Name):
            if path.id == "__file__":
                return f"./{_UNKNOWN}"
            key = (path.id, depth)
            if key not in self.name_texts:
                self.name_texts[key] = None
                for value in self.values.get(path.id, [])[:20]:
                    text = self.leading_text(value, depth + 4)
                    if text is not None:
                        self.name_texts[key] = text
                        break
            return self.name_texts[key]
        if isinstance(path, ast.JoinedStr):
            texts = [v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else _UNKNOWN
                     for v in path.values]
            return "".join(texts) if texts else None
        if isinstance(path, ast.BinOp) and isinstance(path.op, (ast.Add, ast.Div)):
            left = self.leading_text(path.left, depth + 1)
            right = self.leading_text(path.right, depth + 1)
            joiner = "/" if isinstance(path.op, ast.Div) else ""
            if isinstance(path.op, ast.Div) and right is not None and right.startswith("/"):
                return right
            return (left if left is not None else _UNKNOWN) + joiner + (right if right is not None else _UNKNOWN)
        if isinstance(path, ast.Attribute) and path.attr == "parent":
            inner = self.leading_text(path.value, depth + 1)
            return None if inner is None else _dirname(inner)
        if isinstance(path, ast.Call):
            name = self.qualify(path.func) or ""
            short = name.rpartition(".")[2]
            if name in ("os.path.expanduser", "os.path.expandvars") or short == "home":
                return "~/"
            if name in ("os.getcwd", "pathlib.Path.cwd", "Path.cwd") or short == "cwd":
                return "."
            if name in ("os.path.dirname", "posixpath.dirname"):
                inner = self.leading_text(path.args[0], depth + 1) if path.args else None
                return None if inner is None else _dirname(inner)
            if isinstance(path.func, ast.Attribute) and path.func.attr in ("resolve", "absolute", "expanduser"):
                return self.leading_text(path.func.value, depth + 1)
            if name in ("os.path.join", "posixpath.join") or short in ("Path", "PurePath", "PosixPath") or name in (
                    "str", "os.fspath", "os.path.abspath", "os.path.realpath", "os.path.normpath"):
                pieces = [self.leading_text(arg, depth + 1) for arg in path.args]
                if not pieces:
                    return "." if short in ("Path", "PurePath", "PosixPath") else None
                pieces = [p if p is not None else _UNKNOWN for p in pieces]
                for index in range(len(pieces) - 1, -1, -1):
                    if pieces[index].startswith(("/", "~")):
                        pieces = pieces[index:]  # join starts again at an absolute piece
                        break
                return "/".join(pieces)
        return None

    def check_fd(self, node: ast.Call, name: str) -> None:
        if name not in _FD_CALLS or not node.args:
            return
        for arg in node.args[:2] if name in ("os.dup2", "os.closerange") else node.args[:1]:
            fd = _constant_int(arg)
            if fd is not None and fd >= 3 and fd < 4096:
                self.flag("pipe-fd", f"{name} on file descriptor {fd} (the worker's protocol pipes are "
                          "such numbers)", node)
                return

    # ------------------------------------------------------------------ context

    def under_main_guard(self, node: ast.AST) -> bool:
        current = node
        while current in self.parents:
            parent = self.parents[current]
            if isinstance(parent, ast.If) and current in parent.body and _is_main_test(parent.test):
                return True
            current = parent
        return False


# ---------------------------------------------------------------------------- helpers


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _string(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _keyword(node: ast.Call, name: str) -> ast.expr | None:
    for keyword in node.keywords:
        if keyword.arg == name:
            return keyword.value
    return None


def _flatten_targets(target: ast.AST):
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _flatten_targets(element)
    elif isinstance(target, ast.Starred):
        yield from _flatten_targets(target.value)
    else:
        yield target


def _constant_int(node: ast.AST, depth: int = 0) -> int | None:
    """The value of an integer expression made of constants (+, -, *, **, <<, //), bounded so
    that a hostile `10 ** 10 ** 10` costs nothing; None when it is not one."""
    if depth > 20:
        return None
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value if abs(node.value) < 1 << 80 else 1 << 80
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _constant_int(node.operand, depth + 1)
        return None if value is None else -value
    if isinstance(node, ast.BinOp):
        left, right = _constant_int(node.left, depth + 1), _constant_int(node.right, depth + 1)
        if left is None or right is None:
            return None
        cap = 1 << 80
        if isinstance(node.op, ast.Add):
            value = left + right
        elif isinstance(node.op, ast.Sub):
            value = left - right
        elif isinstance(node.op, ast.Mult):
            value = left * right
        elif isinstance(node.op, ast.FloorDiv):
            value = left // right if right else None
        elif isinstance(node.op, ast.Pow):
            if right < 0:
                return None
            if abs(left) <= 1:
                value = left ** min(right, 2)
            else:
                value = cap if right >= 80 else left ** right
        elif isinstance(node.op, ast.LShift):
            value = cap if right >= 80 or right < 0 else left << right
        else:
            return None
        if value is None:
            return None
        return max(-cap, min(cap, value))
    return None


def _product(values: list[int | None]) -> int | None:
    if not values or any(v is None for v in values):
        return None
    total = 1
    for value in values:
        total = min(total * max(value, 0), 1 << 80)
    return total


def _can_leave(body: list[ast.stmt]) -> bool:
    """Whether a loop body has a way out: a break of this very loop, a return, a raise, a
    yield, or anything that could raise (a call, an index, an attribute, arithmetic)."""
    stack = [(node, False) for node in body]
    while stack:
        node, in_inner_loop = stack.pop()
        if isinstance(node, ast.Break):
            if not in_inner_loop:
                return True
            continue
        if isinstance(node, (ast.Return, ast.Raise, ast.Yield, ast.YieldFrom, ast.Await, ast.Call,
                             ast.Subscript, ast.Attribute, ast.BinOp, ast.Compare)):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        inner = in_inner_loop or isinstance(node, (ast.For, ast.AsyncFor, ast.While))
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))
    return False


def _dirname(text: str) -> str:
    head = text.rstrip("/").rpartition("/")[0]
    return head or ("/" if text.startswith("/") else ".")


def _climbs(text: str) -> bool:
    """A relative path that goes above where it starts (`../x`, `./f/../../x`)."""
    depth = 0
    for part in re.split(r"[/\\]", text):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def _is_main_test(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


# ---------------------------------------------------------------------------- results.json

SANDBOX_DENIAL = "sandbox-denial"


def denial_flag(denial: dict, where: str) -> dict:
    """A refusal of the worker's audit hook as a flag (`denial` as `Worker.audit_denials` holds it)."""
    event, detail = str(denial.get("event", "")), str(denial.get("detail", ""))
    reason = f"the sandbox refused {event}" + (f" ({_clip(detail, 200)})" if detail else "")
    return {"source": "sandbox", "kind": SANDBOX_DENIAL, "reason": reason, "where": where,
            "event": event, "detail": detail}


def results_section(code_flags: list[Flag], denials: list[tuple[dict, str]], dropped: int = 0) -> dict:
    """results.json's `integrity`: the scan's flags, then the sandbox's denials with where
    they happened, and how many of either were left out by the caps."""
    return {"flags": [flag.to_json() for flag in code_flags] + [denial_flag(d, where) for d, where in denials],
            "dropped": dropped}


def flag_summary(results: dict) -> tuple[int, list[str]]:
    """How many flags a results.json holds (those left out by the caps too) and their kinds,
    sorted: for the gradebook, the batch summary and the terminal."""
    integrity = results.get("integrity") if isinstance(results, dict) else None
    if not isinstance(integrity, dict):
        return 0, []
    flags = [f for f in integrity.get("flags") or [] if isinstance(f, dict)]
    dropped = integrity.get("dropped")
    count = len(flags) + (dropped if type(dropped) is int and dropped > 0 else 0)
    return count, sorted({str(f.get("kind"))[:60] for f in flags})

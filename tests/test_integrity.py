"""The static integrity scan (graders/integrity.py): each kind on its smallest example, honest
look-alikes that must not flag, every honest fixture clean, every hostile fixture caught."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from graders.integrity import KINDS, MAX_FLAGS_PER_FILE, scan_folder, scan_source
from graders.mutants import collect
from graders.notebook import extract_notebook
from tests.course import LAYOUT, PACKS

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "fixtures" / "bert" / "submissions" / "hostile"


def kinds(code: str) -> list[str]:
    return sorted({flag.kind for flag in scan_source(textwrap.dedent(code), "attention.py")})


# One smallest example per kind (several where the kind has several ways in).
FLAGGED = [
    ("grader-import", "import graders"),
    ("grader-import", "from graders.checks import framework"),
    ("grader-import", "import importlib\nimportlib.import_module('graders.sandbox.worker')"),
    ("grader-import", "__import__('graders')"),
    ("grader-import", "import sys\nsys.modules.get('graders.sandbox.protocol')"),
    ("sys-modules", "import sys\nsys.modules['torch'] = None"),
    ("sys-modules", "import sys\ndel sys.modules['numpy']"),
    ("sys-modules", "import sys\nsys.modules.update({})"),
    ("sys-modules", "import sys\nsys.meta_path.insert(0, object())"),
    ("sys-modules", "import sys as s\ns.modules = {}"),
    ("builtins-patch", "import builtins\nbuiltins.open = None"),
    ("builtins-patch", "import builtins\nsetattr(builtins, 'len', None)"),
    ("builtins-patch", "__builtins__['print'] = None"),
    ("builtins-patch", "__builtins__ = {}"),
    ("builtins-patch", "import builtins\nvars(builtins)['len'] = None"),
    ("frame-introspection", "import sys\nsys._getframe(1)"),
    ("frame-introspection", "import inspect\ninspect.currentframe()"),
    ("frame-introspection", "import inspect\nfor f in inspect.stack(): pass"),
    ("frame-introspection", "def f(frame):\n    return frame.f_back"),
    ("frame-introspection", "def f(frame):\n    return frame.f_globals['x']"),
    ("frame-introspection", "import sys\nsys.settrace(print)"),
    ("frame-introspection", "from sys import _getframe"),
    ("frame-introspection", "import sys\ng = sys._getframe"),
    ("frame-introspection", "def f(x):\n    return getattr(x, 'f_back')"),
    ("gc-introspection", "import gc\ngc.get_objects()"),
    ("gc-introspection", "import gc\ngc.get_referrers(object)"),
    ("gc-introspection", "from gc import get_referents"),
    ("ctypes", "import ctypes"),
    ("ctypes", "from ctypes import CDLL"),
    ("ctypes", "__import__('ctypes')"),
    ("extension-loading", "import _imp"),
    ("extension-loading", "from importlib.machinery import ExtensionFileLoader"),
    ("extension-loading", "import importlib.machinery\nimportlib.machinery.ExtensionFileLoader('x', 'y')"),
    ("extension-loading", "import _imp\n_imp.create_dynamic(spec)"),
    ("extension-loading", "import torch\ntorch.ops.load_library('x.so')"),
    ("process", "import _posixsubprocess"),
    ("process", "import subprocess"),
    ("process", "import os\nos.system('ls')"),
    ("process", "import os\nos.fork()"),
    ("process", "import os\nos.setsid()"),
    ("process", "from os import fork\nfork()"),
    ("process", "import os\nos.execv('/bin/sh', [])"),
    ("signal", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"),
    ("signal", "import signal\nsignal.signal(signal.SIGALRM, print)"),
    ("exit", "import sys\nsys.exit(0)"),
    ("exit", "import os\nos._exit(0)"),
    ("exit", "def f():\n    exit()"),
    ("exit", "raise SystemExit(1)"),
    ("exit", "if __name__ == '__main__':\n    import os\n    os._exit(0)"),
    ("mmap", "import mmap"),
    ("file-mapping", "import torch\ntorch.from_file('x', size=4)"),
    ("file-mapping", "import torch\ntorch.UntypedStorage.from_file('x', False, 4)"),
    ("file-mapping", "from safetensors import safe_open\nsafe_open('x', 'pt')"),
    ("file-mapping", "import safetensors\nsafetensors.safe_open('x', framework='pt')"),
    ("file-mapping", "import numpy as np\nnp.memmap('x')"),
    ("write-outside", "import torch\ntorch.save(model.state_dict(), '/tmp/model.pt')"),
    ("write-outside", "import numpy as np\nnp.save('/work/x.npy', a)"),
    ("write-outside", "open('/etc/x', 'w')"),
    ("write-outside", "open('../x', mode='a')"),
    ("write-outside", "import os\nopen(os.path.join(os.path.dirname(__file__), '..', 'x'), 'w')"),
    ("write-outside", "import os\nopen(os.path.expanduser('~/x'), 'w')"),
    ("write-outside", "from pathlib import Path\nPath('/tmp/x').write_text('y')"),
    ("write-outside", "from pathlib import Path\n(Path.home() / 'x').write_text('y')"),
    ("write-outside", "for t in ('a.txt', '/tmp/b'):\n    open(t, 'w')"),
    ("write-outside", "OUT = '/srv/out'\ndef f(m):\n    import torch\n    torch.save(m, OUT + '/m.pt')"),
    ("write-outside", "def f(m, path='/tmp/m.pt'):\n    import torch\n    torch.save(m, path)"),
    ("write-outside", "import shutil\nshutil.copy('model.pt', '/tmp/model.pt')"),
    ("read-outside", "import os\nos.listdir('/')"),
    ("read-outside", "import os\nfor top in ('/home', '/work'):\n    os.walk(top)"),
    ("read-outside", "import glob\nglob.glob('../*')"),
    ("read-outside", "from pathlib import Path\nPath('/').iterdir()"),
    ("system-path", "open('/proc/self/maps')"),
    ("system-path", "p = f'/proc/{pid}/fd'"),
    ("system-path", "open('/dev/fd/4', 'wb')"),
    ("pipe-fd", "import os\nos.write(4, b'x')"),
    ("pipe-fd", "import os\nos.fdopen(3, 'rb')"),
    ("pipe-fd", "open(5, 'wb')"),
    ("pipe-fd", "import os\nos.dup2(1, 4)"),
    ("dynamic-code", "exec('x = 1')"),
    ("dynamic-code", "eval(text)"),
    ("dynamic-code", "compile(src, 'x', 'exec')"),
    ("dynamic-code", "__import__(name)"),
    ("dynamic-code", "def f(): pass\ndef g(): pass\nf.__code__ = g.__code__"),
    ("network", "import socket"),
    ("network", "from urllib.request import urlopen"),
    ("network", "from urllib import request"),
    ("network", "import requests"),
    ("library-patch", "import torch\ntorch.allclose = lambda *a, **k: True"),
    ("library-patch", "import torch\ntorch.Tensor.__eq__ = lambda *a: True"),
    ("library-patch", "import torch.nn.functional as F\nF.softmax = None"),
    ("library-patch", "import torch.nn as nn\nnn.Module.__call__ = None"),
    ("library-patch", "import numpy as np\nsetattr(np, 'allclose', None)"),
    ("comparison-override", "import torch\nclass T(torch.Tensor):\n    @classmethod\n"
                            "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n        return True"),
    ("comparison-override", "class A:\n    def __eq__(self, other):\n        return True"),
    ("comparison-override", "class M(type):\n    def __instancecheck__(cls, obj):\n        return True"),
    ("forged-results", "d = {'score': 100, 'max_score': 100}"),
    ("endless-loop", "while True:\n    pass"),
    ("endless-loop", "while 1:\n    for i in x:\n        break"),
    ("huge-allocation", "bytearray(64 * 1024 ** 3)"),
    ("huge-allocation", "import torch\ntorch.zeros(1 << 20, 1 << 20)"),
    ("huge-allocation", "import torch\ntorch.empty((1 << 16, 1 << 16))"),
    ("huge-allocation", "x = b'x' * 2 ** 40"),
]


@pytest.mark.parametrize("kind, code", FLAGGED, ids=[f"{k}-{i}" for i, (k, _) in enumerate(FLAGGED)])
def test_each_kind_is_flagged(kind, code):
    assert kind in kinds(code)


def test_every_kind_has_an_example():
    assert {kind for kind, _ in FLAGGED} | {"unscannable"} == set(KINDS)


# Honest code that resembles a flagged pattern: none of it may flag.
HONEST = [
    "import os\nimport sys\nimport math\nimport inspect\nimport gc",
    "import inspect\ninspect.signature(print)",  # signatures are everyday introspection, not frames
    "import gc\ngc.collect()",
    "import torch\ntorch.save(model.state_dict(), 'model.pt')",
    "import torch\ntorch.save(model.state_dict(), f'checkpoints/epoch{epoch}.pt')",
    "import os, torch\ntorch.save(m, os.path.join('runs', name, 'model.pt'))",
    "import os, torch\ntorch.save(m, os.path.join(os.path.dirname(__file__), 'model.pt'))",
    "import numpy as np\nnp.save('weights.npy', w)",
    "def f(m, path='model.pt'):\n    import torch\n    torch.save(m, path)",
    "def f(m, path=None):\n    import torch\n    torch.save(m, path or 'm.pt')",
    "open('/data/imdb.csv').read()",  # reading: the audit hook guards secrets, honest code reads data
    "with open('log.txt', 'w') as f:\n    f.write('x')",
    "open('/dev/null', 'w')",
    "frame = 3\nframes = [frame]\nprint(frame)",  # a variable named frame
    "def forward(self, x):\n    return self.model.eval()",  # .eval(), not eval()
    "import torch\nmodel = torch.compile(model)",
    "import re\nre.compile('x')",
    "import sys\nsys.path.append('..')",
    "import sys\nsys.setrecursionlimit(10000)",
    "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0'",
    "import torch\ntorch.backends.cudnn.deterministic = True",
    "import torch\ntorch.manual_seed(0)",
    "import sys\nif __name__ == '__main__':\n    sys.exit(main())",
    "while True:\n    batch = next(it)\n    if batch is None:\n        break",
    "while True:\n    x = step(x)",  # step() can raise StopIteration
    "import torch\ntorch.zeros(4, 8, 16)",
    "import torch\ntorch.zeros(B, T, E)",
    "mask = [0] * 512",
    "class Config:\n    def __eq__(self, other):\n        return self.__dict__ == other.__dict__",
    "self.frame_rate = 3\nx.f_score = 1",
    "import os\nos.makedirs('checkpoints', exist_ok=True)",
    "from pathlib import Path\nPath('out').mkdir(exist_ok=True)\n(Path('out') / 'a.txt').write_text('x')",
    "d = {'score': 0.9, 'epoch': 3}",
    "import os\nos.close(fd)\nos.write(1, b'x')",
    "'''Talks about /proc and graders in a docstring.'''",
    "from torch.utils.data import DataLoader\nDataLoader(ds, num_workers=0)",
    "import os\nfor name in os.listdir('.'):\n    pass",
    "import os\nos.listdir(os.path.dirname(__file__))",
    "import torch\nstate = torch.load('model.pt')",
    "import copy\nimport random\nrandom.seed(0)",
]


@pytest.mark.parametrize("code", HONEST)
def test_honest_look_alikes_are_not_flagged(code):
    assert kinds(code) == []


def test_a_flag_says_where_and_what():
    flags = scan_source("import torch\n\n\ndef f():\n    import graders.sandbox.worker as w  # hm\n", "sub/attention.py")
    assert len(flags) == 1
    payload = flags[0].to_json()
    assert payload == {"source": "code", "kind": "grader-import",
                       "reason": "imports the grader's module graders.sandbox.worker", "where": "sub/attention.py:5",
                       "file": "sub/attention.py", "line": 5, "code": "import graders.sandbox.worker as w  # hm"}


def test_hostile_text_is_bounded_and_nothing_runs(tmp_path):
    # Too deep for the parser (and so for an import too): flagged, not a crash of the grader.
    assert [f.kind for f in scan_source("x = " + "-" * 100_000 + "1")] == ["unscannable"]
    assert scan_source("def f(:\n") == []  # a syntax error: cannot be imported, nothing to flag
    assert kinds("x = 10 ** 10 ** 10 ** 10\ny = bytearray(10 ** 10 ** 10)") == ["huge-allocation"]  # no hang
    many = "\n".join(f"import ctypes as c{i}" for i in range(500))
    assert len(scan_source(many)) == MAX_FLAGS_PER_FILE
    long = "import ctypes  # " + "x" * 10_000
    assert len(scan_source(long)[0].code) <= 200
    # Names bound to each other thousands of times: following them is bounded, not exponential.
    tangle = "\n".join(f"n{a} = n{b}" for a in range(4) for b in range(4) for _ in range(5))
    tangle += "\n" + "\n".join(["open(n0, 'w')", "n1.write_text('y')", "n2.mkdir()"] * 2000)
    started = time.perf_counter()
    assert [f.kind for f in scan_source(tangle)] == ["unscannable"]
    assert time.perf_counter() - started < 10
    (tmp_path / "attention.py").write_text("import os\n__import__('os').system('touch /tmp/pwned')\n")
    flags, dropped = scan_folder(tmp_path)
    assert [f.kind for f in flags] == ["process"] and dropped == 0
    assert not Path("/tmp/pwned").exists()


def test_files_of_the_whole_folder_are_scanned(tmp_path):
    (tmp_path / "big.py").write_text("x = 1\n" * 200_000)  # 1.2 MB
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "util.py").write_text("import ctypes\n")
    (tmp_path / "attention.py").write_text("import torch\n")
    (tmp_path / "notes.txt").write_text("import ctypes\n")
    flags, _ = scan_folder(tmp_path)
    assert [(f.file, f.kind) for f in flags] == [("big.py", "unscannable"), ("helpers/util.py", "ctypes")]


# ----------------------------------------------------------------------------- fixture sweeps


def honest_sources(tmp_path):
    """(name, text) of every honest piece of student-shaped code in the repository."""
    for folder in ("reference", "student_template", "fixtures/bert/submissions/seed004_student"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield str(path.relative_to(ROOT)), path.read_text()
    path = ROOT / "fixtures" / "bert" / "sentiment" / "sample_students.py"
    yield str(path.relative_to(ROOT)), path.read_text()
    for notebook in sorted((ROOT / "fixtures" / "bert" / "notebooks").glob("*.ipynb")):
        out = tmp_path / notebook.stem
        extract_notebook(notebook, out, layout=LAYOUT)
        for path in sorted(out.glob("*.py")):
            yield f"{notebook.name}:{path.name}", path.read_text()
    for pack in PACKS:
        mutants, alternatives = collect(pack)
        yield from _variant_sources(pack, [*mutants, *alternatives])


def _variant_sources(pack, variants):
    for variant in variants:
        texts = {}
        for edit in variant.edits:
            text = texts.get(edit.file) or (pack.reference_dir / edit.file).read_text()
            texts[edit.file] = text.replace(edit.find, edit.replace)
        for file, text in texts.items():
            yield f"mutant {variant.id}:{file}", text


def test_no_honest_fixture_is_flagged(tmp_path):
    scanned, flagged = 0, []
    for name, text in honest_sources(tmp_path):
        scanned += 1
        flagged += [f"{name}:{f.line} {f.kind}: {f.code}" for f in scan_source(text, name)]
    assert scanned > 60  # the sweep really covered the mutants and the notebooks
    assert flagged == []


# Each attack of fixtures/bert/submissions/make_hostile.py and the kinds it must raise. flood_stdout
# is not flagged: printing is honest, and the worker keeps only the tail of the output anyway.
HOSTILE_KINDS = {
    "c_level_read": {"dynamic-code", "file-mapping", "read-outside"},
    "c_level_write": {"file-mapping", "grader-import", "read-outside"},
    "custom_object": {"comparison-override"},
    "exit_at_import": {"exit"},
    "exit_in_call": {"exit"},
    "fake_results": {"forged-results"},
    "fill_disk": {"system-path"},
    "flood_stdout": set(),
    "infinite_loop": {"endless-loop"},
    "kill_parent": {"signal"},
    "memory_bomb": {"huge-allocation"},
    "os_exit_at_import": {"exit"},
    "os_exit_in_call": {"exit"},
    "patch_grader": {"grader-import"},
    "read_reference": {"read-outside", "dynamic-code"},
    "rewrite_results_later": {"extension-loading"},
    "socket_localhost": {"network"},
    "spawn_processes": {"process"},
    "spawn_setsid": {"extension-loading"},
    "tensor_subclass": {"comparison-override"},
    "write_outside": {"write-outside"},
}


def test_every_hostile_fixture_is_flagged_with_its_kinds():
    attacks = sorted(p.name for p in HOSTILE.iterdir() if p.is_dir())
    assert attacks == sorted(HOSTILE_KINDS), "a new attack needs its expected kinds here"
    found = {}
    for attack in attacks:
        flags, dropped = scan_folder(HOSTILE / attack)
        found[attack] = {f.kind for f in flags}
        # The flags point at the attack, not at the honest code it was appended to.
        assert all(f.line >= 45 for f in flags), (attack, flags)
    assert found == HOSTILE_KINDS


def test_a_notebooks_extracted_code_is_scanned(tmp_path):
    """For a notebook, the modules extracted from it are what runs, and what is scanned; cells
    that are never run (a training loop, a shell command) are not."""
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("import torch\nimport sys"),
        nbformat.v4.new_code_cell("def scaled_dot_product(q, k, v, attn_drop_rate=0.1, mask=None):\n"
                                  "    caller = sys._getframe(1).f_globals\n    return q, k"),
        nbformat.v4.new_code_cell("import subprocess\nsubprocess.run(['nvidia-smi'])"),  # never run: dropped
    ]
    path = tmp_path / "hw.ipynb"
    nbformat.write(notebook, path)
    extract_notebook(path, tmp_path / "modules", layout=LAYOUT)
    flags, _ = scan_folder(tmp_path / "modules")
    assert [(f.file, f.kind) for f in flags] == [("attention.py", "frame-introspection")]

"""Attacks on container isolation (`--isolation container`: no bubblewrap, root, the worker on a
uid of its own), and on full isolation where they apply; each with its positive control, the
same attack with the layer that stops it removed, which must then succeed.

The attacks run as a hostile submission would once past the audit hook (a tripwire that memory
corruption removes, docs/sandbox.md): in a fresh interpreter the worker starts with a spawner
captured before the hook was installed (`unaudited`, a harness task of the test's own). What
holds them is the operating system: the worker's uid, its seccomp filter, its namespaces where
the kernel allows them, its CPUs, the write bound's watch, and what is ended and removed under
its uid after it. The container-like machine is test_container_isolation.py's: bubblewrap
switched off, root, the system's Python."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from graders.atomic import UnsafeOutputFolder, private_output_folder
from graders.build import REPO_ROOT
from graders.sandbox import Limits, isolation, walk
from tests.test_container_isolation import SYSTEM_PYTHON
from tests.test_wheel_install import clean_environment, linked_venv

AS_ROOT = os.geteuid() == 0
FULL = AS_ROOT and isolation.find_bwrap() is not None and isolation.bwrap_works(isolation.find_bwrap(), True)
needs_root = pytest.mark.skipif(not AS_ROOT, reason="the sandbox uids exist only when the grader is root")
needs_full = pytest.mark.skipif(not FULL, reason="needs bubblewrap and root (bash setup.sh as root installs it)")
# A corner of the uid space no grade uses (each driver below takes uids of its own in it: tests
# running side by side must not end each other's workers).
TEST_UIDS = Limits(call_timeout_s=120, sandbox_uid=1_970_100_000, sandbox_gid=1_970_100_000)

ATTACK_TASKS = '''
"""The hostile submission's first move, done by the test: a fresh interpreter without the
audit hook, started through the spawner captured here, before the hook exists."""

import os
import sys
from _posixsubprocess import fork_exec

from graders.sandbox.harness import task


@task("unaudited")
def unaudited(ctx, code):
    python = os.path.realpath(sys.executable).encode()
    read_end, write_end = os.pipe()
    error_read, error_write = os.pipe()
    fork_exec([python, b"-I", b"-S", b"-c", code.encode()], [python], True, (error_write,), None, None,
              -1, -1, -1, write_end, -1, write_end, error_read, error_write, True, False, -1,
              None, None, None, -1, None, False)
    os.close(write_end)
    os.close(error_write)
    chunks = []
    while chunk := os.read(read_end, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace").strip()
'''

# Runs in the grading process (the container's Python or this one), prints one JSON line.
DRIVER_PRELUDE = '''
import dataclasses, json, os, shutil, stat, sys, tempfile, time
from pathlib import Path
from graders.sandbox import Limits, Worker, isolation, uids, walk
from graders.sandbox.errors import SandboxError

# A pool of the driver's own (and uids of its own, drive's): the next worker gets the slot, the
# uid, the last one released.
POOL = Path(tempfile.mkdtemp(prefix="uid-pool-"))
uids.pool_folder = lambda: POOL

SUBMISSION, TASKS, LEVEL = sys.argv[1], sys.argv[2], sys.argv[3]
LIMITS = Limits(**json.loads(sys.argv[4]))
LAYERS = {"seccomp": {"seccomp": False}, "namespaces": {"own_namespaces": False}, "cpus": {"cpus": None},
          "space_watch": {"space_watch": False}, "own_root": {"own_root": False}}
CLEAN_UP = {"keyrings": ("clear_keyrings_of", lambda uid, gid: False),
            "ipc_sweep": ("remove_ipc_objects_of", lambda uid: 0), "file_sweep": ("remove_files_of", lambda uid: []),
            "process_kill": ("kill_processes_of", lambda uid, gid=None: 0)}
ORIGINAL = {attribute: getattr(uids, attribute) for attribute, _ in CLEAN_UP.values()}


def worker(*without, limits=None, task_modules=()):
    """A worker of this level with the layers named in `without` removed."""
    for name, (attribute, stand_in) in CLEAN_UP.items():
        setattr(uids, attribute, stand_in if name in without else ORIGINAL[attribute])
    made = Worker(SUBMISSION, limits=limits or LIMITS, isolation_level=LEVEL,
                  task_modules=["attack_tasks", *task_modules], packages={"attack_tasks": TASKS},
                  readable_paths=[TASKS])
    made.layers = dataclasses.replace(made.layers, **{field: value for name in without
                                                      for field, value in LAYERS.get(name, {}).items()})
    return made


def attack(made, code):
    try:
        return made.task("unaudited", code, timeout=120)
    except SandboxError as error:
        return f"{type(error).__name__}: {error}"


def restore():
    for attribute, original in ORIGINAL.items():
        setattr(uids, attribute, original)


# What each worker's folder held when it was removed (its processes all ended by then).
LEFT_ON_DISK = []
DISCARD = walk.discard


def measured_discard(path):
    if Path(path).name.startswith("w-") and os.path.isdir(path) and not os.path.islink(path):
        LEFT_ON_DISK.append(isolation.space_used(Path(path), -2, -2, max_files=1 << 40, pids=[])[0] >> 20)
    return DISCARD(path)


walk.discard = measured_discard


def old_exposure(readable_paths=(), task_modules=()):
    """What a worker saw before the allow-list: every folder its Python reads (the folders a .pth
    names, the folder holding the engine) whole, less the secrets."""
    from graders.sandbox.exposure import SYSTEM_PATHS, Exposure, inside, with_link_targets

    shown = []
    for path in sorted({*isolation.interpreter_paths(), *(t for p in readable_paths for t in with_link_targets(p))}):
        if not any(inside(path, folder) for folder in [*SYSTEM_PATHS, *shown]):
            shown.append(path)
    return Exposure(tuple(shown), ())


def old_clean_up():
    """The clean-up before the walker: shutil.rmtree, whose ignore_errors lets RecursionError out."""
    walk.discard = lambda path: shutil.rmtree(path, ignore_errors=True)


def old_count(workdir, uid, gid, *, max_files, pids=None, shared_folders=None):
    """The write watch's count before the walker: folders listed by their path, one it could
    not list skipped."""
    used = files = 0
    pending = [str(workdir)]
    while pending and files <= max_files:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                pending.append(entry.path)
            files += 1
            used += info.st_blocks * 512
    return used, files


def old_held_after_removal(pid):
    """The watch's look at removed files held open before: as root, skipping what it may not read."""
    held = 0
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    for descriptor in descriptors:
        try:
            info = os.stat(f"/proc/{pid}/fd/{descriptor}")
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 0:
            held += info.st_blocks * 512
    return held
'''


@pytest.fixture(scope="module")
def container_python():
    """A Python under /usr that sees this environment's packages and this checkout's grader."""
    if not AS_ROOT or not SYSTEM_PYTHON.is_file():
        pytest.skip("needs root and the system's Python 3.11 (a container image has both)")
    if f"{sys.version_info.major}.{sys.version_info.minor}" != "3.11":
        pytest.skip("this environment's packages are for another Python")
    home = Path(tempfile.mkdtemp(prefix="container-attacks-", dir="/var/tmp"))
    try:
        home.chmod(0o755)
        yield linked_venv(home / "venv", base_python=SYSTEM_PYTHON, first=[REPO_ROOT])
    finally:
        shutil.rmtree(home, ignore_errors=True)


def attack_home(home: Path) -> Path:
    """In `home`, the submission and the test's task package, where every uid may read them."""
    home.chmod(0o755)
    (home / "submission").mkdir()
    (home / "submission" / "empty.py").write_text("")
    (home / "attack_tasks").mkdir()
    (home / "attack_tasks" / "__init__.py").write_text(ATTACK_TASKS)
    for path in home.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return home


@pytest.fixture(scope="module")
def open_home():
    """Outside /tmp: a worker's own root has a /tmp of its own."""
    home = attack_home(Path(tempfile.mkdtemp(prefix="attacks-", dir="/var/tmp")))
    yield home
    shutil.rmtree(home, ignore_errors=True)


def drive(python, home, program: str, *, level="container", limits: dict | None = None, prefix=(),
          environment: dict | None = None) -> dict:
    """Run `program` (after DRIVER_PRELUDE) as the grading process at `level` (started through
    `prefix`, with `environment` added); its last line of output is JSON."""
    environment = clean_environment(**({isolation.BWRAP_ENVIRONMENT: ""} if level == "container" else {}),
                                    **(environment or {}))
    base = TEST_UIDS.sandbox_uid + TEST_UIDS.sandbox_slots * (1 + uuid.uuid4().int % 10_000)
    limits = {"call_timeout_s": 120, "sandbox_uid": base, "sandbox_gid": base, **(limits or {})}
    done = subprocess.run([*prefix, str(python), "-c", DRIVER_PRELUDE + textwrap.dedent(program),
                           str(home / "submission"), str(home / "attack_tasks"), level, json.dumps(limits)],
                          capture_output=True, text=True, cwd="/", timeout=900, env=environment)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- network

@pytest.fixture
def listeners():
    """A TCP listener on the machine's loopback and an abstract AF_UNIX one (no file, no
    permissions: any process of the same network namespace may connect)."""
    tcp = socket.create_server(("127.0.0.1", 0))
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = f"\0grader-test-{uuid.uuid4().hex}"
    abstract.bind(name)
    abstract.listen()
    reached = []

    def accept(server, kind):
        server.settimeout(600)
        try:
            while True:
                connection, _ = server.accept()
                reached.append(kind)
                connection.close()
        except OSError:
            pass

    for server, kind in ((tcp, "tcp"), (abstract, "unix")):
        threading.Thread(target=accept, args=(server, kind), daemon=True).start()
    yield tcp.getsockname()[1], name[1:]
    tcp.close()
    abstract.close()


CONNECT = '''
import socket
for kind, family, address in (("tcp", socket.AF_INET, ("127.0.0.1", {port})), ("unix", socket.AF_UNIX, "\\0{name}")):
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(address)
        print(kind, "reached")
    except OSError as error:
        print(kind, "refused", error.errno)
'''


@pytest.mark.slow
def test_the_worker_reaches_no_listener_on_the_machine(container_python, open_home, listeners):
    port, name = listeners
    code = CONNECT.format(port=port, name=name)
    found = drive(container_python, open_home, f'''
        found = {{}}
        for without in ((), ("namespaces",), ("seccomp",), ("namespaces", "seccomp")):
            with worker(*without) as made:
                found[" ".join(without) or "all"] = attack(made, {code!r})
        print(json.dumps(found))
    ''')
    for layers in ("all", "namespaces", "seccomp"):  # each layer holds alone
        assert "reached" not in found[layers], (layers, found[layers])
    assert "tcp refused 1" in found["namespaces"] and "unix refused 1" in found["namespaces"]  # seccomp: EPERM
    assert found["namespaces seccomp"].splitlines() == ["tcp reached", "unix reached"]  # positive control


# ---------------------------------------------------------------------------- the file system

READ_A_COPY = '''
import os
try:
    print("read", open(PATH).read())
except OSError as error:
    print("refused", type(error).__name__)
print("listed", sorted(os.listdir("/")))
'''


@pytest.fixture
def solution_copy():
    """A copy of solution code the grader knows nothing of, readable by every user (another
    checkout, an archive left world-readable)."""
    home = Path(tempfile.mkdtemp(prefix="stray-checkout-", dir="/var/tmp"))
    home.chmod(0o755)
    (home / "attention.py").write_text("def scaled_dot_product(q, k, v): return 'the solution'\n")
    (home / "attention.py").chmod(0o644)
    yield home / "attention.py"
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
def test_a_world_readable_copy_of_the_solution_is_absent_from_the_workers_root(container_python, open_home,
                                                                                solution_copy):
    code = READ_A_COPY.replace("PATH", repr(str(solution_copy)))
    found = drive(container_python, open_home, f'''
        found = {{}}
        for without in ((), ("own_root",)):
            with worker(*without) as made:
                found[" ".join(without) or "all"] = attack(made, {code!r})
        print(json.dumps(found))
    ''')
    assert found["all"].startswith("refused FileNotFoundError"), found["all"]
    listed = found["all"].splitlines()[-1]
    assert "'root'" not in listed and "'home'" not in listed and "'w'" in listed  # nothing else of the machine
    assert "read def scaled_dot_product" in found["own_root"]  # positive control


# ---------------------------------------------------------------------------- what a worker's root holds

LOOK_AROUND = '''
import json, os
print(json.dumps({path: os.path.exists(path) for path in PATHS}))
'''


@pytest.fixture(scope="module")
def stray_checkout(container_python):
    """Another checkout of the course, its history holding the solution, named by a .pth of the
    grader's environment (as the project's own container tests and the Gradescope kit do)."""
    home = Path(tempfile.mkdtemp(prefix="checkout-", dir="/var/tmp"))
    for path, text in ((".git/HEAD", "ref: refs/heads/main\n"), (".git/objects/solution", "the solution's history"),
                       ("tests/test_solution.py", "# tests"), ("notes.txt", "")):
        (home / path).parent.mkdir(parents=True, exist_ok=True)
        (home / path).write_text(text)
    for path in [home, *home.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    site_folder = next(container_python.parent.parent.glob("lib/python3*/site-packages"))
    pth = site_folder / "stray_checkout.pth"
    pth.write_text(f"{home}\n")
    yield home
    pth.unlink()
    shutil.rmtree(home, ignore_errors=True)


def _what_the_worker_finds(python, home, checkout, *, level) -> dict:
    paths = [str(path) for path in (
        checkout / ".git" / "objects" / "solution", checkout / "tests", checkout / "notes.txt",
        REPO_ROOT / ".git", REPO_ROOT / "tests" / "test_rootfs.py", REPO_ROOT / "pyproject.toml",
        REPO_ROOT / "student_template", REPO_ROOT / "graders" / "packs" / "gpt",
        REPO_ROOT / "graders" / "packs" / "bert" / "tasks.py", REPO_ROOT / "graders" / "sandbox" / "worker.py")]
    code = LOOK_AROUND.replace("PATHS", repr(paths))
    found = drive(python, home, f'''
        found = {{}}
        for name, patch in (("all", None), ("the old rule", old_exposure)):
            if patch:
                isolation.exposure = patch
            with worker(task_modules=["graders.packs.bert.tasks"]) as made:
                said = attack(made, {code!r})
            found[name] = json.loads(said) if said.startswith("{{") else said
        print(json.dumps(found))
    ''', level=level)
    return {name: [path for path, there in seen.items() if there] for name, seen in found.items()}


NEEDED = {"tasks.py", "worker.py"}


@pytest.mark.slow
def test_a_folder_on_the_path_shows_the_worker_only_what_it_imports(container_python, open_home, stray_checkout):
    there = _what_the_worker_finds(container_python, open_home, stray_checkout, level="container")
    assert {Path(path).name for path in there["all"]} == NEEDED, there["all"]
    leaked = {Path(path).name for path in there["the old rule"]}
    assert {"solution", "tests", "notes.txt", "test_rootfs.py", "gpt"} <= leaked, leaked  # positive control


@pytest.mark.slow
@needs_full
def test_under_bubblewrap_too_a_folder_on_the_path_shows_only_what_the_worker_imports(container_python, open_home,
                                                                                     stray_checkout):
    there = _what_the_worker_finds(container_python, open_home, stray_checkout, level="full")
    assert {Path(path).name for path in there["all"]} == NEEDED, there["all"]
    assert {"solution", "tests", "gpt"} <= {Path(path).name for path in there["the old rule"]}  # positive control


# ---------------------------------------------------------------------------- what outlives a worker

LEAVE_BEHIND = '''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall(250, 1, None)  # a session keyring of its own (the worker's is the grader's)...
libc.syscall(250, 8, -4, -3)  # ...holding the user keyring, whose keys it then possesses
segment = libc.shmget(0x6a7b, 4096, 0o1666)  # IPC_CREAT | 0666
key = libc.syscall(248, b"user", b"grader-test", b"the token", 9, -4)  # add_key into the user keyring
libc.syscall(250, 5, key, 0x3F3F0000)  # KEYCTL_SETPERM: every process of the uid may read it
written = []
for folder in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
    try:
        with open(os.path.join(folder, "grader-test-{marker}"), "w") as left:
            left.write("for the next student")
        written.append(folder)
    except OSError:
        pass
print("segment", segment, "key", key, "files", len(written))
'''

FIND_LEFTOVERS = '''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall(250, 1, None)
libc.syscall(250, 8, -4, -3)
key = libc.syscall(250, 10, -4, b"user", b"grader-test", 0)  # KEYCTL_SEARCH in the user keyring
token = ctypes.create_string_buffer(64)
read = libc.syscall(250, 11, key, token, 64) if key > 0 else -1  # KEYCTL_READ
print(json.dumps({"segment": libc.shmget(0x6a7b, 0, 0) >= 0, "token": token.value.decode() if read > 0 else None}))
'''


def _leftover_program(marker: str, without: tuple[str, ...]) -> str:
    """Two students on one uid slot: the first leaves what it can, the second looks for it."""
    leave = LEAVE_BEHIND.format(marker=marker)
    find = "import json\n" + FIND_LEFTOVERS
    return f'''
        first = worker(*{without!r})
        uid = first.layers.sandbox_uid
        left = attack(first, {leave!r})
        first.close()
        files = [f for f in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
                 if os.path.exists(os.path.join(f, "grader-test-{marker}"))]
        with worker(*{without!r}) as second:
            same_uid = second.layers.sandbox_uid == uid
            found = json.loads(attack(second, {find!r}).splitlines()[-1])
        restore()
        uids.end_everything_of(uid, uid)
        print(json.dumps({{"left": left, "files": files, "same_uid": same_uid, **found}}))
    '''


LEFTOVER_LAYERS = ("seccomp", "namespaces", "own_root", "keyrings", "ipc_sweep", "file_sweep")


@pytest.mark.slow
def test_nothing_a_worker_leaves_reaches_the_next_student_on_its_uid(container_python, open_home):
    marker = uuid.uuid4().hex
    held = drive(container_python, open_home, _leftover_program(marker, ()))
    assert held["same_uid"], "another grade took the slot in between: run again"
    assert "segment -1 key -1" in held["left"]  # the filter refuses both
    assert (held["files"], held["segment"], held["token"]) == ([], False, None)
    assert "files 0" in held["left"]  # its own root has no shared folder it may write
    # Without the filter and its own root: the namespaces and what is ended after the worker hold.
    cleaned = drive(container_python, open_home, _leftover_program(marker, ("seccomp", "own_root")))
    assert "key -1" not in cleaned["left"] and "files 4" in cleaned["left"]
    assert (cleaned["files"], cleaned["segment"], cleaned["token"]) == ([], False, None)
    control = drive(container_python, open_home, _leftover_program(marker, LEFTOVER_LAYERS))
    assert control["same_uid"], "another grade took the slot in between: run again"
    assert len(control["files"]) == 4 and control["segment"] and control["token"] == "the token"


@pytest.fixture(scope="module")
def full_home():
    """For a worker under bubblewrap, which binds them where they are (under /tmp too)."""
    home = attack_home(Path(tempfile.mkdtemp(prefix="attacks-full-")))
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def private_tmp():
    """A TMPDIR of the test's own, for drivers whose workers' folders other grading processes
    on the machine must not meet (the positive controls leave what only the walker removes)."""
    folder = Path(tempfile.mkdtemp(prefix="grader-tmp-"))
    folder.chmod(0o755)
    yield folder
    walk.remove(folder)


@pytest.mark.slow
@needs_full
def test_under_bubblewrap_too_no_keyring_key_reaches_the_next_student(full_home):
    """bubblewrap as root makes no user namespace: a uid's user keyring outlives its workers
    there too; the seccomp filter (and clearing, where the uid can run the interpreter) holds."""
    marker = uuid.uuid4().hex
    held = drive(sys.executable, full_home, _leftover_program(marker, ()), level="full")
    assert held["same_uid"], "another grade took the slot in between: run again"
    assert "key -1" in held["left"] and held["token"] is None
    control = drive(sys.executable, full_home, _leftover_program(marker, ("seccomp", "keyrings")), level="full")
    assert control["same_uid"], "another grade took the slot in between: run again"
    assert control["token"] == "the token" and control["files"] == []  # its /tmp was bubblewrap's


PID_CHURN = '''
import os, time
if os.fork() == 0:
    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(quiet, fd)
    os.setsid()
    while True:  # a new pid every few milliseconds: never where a scan of /proc looks
        try:
            if os.fork():
                os._exit(0)
            with open(BEAT, "a") as beat:  # a heartbeat the test can see
                beat.write(".")
        except OSError:
            pass
        time.sleep(0.002)
print("churning")
'''

# The churn's heartbeat goes to a file of root's that every uid may write (no sweep of the uid's
# files removes it): growing means alive. The driver's own clean-up, whatever the grader did, is
# kill(-1) as the uid from a process that needs no exec.
CHURN_TOOLS = '''
import signal
def heartbeat(name):
    beat = Path(TASKS).parent / name
    beat.write_text("")
    beat.chmod(0o666)
    return str(beat)

def churn_left(beat):
    before = os.path.getsize(beat)
    time.sleep(0.5)
    return os.path.getsize(beat) > before

def end_the_churn(uid, beat):
    for _ in range(20):
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)
                for _ in range(100):
                    os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        if not churn_left(beat):
            return
'''


def test_a_process_that_changes_its_pid_does_not_outlive_its_worker(container_python, open_home):
    """A double fork, then a loop that forks and exits: its pid changes every few
    milliseconds and no process group or session holds it. Killed with its worker's uid."""
    found = drive(container_python, open_home, CHURN_TOOLS + textwrap.dedent(f'''
        found = {{}}
        # its heartbeat is a file of the machine's, outside the worker's own root
        for without in (("own_root",), ("own_root", "process_kill")):
            made = worker(*without)
            uid, beat = made.layers.sandbox_uid, heartbeat("beat-" + "-".join(without))
            said = attack(made, {PID_CHURN!r}.replace("BEAT", repr(beat)))
            beating = churn_left(beat)
            made.close()
            found[" ".join(without[1:]) or "all"] = [said, beating, churn_left(beat)]
            end_the_churn(uid, beat)
            found[" ".join(without[1:]) or "all"].append(churn_left(beat))
        print(json.dumps(found))
    '''))
    assert found["all"] == ["churning", True, False, False], found["all"]
    said, beating, left, after_cleaning = found["process_kill"]
    assert said == "churning" and beating and left, found  # positive control: the churn outlives its worker
    assert not after_cleaning, "the test could not end its own churn: kill the uid's processes by hand"


# ---------------------------------------------------------------------------- what a worker leaves in its folder

DEEP_TREE = '''
import os
for _ in range(1500):  # deeper than Python's recursion limit, its path far longer than PATH_MAX
    os.mkdir("d" * 40)
    os.chdir("d" * 40)
print("left a tree 1500 deep")
'''

LEAVE_A_TREE = '''
    made = worker(*WITHOUT)
    said = attack(made, DEEP_TREE)
    folder = str(made._workdir)
    try:
        made.close()
        closed = "closed"
    except BaseException as error:
        closed = type(error).__name__
    print(json.dumps({"said": said, "closed": closed, "folder": folder, "left": os.path.lexists(folder)}))
'''.replace("DEEP_TREE", repr(DEEP_TREE))

GRADE_NEXT = '''
    try:
        with worker(*WITHOUT) as made:
            made.ping()
        started = "started"
    except BaseException as error:
        started = f"{type(error).__name__}: {error}"
    print(json.dumps({"started": started, "quarantined": walk.quarantined([isolation.workdirs_parent()])}))
'''


def _the_next_grade_after_a_deep_tree(python, home, *, level="container", without=(), old=False,
                                      environment=None) -> tuple[dict, dict]:
    """One grading process leaves a tree in its worker's folder; the next starts a worker. `old`:
    both clean up as before the walker."""
    clean_up = "    old_clean_up()\n" if old else ""
    without_ = repr(tuple(without))
    left = drive(python, home, clean_up + LEAVE_A_TREE.replace("WITHOUT", without_), level=level,
                 environment=environment)
    return left, drive(python, home, clean_up + GRADE_NEXT.replace("WITHOUT", without_), level=level,
                       environment=environment)


@pytest.mark.slow
def test_a_tree_no_rmtree_can_remove_breaks_no_later_grade(container_python, open_home):
    left, after = _the_next_grade_after_a_deep_tree(container_python, open_home)
    try:
        assert left["said"] == "left a tree 1500 deep" and (left["closed"], left["left"]) == ("closed", False)
        assert after == {"started": "started", "quarantined": []}
        # Positive control: the clean-up before leaves the tree (RecursionError out of close), and
        # the next grading process cannot start a worker; the walker then clears the way.
        left, broken = _the_next_grade_after_a_deep_tree(container_python, open_home, old=True)
        assert left["closed"] == "RecursionError" and left["left"]
        assert broken["started"].startswith("RecursionError: maximum recursion depth exceeded"), broken
        mended = drive(container_python, open_home, GRADE_NEXT.replace("WITHOUT", "()"))
        assert mended["started"] == "started" and not os.path.lexists(left["folder"])
    finally:
        walk.remove(left["folder"])


@pytest.mark.slow
@needs_full
def test_under_bubblewrap_a_deep_tree_stays_in_its_tmpfs(full_home, private_tmp):
    """Full isolation: the tree is made in the worker's private tmpfs and goes with its mount
    namespace, so even the clean-up before the walker leaves nothing (the same attack without
    the tmpfs, in container isolation, breaks the next grade with it)."""
    environment = {"TMPDIR": str(private_tmp)}  # no other grading process meets what it might leave
    left, after = _the_next_grade_after_a_deep_tree(sys.executable, full_home, level="full", old=True,
                                                    environment=environment)
    assert left["said"] == "left a tree 1500 deep" and (left["closed"], left["left"]) == ("closed", False)
    assert after["started"] == "started"


# ---------------------------------------------------------------------------- bounds

WRITE_A_LOT = '''
import os
written = files = 0
try:
    for index in range(16):
        folder = "/tmp" if index % 2 and os.access("/tmp", os.W_OK) else "."  # /tmp: not in its own root
        with open(os.path.join(folder, "grader-test-big-{marker}-%d" % index), "wb") as big:
            for _ in range(8):
                big.write(b"x" * (1 << 20))
                written += 1 << 20
    os.makedirs("many", exist_ok=True)
    for index in range(3000):
        open(os.path.join("many", str(index)), "w").close()
        files += 1
    print("wrote", written >> 20, "MiB", files, "files")
except OSError as error:
    print("stopped", error)
'''


@pytest.mark.slow
def test_what_a_worker_writes_is_bounded_without_a_tmpfs(container_python, open_home):
    found = drive(container_python, open_home, f'''
        found = {{}}
        for without in ((), ("space_watch",)):
            with worker(*without) as made:
                found[" ".join(without) or "all"] = attack(made, {WRITE_A_LOT.format(marker=uuid.uuid4().hex)!r})
        print(json.dumps(found))
    ''', limits={"workdir_bytes": 32 << 20, "workdir_files": 500})
    assert found["all"].startswith("WorkerCrashed") and "bound of its writable space (32 MiB, 500 files)" in found["all"]
    assert found["space_watch"] == "wrote 128 MiB 3000 files"  # positive control



LONG_PATH = '''
import os, time
for _ in range(120):  # 120 folders of 40 characters: their path is longer than PATH_MAX
    os.mkdir("p" * 40)
    os.chdir("p" * 40)
written = 0
try:
    for index in range(12):
        with open("big-%d" % index, "wb") as big:
            for _ in range(4):
                big.write(b"x" * (1 << 20))
                written += 1 << 20
    time.sleep(1)  # five of the watch's intervals
    print("held", written >> 20, "MiB")
except OSError as error:
    print("stopped at", written >> 20, "MiB:", error.strerror)
'''

PREALLOCATE = '''
import os
reserved = 0
try:
    for index in range(48):  # each under the file size limit, together 45 times the bound
        fd = os.open("reserved-%d" % index, os.O_RDWR | os.O_CREAT, 0o600)
        os.posix_fallocate(fd, 0, 15 << 20)
        os.close(fd)
        reserved += 15
    print("reserved", reserved, "MiB")
except OSError as error:
    print("stopped at", reserved, "MiB:", error.strerror)
'''

HELD_AFTER_REMOVAL = '''
import os, time
held, written = [], 0
try:
    for index in range(12):
        fd = os.open("gone-%d" % index, os.O_RDWR | os.O_CREAT, 0o600)
        os.unlink("gone-%d" % index)  # in no folder: only its descriptor holds it
        for _ in range(4):
            os.write(fd, b"x" * (1 << 20))
            written += 1 << 20
        held.append(fd)
    time.sleep(1)
    print("held", written >> 20, "MiB")
except OSError as error:
    print("stopped at", written >> 20, "MiB:", error.strerror)
'''

# The bound of these attacks: 16 MiB (32 MiB where it preallocates), files of 16 MiB at most.
SMALL_BOUND = {"workdir_bytes": 16 << 20, "max_file_bytes": 16 << 20}
STOPPED = "WorkerCrashed: the student's code wrote past the bound of its writable space"
# A root without CAP_SYS_PTRACE, as Docker's: it may not read another uid's /proc/<pid>/fd.
NO_PTRACE = ("setpriv", "--bounding-set", "-sys_ptrace")


def _attacks(python, home, runs, **drive_options) -> dict:
    """{name: (what the attack said, MiB its folder held when removed)} for each (name, code,
    layers removed, a driver statement run first)."""
    program = "found = {}\n"
    for name, code, without, first in runs:
        program += (f"{first}\nLEFT_ON_DISK.clear()\ntry:\n    with worker(*{without!r}) as made:\n"
                    f"        said = attack(made, {code!r})\n"
                    "except SandboxError as error:\n    said = f'{type(error).__name__}: {error}'\n"
                    f"found[{name!r}] = [said, max(LEFT_ON_DISK, default=0)]\n")
    program += "print(json.dumps(found))\n"
    return drive(python, home, textwrap.indent(program, "    "), **drive_options)


@pytest.mark.slow
def test_files_below_a_path_longer_than_path_max_count_against_the_bound(container_python, open_home):
    found = _attacks(container_python, open_home, [
        ("all", LONG_PATH, (), ""),
        ("old count", LONG_PATH, (), "isolation.space_used = old_count")], limits=SMALL_BOUND)
    assert found["all"][0].startswith(STOPPED) and "(16 MiB, 4096 files)" in found["all"][0], found
    assert found["old count"][0] == "held 48 MiB"  # positive control: the folders past PATH_MAX went uncounted


@pytest.mark.slow
def test_preallocation_is_stopped_as_it_is_written(container_python, open_home):
    counted_at_intervals = "isolation.SPACE_POLL_S = isolation.SPACE_WATCH_INTERVAL_S"
    found = _attacks(container_python, open_home, [
        ("all", PREALLOCATE, (), ""),
        ("seccomp, polls", PREALLOCATE, ("seccomp",), counted_at_intervals)],
        limits={**SMALL_BOUND, "workdir_bytes": 32 << 20})
    # How far past the bound it got depends on the machine's load: bench_space_watch.py measures it
    # (docs/sandbox.md: a few MiB). Here, stopped long before what it asked for, and far below
    # what the control reserves before the watch looks.
    said, left = found["all"]
    assert said.startswith(STOPPED) and left < 10 * 32, found  # fallocate refused, the drop seen at once
    said, left = found["seccomp, polls"]
    assert said.startswith(STOPPED) and left >= 10 * 32, found  # positive control: reserved faster than counted


@pytest.mark.slow
def test_files_held_after_removal_count_where_root_may_not_trace(container_python, open_home):
    as_root = "import contextlib; uids.file_system_identity = lambda uid, gid: contextlib.nullcontext()"
    found = _attacks(container_python, open_home, [
        ("all", HELD_AFTER_REMOVAL, (), ""),
        ("as root", HELD_AFTER_REMOVAL, (), as_root),
        ("as root, skipping", HELD_AFTER_REMOVAL, (), "isolation._held_after_removal = old_held_after_removal")],
        limits=SMALL_BOUND, prefix=NO_PTRACE)
    assert found["all"][0].startswith(STOPPED), found
    assert "could not read what it wrote" in found["as root"][0]  # read as root, it fails closed
    assert found["as root, skipping"][0] == "held 48 MiB"  # positive control: the watch before, blind to them


@pytest.mark.slow
@needs_full
def test_under_bubblewrap_the_tmpfs_ends_every_write_past_the_bound(full_home):
    found = _attacks(sys.executable, full_home, [(name, code, (), "") for name, code in (
        ("long path", LONG_PATH), ("preallocate", PREALLOCATE), ("held after removal", HELD_AFTER_REMOVAL))],
        level="full", limits=SMALL_BOUND)
    for name, (said, left) in found.items():
        assert said.startswith("stopped at") and said.endswith("No space left on device"), (name, said)
        assert left < 1, (name, left)  # on the disk: the submission's copy only

AFFINITY = '''
import os, threading
everything = set(range(os.cpu_count()))
seen = []
def spin():
    try:
        os.sched_setaffinity(0, everything)
    except OSError:
        pass
    seen.append(sorted(os.sched_getaffinity(0)))
threads = [threading.Thread(target=spin) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(sorted(set(map(tuple, seen))))
'''


@pytest.mark.slow
def test_a_worker_keeps_to_its_cpus_whatever_it_starts(container_python, open_home):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: nothing to bound")
    found = drive(container_python, open_home, f'''
        found = {{}}
        for without in ((), ("cpus", "seccomp")):
            with worker(*without) as made:
                found[" ".join(without) or "all"] = [attack(made, {AFFINITY!r}), made.layers.cpus]
        print(json.dumps(found))
    ''')
    output, cpus = found["all"]
    assert cpus is not None and len(cpus) == 1 and output == str([tuple(cpus)])
    everything = tuple(range(os.cpu_count()))
    assert found["cpus seccomp"][0] == str([everything])  # positive control


# ---------------------------------------------------------------------------- the grader's outputs

def _as_uid(uid, command):
    return subprocess.run(command, user=uid, group=uid, extra_groups=[], capture_output=True, text=True, cwd="/",
                          timeout=30)


@pytest.fixture
def shared_parent():
    """A folder like /tmp: every user may write it, only an entry's owner may rename it."""
    folder = Path(tempfile.mkdtemp(prefix="shared-"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@needs_root
def test_an_output_folder_a_sandbox_uid_made_first_is_refused(shared_parent):
    uid = TEST_UIDS.sandbox_uid + 7
    out = shared_parent / "out"
    made = _as_uid(uid, ["/bin/sh", "-c", f"mkdir -m 777 {out}"])
    assert made.returncode == 0, made.stderr
    with pytest.raises(UnsafeOutputFolder, match="not a folder of the grader's user"):
        private_output_folder(out, untrusted_uids=TEST_UIDS.sandbox_uids)
    # Positive control: a folder taken as it is (mkdir -p) stays the student's to rewrite.
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text('{"score": 0}')
    forged = _as_uid(uid, ["/bin/sh", "-c", f"echo '{{\"score\": 16}}' > {out}/forged && mv {out}/forged "
                                            f"{out}/results.json"])
    assert forged.returncode == 0 and "16" in (out / "results.json").read_text()


@needs_root
def test_an_output_folder_the_grader_makes_no_sandbox_uid_can_open(shared_parent):
    uid = TEST_UIDS.sandbox_uid + 7
    out = private_output_folder(shared_parent / "new" / "out", untrusted_uids=TEST_UIDS.sandbox_uids)
    (out / "results.json").write_text('{"score": 0}')
    assert oct(out.stat().st_mode & 0o777) == "0o700" and out.stat().st_uid == os.geteuid()
    for command in (f"cat {out}/results.json", f"ls {out}", f"touch {out}/forged"):
        assert _as_uid(uid, ["/bin/sh", "-c", command]).returncode != 0, command
    # The grader's own folder from before is closed again; a folder under one anybody may
    # rewrite, or a link of another user on the way, is refused.
    out.chmod(0o755)
    assert oct(private_output_folder(out).stat().st_mode & 0o777) == "0o700"
    open_parent = shared_parent / "open"
    open_parent.mkdir(mode=0o777)
    open_parent.chmod(0o777)
    with pytest.raises(UnsafeOutputFolder, match="writable by every user"):
        private_output_folder(open_parent / "out")
    link = shared_parent / "link"
    _as_uid(uid, ["/bin/ln", "-s", str(shared_parent / "new"), str(link)])
    with pytest.raises(UnsafeOutputFolder, match="a link of another user"):
        private_output_folder(link / "out")


@needs_root
def test_the_cli_refuses_an_output_folder_a_sandbox_uid_made(shared_parent):
    out = shared_parent / "out"
    assert _as_uid(Limits().sandbox_uid + 9, ["/bin/mkdir", "-m", "777", str(out)]).returncode == 0
    example = REPO_ROOT / "fixtures" / "bert" / "submissions" / "seed004_student"
    refused = subprocess.run([sys.executable, "-m", "graders.cli", str(example), "--out", str(out), "--parts",
                              "attention", "--unsafe-no-sandbox"], capture_output=True, text=True, timeout=300,
                             cwd=REPO_ROOT)
    assert refused.returncode == 2 and "not a folder of the grader's user" in refused.stderr
    assert list(out.iterdir()) == []


@needs_root
def test_in_a_batch_no_worker_opens_another_students_results(shared_parent):
    """`--jobs 2`, first run: a batch's output folder is made before any worker starts, and no
    sandbox uid can enter it. Positive control: the folder as `mkdir -p` made it before."""
    from graders.grading import write_results

    uid = TEST_UIDS.sandbox_uid + 11
    for out, private in ((shared_parent / "batch", True), (shared_parent / "batch-as-before", False)):
        if private:
            private_output_folder(out, untrusted_uids=TEST_UIDS.sandbox_uids)
        else:
            out.mkdir()
        results = {"status": "graded", "score": 1, "max_score": 2, "reference_answers": "the rubric"}
        path = write_results(results, out / "submissions" / "alice")
        read = _as_uid(uid, ["/bin/cat", str(path)])
        assert (read.returncode != 0) == private, (out, read.stdout[:200])

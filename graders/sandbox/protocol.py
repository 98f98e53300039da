"""The wire format between the grader and its worker.

A message is an 8-byte big-endian length, a JSON header of that length, then a payload whose
length the header gives in `payload_bytes`. The payload holds the message's tensors in the
safetensors format; the JSON refers to them by name. Nothing is ever pickled.

Values in the JSON (arguments, results) are plain JSON where that is unambiguous and tagged
objects (`{"__t": ...}`) otherwise: tuples, dicts, non-finite floats, tensors, numpy arrays,
dtypes, sizes, devices and handles. An object that is none of these stays in the worker and
travels as a handle (its id and type name), which can be passed back as an argument.

The grader side decodes strictly: anything unexpected is a `ProtocolError`, and every decoded
value is built from JSON and bytes by the grader itself (builtins, plain `torch.Tensor`,
`numpy.ndarray`, `Handle`), so no object of the worker's choosing can reach the grader. What a
message may hold is bounded before it is parsed, besides its size in bytes: at most MAX_VALUES
JSON values, MAX_TENSORS tensors, each of a dtype of SAFETENSORS_DTYPES (a complex tensor would
reach the checks and, through a number they derive from it, stop results.json) and of at most
MAX_TENSOR_DIMS dimensions. A worker's code can write any bytes to its reply pipe, so these
bounds hold whatever the worker's own encoder was made to send.
"""

from __future__ import annotations

import json
import math
import os
import select
import struct
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import safetensors.torch
import torch

from .errors import ProtocolError, RequestError

LENGTH = struct.Struct(">Q")
SAFETENSORS_LENGTH = struct.Struct("<Q")
# Deeper than any sensible argument or result; bounds recursion on both sides.
MAX_DEPTH = 64
MAX_TYPE_NAME = 300
# Many small values cost the reader far more memory than their bytes: a 0-d tensor is some 50 bytes
# of a message and kilobytes once built (150,000 took the grader from 250 MiB to 1 GiB), `[]` 2
# bytes of JSON and 56 once parsed. A reply holds a few hundred tensors (a model's state_dict, a
# traced forward) and thousands of values at most.
MAX_TENSORS = 10_000
MAX_VALUES = 1_000_000
MAX_TENSOR_DIMS = 64
IOV_MAX = 1024  # buffers per writev call on Linux
READ_CHUNK = 8 << 20  # os.read allocates what it is asked for before it knows what came
TAG = "__t"

# The dtypes both directions can carry. safetensors names them; numpy cannot hold bfloat16,
# so raw bytes are taken through a uint8 view of the tensor instead.
SAFETENSORS_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
DTYPES_BY_NAME = {str(dtype).removeprefix("torch."): dtype for dtype in
                  (getattr(torch, name) for name in dir(torch))
                  if isinstance(dtype, torch.dtype)}
NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


@dataclass(frozen=True)
class Handle:
    """An object that lives in the worker. `generation` counts worker restarts, so a handle
    from a worker that has since died is refused instead of silently naming another object."""

    id: int
    type_name: str
    generation: int = 0

    def __repr__(self) -> str:
        return f"<Handle #{self.id} {self.type_name}>"


# ---------------------------------------------------------------------------- tensors payload

def plain_cpu_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's own values as a plain, contiguous CPU tensor.

    A subclass (or a torch-function mode left active by student code) could answer `.detach()`,
    `.cpu()` or `.contiguous()` with anything; with torch functions disabled these act on the
    storage itself.
    """
    if (type(tensor) is torch.Tensor and not torch._C._is_torch_function_mode_enabled()
            and not tensor.requires_grad and tensor.layout == torch.strided
            and tensor.device.type == "cpu" and tensor.is_contiguous()
            and not tensor.is_conj() and not tensor.is_neg()):
        return tensor  # the common case, and nothing to convert: attribute reads only
    with torch._C.DisableTorchFunction():
        plain = torch.Tensor.as_subclass(tensor, torch.Tensor).detach()
        if plain.layout != torch.strided:
            plain = plain.to_dense()
        if plain.device.type != "cpu":
            plain = plain.cpu()
        return plain.resolve_conj().resolve_neg().contiguous()


def safetensors_buffers(tensors: dict[str, torch.Tensor]) -> list:
    """The safetensors serialisation of `tensors`, as a list of buffers to write one after the
    other (the tensors' memory is not copied).

    safetensors.torch.save would do, but it reads tensor memory through ctypes, which the
    worker's audit hook forbids; the format is simple enough to write here and is read back
    with safetensors' own parser.
    """
    header: dict[str, Any] = {}
    buffers = []
    offset = 0
    for name, tensor in tensors.items():
        # numpy views are far cheaper than torch ones; numpy has no bfloat16, int16 holds its bits
        as_numpy = (tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor).numpy()
        data = as_numpy.reshape(-1).view(np.uint8)
        header[name] = {
            "dtype": SAFETENSORS_DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + data.nbytes],
        }
        offset += data.nbytes
        buffers.append(memoryview(data))
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    header_bytes += b" " * (-len(header_bytes) % 8)  # the format aligns the data to 8 bytes
    return [SAFETENSORS_LENGTH.pack(len(header_bytes)), header_bytes, *buffers]


def load_safetensors(payload: bytes) -> dict[str, torch.Tensor]:
    """The tensors of a payload, once its header has passed `check_safetensors_header`."""
    check_safetensors_header(payload)
    tensors = safetensors.torch.load(payload)
    # Python's JSON keeps the last of two entries of one name; safetensors' parser need not.
    if any(tensor.dtype not in SAFETENSORS_DTYPES for tensor in tensors.values()):
        raise ProtocolError("the payload holds a tensor of a dtype the protocol does not carry")
    return tensors


def check_safetensors_header(payload: bytes) -> None:
    """Refuse, before any tensor is built, a payload of more than MAX_TENSORS tensors or with a
    tensor of another dtype than SAFETENSORS_DTYPES' or of more than MAX_TENSOR_DIMS dimensions."""
    if len(payload) < SAFETENSORS_LENGTH.size:
        raise ProtocolError("the tensor payload is malformed: it is truncated")
    (size,) = SAFETENSORS_LENGTH.unpack_from(payload)
    if size > len(payload) - SAFETENSORS_LENGTH.size:
        raise ProtocolError("the tensor payload is malformed: its header is longer than the payload")
    raw = payload[SAFETENSORS_LENGTH.size:SAFETENSORS_LENGTH.size + size]
    # Every entry names its offsets; a name cannot hold the quoted key unescaped, so this count
    # is at least the number of tensors, and it is taken before the header is parsed.
    if raw.count(b'"data_offsets"') > MAX_TENSORS:
        raise ProtocolError(f"a message carries more than {MAX_TENSORS:,} tensors")
    header = parse_header(raw)
    allowed = set(SAFETENSORS_DTYPES.values())
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if type(entry) is not dict or type(entry.get("shape")) is not list:
            raise ProtocolError("the tensor payload is malformed: an entry of its header is not a tensor")
        if entry.get("dtype") not in allowed:
            raise ProtocolError(f"the payload holds a tensor of dtype {str(entry.get('dtype'))[:20]!r}, "
                                "which the protocol does not carry")
        if len(entry["shape"]) > MAX_TENSOR_DIMS:
            raise ProtocolError(f"the payload holds a tensor of more than {MAX_TENSOR_DIMS} dimensions")


# ---------------------------------------------------------------------------- values

class MessageEncoder:
    """Turns a value into JSON-ready data, collecting its tensors for the payload.

    `keep` decides what happens to objects that cannot travel by value: the worker keeps them
    and returns a handle; the grader has no such objects to send and raises.
    """

    def __init__(self, keep: Callable[[Any], Handle], *, generation: int | None = None) -> None:
        self.keep = keep
        # The grader sends only handles of the worker it talks to; the worker checks none.
        self.generation = generation
        self.tensors: dict[str, torch.Tensor] = {}

    def encode(self, value: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise ValueError(f"the value is nested more than {MAX_DEPTH} levels deep")
        # type() rather than isinstance(): an object can fake its __class__, not its type.
        kind = type(value)
        if value is None or kind is bool or kind is str or kind is int:
            return value
        if kind is float:
            return value if math.isfinite(value) else {TAG: "float", "v": repr(value)}
        if issubclass(kind, torch.Tensor):
            return {TAG: "tensor", "k": self._add_tensor(plain_cpu_tensor(value))}
        if kind is Handle:
            if self.generation is not None and value.generation != self.generation:
                raise RequestError(f"{value!r} belongs to a worker that has since been restarted")
            return {TAG: "handle", "id": value.id, "type": value.type_name}
        if issubclass(kind, np.ndarray) and value.dtype.kind in "biuf":
            return {TAG: "ndarray", "k": self._add_tensor(torch.from_numpy(np.ascontiguousarray(value)))}
        if issubclass(kind, np.generic) and value.dtype.kind in "biuf":
            return self.encode(value.item(), depth)
        if kind is torch.dtype:
            return {TAG: "dtype", "v": str(value).removeprefix("torch.")}
        if kind is torch.Size:
            return {TAG: "size", "v": [int(n) for n in value]}
        if kind is torch.device:
            return {TAG: "device", "v": str(value)}
        # Subclasses of the builtins (a namedtuple, an OrderedDict, an IntEnum) travel as the
        # builtin; their contents are read with the builtin's own methods, which a subclass
        # cannot override.
        if issubclass(kind, str):
            return str.__str__(value)
        if issubclass(kind, int):
            return int.__int__(value)
        if issubclass(kind, float):
            return self.encode(float.__float__(value), depth)
        if issubclass(kind, list):
            return [self.encode(item, depth + 1) for item in list.__iter__(value)]
        if issubclass(kind, tuple):
            return {TAG: "tuple", "v": [self.encode(item, depth + 1) for item in tuple.__iter__(value)]}
        if issubclass(kind, dict) and all(_is_plain_key(key, depth) for key in dict.keys(value)):
            return {TAG: "dict", "v": [[self.encode(key, depth + 1), self.encode(item, depth + 1)]
                                       for key, item in dict.items(value)]}
        return self.encode(self.keep(value), depth)

    def _add_tensor(self, tensor: torch.Tensor) -> str:
        if tensor.dtype not in SAFETENSORS_DTYPES:
            raise TypeError(f"tensors of dtype {tensor.dtype} cannot be sent")
        name = f"t{len(self.tensors)}"
        self.tensors[name] = tensor
        return name


def _is_plain_key(key: Any, depth: int) -> bool:
    """Dict keys that decode to something hashable; a dict with other keys travels as a handle."""
    if key is None or type(key) in (bool, int, float, str):
        return True
    return type(key) is tuple and depth < MAX_DEPTH and all(_is_plain_key(k, depth + 1) for k in key)


def decode(data: Any, tensors: dict[str, torch.Tensor], handle: Callable[[int, str], Any]) -> Any:
    """The value `data` describes. `handle(id, type_name)` gives what a handle decodes to: a
    `Handle` in the grader, the kept object itself in the worker. Raises `ProtocolError`."""
    try:
        return _decode(data, tensors, handle, 0)
    except (TypeError, ValueError, OverflowError, RuntimeError) as error:
        # A value that passed the checks but that torch or numpy still refuse (a bfloat16
        # "ndarray", a size beyond int64): malformed all the same.
        raise ProtocolError(f"a value cannot be decoded: {error}") from error


def _decode(data: Any, tensors: dict[str, torch.Tensor], handle: Callable[[int, str], Any],
            depth: int) -> Any:
    if depth > MAX_DEPTH + 1:
        raise ProtocolError("a value is nested too deeply")
    kind = type(data)
    if data is None or kind in (bool, int, float, str):
        return data
    if kind is list:
        return [_decode(item, tensors, handle, depth + 1) for item in data]
    if kind is not dict or not isinstance(data.get(TAG), str):
        raise ProtocolError(f"unexpected {kind.__name__} in a message")
    tag = data[TAG]
    fields = set(data) - {TAG}
    if tag == "handle" and fields == {"id", "type"}:
        if type(data["id"]) is not int or type(data["type"]) is not str or len(data["type"]) > MAX_TYPE_NAME:
            raise ProtocolError("malformed handle")
        return handle(data["id"], data["type"])
    if fields != ({"k"} if tag in ("tensor", "ndarray") else {"v"}):
        raise ProtocolError(f"malformed {tag!r} value")
    value = data.get("v")
    if tag in ("tensor", "ndarray"):
        tensor = tensors.get(data["k"]) if type(data["k"]) is str else None
        if tensor is None:
            raise ProtocolError("a value refers to a tensor the message does not carry")
        return tensor if tag == "tensor" else tensor.numpy()
    if tag == "tuple" and type(value) is list:
        return tuple(_decode(item, tensors, handle, depth + 1) for item in value)
    if tag == "dict" and type(value) is list:
        result = {}
        for pair in value:
            if type(pair) is not list or len(pair) != 2:
                raise ProtocolError("malformed dict entry")
            key = _decode(pair[0], tensors, handle, depth + 1)
            if not _is_plain_key(key, depth):
                raise ProtocolError("a dict key is not a plain value")
            result[key] = _decode(pair[1], tensors, handle, depth + 1)
        return result
    if tag == "float" and value in NON_FINITE:
        return NON_FINITE[value]
    if tag == "dtype" and value in DTYPES_BY_NAME:
        return DTYPES_BY_NAME[value]
    if tag == "size" and type(value) is list and all(type(n) is int and n >= 0 for n in value):
        return torch.Size(value)
    if tag == "device" and type(value) is str:
        return torch.device(value)
    raise ProtocolError(f"unknown or malformed value tagged {tag!r}")


# ---------------------------------------------------------------------------- framing

def send_message(fd: int, header: dict, tensors: dict[str, torch.Tensor], *,
                 deadline: float | None = None) -> None:
    """Write one message. With a deadline, `fd` must be non-blocking; `TimeoutError` if the
    reader does not take it in time."""
    write_message(fd, message_buffers(header, tensors), deadline=deadline)


def message_buffers(header: dict, tensors: dict[str, torch.Tensor]) -> list:
    """One message as the buffers to write one after the other (tensors are not copied)."""
    payload = safetensors_buffers(tensors) if tensors else []
    header = {**header, "payload_bytes": sum(memoryview(part).nbytes for part in payload)}
    header_bytes = json.dumps(header, allow_nan=False, separators=(",", ":")).encode()
    return [LENGTH.pack(len(header_bytes)), header_bytes, *payload]


def write_message(fd: int, buffers: list, *, deadline: float | None = None) -> None:
    """Write the buffers of `message_buffers`; with a deadline as `send_message`."""
    _write_all(fd, buffers, deadline)


def receive_message(fd: int, *, max_bytes: int | None = None, max_header_bytes: int | None = None,
                    deadline: float | None = None) -> tuple[dict, dict[str, torch.Tensor]]:
    """Read one message: its header and its tensors (plain tensors built from the payload).

    Raises `EOFError` if the writer is gone, `TimeoutError` past the deadline, `ProtocolError`
    if the message is malformed or larger than `max_bytes` (its header than `max_header_bytes`).
    """
    (header_size,) = LENGTH.unpack(_read_exact(fd, LENGTH.size, deadline))
    header_limits = [limit for limit in (max_bytes, max_header_bytes) if limit is not None]
    if header_limits and header_size > min(header_limits):
        raise ProtocolError(f"a message header of {header_size} bytes exceeds the limit of {min(header_limits)}")
    header = parse_header(_read_exact(fd, header_size, deadline))
    payload_size = header.pop("payload_bytes", None)
    if type(payload_size) is not int or payload_size < 0:
        raise ProtocolError("the message header has no valid payload size")
    if max_bytes is not None and header_size + payload_size > max_bytes:
        raise ProtocolError(f"a message of {header_size + payload_size} bytes exceeds the limit of {max_bytes}")
    if payload_size == 0:
        return header, {}
    payload = _read_exact(fd, payload_size, deadline)
    try:
        return header, load_safetensors(payload)
    except ProtocolError:
        raise
    except Exception as error:  # safetensors reports malformed input with its own error types
        raise ProtocolError(f"the tensor payload is malformed: {error}") from error


def parse_header(raw: bytes) -> dict:
    def reject_constant(name: str) -> None:
        raise ValueError(f"{name} is not allowed")

    # A JSON value is a container or follows a comma, but the first: this bounds what parsing
    # builds before it is built (commas and brackets inside strings only make the bound stricter,
    # and a message's texts are tens of thousands of characters at most).
    if raw.count(b",") + raw.count(b"[") + raw.count(b"{") >= MAX_VALUES:
        raise ProtocolError(f"a message holds more than {MAX_VALUES:,} values")
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ProtocolError(f"the message header is not valid JSON: {error}") from error
    if type(header) is not dict:
        raise ProtocolError("the message header is not a JSON object")
    return header


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes:
    """With a deadline, `fd` must be non-blocking. Returns `bytes` because safetensors parses
    nothing else; a message that arrives in one piece is then never copied."""
    chunks = []
    remaining = size
    while remaining:
        try:
            chunk = os.read(fd, min(remaining, READ_CHUNK))
        except BlockingIOError:
            _wait(fd, select.POLLIN, deadline)
            continue
        if not chunk:
            raise EOFError("the other side closed the channel")
        chunks.append(chunk)
        remaining -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _write_all(fd: int, parts: list, deadline: float | None) -> None:
    views = [memoryview(part).cast("B") for part in parts if memoryview(part).nbytes]
    while views:
        try:
            # One system call for the whole message where there is writev (not on Windows).
            written = os.writev(fd, views[:IOV_MAX]) if hasattr(os, "writev") else os.write(fd, views[0])
        except BlockingIOError:
            _wait(fd, select.POLLOUT, deadline)
            continue
        while views and written >= views[0].nbytes:
            written -= views[0].nbytes
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


def _wait(fd: int, event: int, deadline: float | None) -> None:
    if deadline is None:
        raise RuntimeError("a non-blocking channel needs a deadline")
    poller = select.poll()
    poller.register(fd, event)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        # Errors and hang-ups count as ready: the read or write that follows reports them.
        if poller.poll(remaining * 1000):
            return

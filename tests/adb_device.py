"""A loopback Android device for tests: the adb transport protocol over TCP, a sandbox as
its filesystem, and a `benchmark_model` that really runs LiteRT.

    device = LoopbackDevice(tmp_path / "device").start()
    # adb connect 127.0.0.1:<device.port>   (the real adb client and server)
    ...
    device.stop()

What it speaks (AOSP adb `protocol.txt`, `SERVICES.TXT`, `SYNC.TXT`):

- transport messages: a 24-byte little-endian header (command, arg0, arg1, length, byte sum,
  command ^ 0xffffffff) and a payload; CNXN answered with a `device::` banner that lists
  the features `shell_v2,cmd,stat_v2,fixed_push_mkdir`; OPEN/OKAY/WRTE/CLSE streams with one
  write in flight per stream (the next WRTE waits for the peer's OKAY);
- `shell:CMD` (raw, stdout and stderr merged) and `shell,v2,...:CMD` (packets of id, length,
  data; stdout 1, stderr 2, exit 3 with the status byte; stdin 0 and close-stdin 4 inbound);
- `sync:` with STAT/STA2/LST2, LIST, SEND (DATA... DONE -> OKAY/FAIL), RECV, QUIT.

Commands run under /bin/sh in the sandbox folder: device paths (/data, /sys, /system,
/vendor, /sdcard) in a command are rewritten into the sandbox, and the sandbox prefix is
taken out of what the command prints, so the host sees device paths. Like adbd with a raw
shell, closing a shell stream does not kill its command: a harness must do that itself.

Faults on demand (`device.faults`, see `Faults`): unplug in the middle of a push, stop
answering (when a service opens, or in the middle of a push), answer with bytes that are
not adb messages; and `benchmark_model` modes that print garbage instead of timings.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from edgeopt.devices.runners.remote_bench import parse_flags

A_CNXN, A_OPEN, A_OKAY, A_WRTE, A_CLSE, A_AUTH = (
    int.from_bytes(name, "little") for name in (b"CNXN", b"OPEN", b"OKAY", b"WRTE", b"CLSE",
                                                 b"AUTH"))
VERSION = 0x01000001
MAX_PAYLOAD = 256 * 1024
FEATURES = "shell_v2,cmd,stat_v2,fixed_push_mkdir"
PRODUCT = {"ro.product.name": "loopback", "ro.product.model": "Loopback_Phone",
           "ro.product.device": "loopback"}
SHELL_STDIN, SHELL_STDOUT, SHELL_STDERR, SHELL_EXIT, SHELL_CLOSE_STDIN = 0, 1, 2, 3, 4
SYNC_DATA_MAX = 64 * 1024
DEVICE_ROOTS = ("data", "sys", "system", "vendor", "sdcard")
IDLE_CURRENT_UA, RUN_CURRENT_UA, VOLTAGE_UV = 120_000, 520_000, 3_900_000


def pack_message(command: int, arg0: int, arg1: int, data: bytes = b"") -> bytes:
    header = struct.pack("<6I", command, arg0, arg1, len(data), sum(data) & 0xFFFFFFFF,
                         command ^ 0xFFFFFFFF)
    return header + data


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise ConnectionError("peer closed the connection")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_message(sock: socket.socket) -> tuple[int, int, int, bytes]:
    command, arg0, arg1, length, _check, magic = struct.unpack("<6I", _recv_exact(sock, 24))
    if magic != command ^ 0xFFFFFFFF:
        raise ConnectionError(f"bad magic in message {command:#x}")
    return command, arg0, arg1, _recv_exact(sock, length) if length else b""


@dataclass
class Faults:
    """What a flaky cable, a hung adbd or a broken device does, switched on by a test."""

    vanish_after_push_bytes: int | None = None   # unplug once this much of a push arrived
    stall_after_push_bytes: int | None = None    # stop answering once this much arrived
    stall_on_open: str | None = None             # stop answering when such a service opens
    garbage_on_open: str | None = None           # answer such an OPEN with non-adb bytes


# --- the sandbox filesystem ----------------------------------------------------------------

class Sandbox:
    """A folder that stands for the device's root: /data/local/tmp, fake sysfs battery."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        for folder in ("data/local/tmp", "system/bin", "sys/class/power_supply/battery"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        self.set_battery(IDLE_CURRENT_UA, VOLTAGE_UV)
        roots = "|".join(DEVICE_ROOTS)
        self._pattern = re.compile(rf"(?<![\w.\-/])/({roots})(?=/|\b)")

    def set_battery(self, current_ua: int, voltage_uv: int) -> None:
        battery = self.root / "sys/class/power_supply/battery"
        (battery / "current_now").write_text(f"{current_ua}\n")
        (battery / "voltage_now").write_text(f"{voltage_uv}\n")
        (battery / "status").write_text("Discharging\n")

    def remove_battery(self) -> None:
        shutil.rmtree(self.root / "sys/class/power_supply/battery")

    def host_path(self, device_path: str) -> Path:
        """Where a device path lives in the sandbox; never outside it."""
        target = (self.root / device_path.lstrip("/")).resolve()
        if target != self.root and not target.is_relative_to(self.root):
            raise PermissionError(device_path)
        return target

    def rewrite_command(self, command: str) -> str:
        return self._pattern.sub(lambda m: f"{self.root}/{m.group(1)}", command)

    def device_view(self, output: bytes) -> bytes:
        return output.replace(str(self.root).encode(), b"")


# --- streams -------------------------------------------------------------------------------

class Stream:
    """One OPEN'ed service: writes wait for the peer's OKAY, as the protocol requires."""

    def __init__(self, conn: Connection, local_id: int, remote_id: int):
        self.conn, self.local_id, self.remote_id = conn, local_id, remote_id
        self.ready = threading.Event()
        self.ready.set()
        self.closed = False

    def write(self, data: bytes) -> bool:
        step = self.conn.max_payload
        for start in range(0, len(data), step):
            while not self.ready.wait(0.2):
                if self.closed or self.conn.dead:
                    return False
            if self.closed:
                return False
            self.ready.clear()
            self.conn.send(A_WRTE, self.local_id, self.remote_id, data[start:start + step])
        return True

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.conn.send(A_CLSE, self.local_id, self.remote_id)
            self.conn.forget(self.local_id)

    def on_data(self, data: bytes) -> None:
        raise NotImplementedError

    def on_peer_close(self) -> None:
        self.closed = True
        self.ready.set()


class ShellStream(Stream):
    """`shell:` or `shell,v2,...:` running one command in the sandbox under /bin/sh."""

    def __init__(self, conn, local_id, remote_id, command: str, v2: bool):
        super().__init__(conn, local_id, remote_id)
        self.command, self.v2, self.inbound, self.proc = command, v2, b"", None

    def start(self) -> None:
        """Run the command; called once OKAY went out, so no output can precede it."""
        device = self.conn.device
        self.proc = subprocess.Popen(
            ["/bin/sh", "-c", device.sandbox.rewrite_command(self.command or "true")],
            cwd=device.sandbox.root, env=device.shell_env(), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE if self.v2 else subprocess.STDOUT,
            start_new_session=True)
        device.spawned.append(self.proc.pid)
        device.commands.append(self.command)
        if device.on_command:
            device.on_command(self.command)
        pumps = [threading.Thread(target=self._pump, args=(self.proc.stdout, SHELL_STDOUT),
                                  daemon=True)]
        if self.v2:
            pumps.append(threading.Thread(target=self._pump,
                                          args=(self.proc.stderr, SHELL_STDERR), daemon=True))
        for pump in pumps:
            pump.start()
        threading.Thread(target=self._finish, args=(pumps,), daemon=True).start()

    def _packet(self, kind: int, data: bytes) -> bytes:
        return struct.pack("<BI", kind, len(data)) + data if self.v2 else data

    def _pump(self, pipe, kind: int) -> None:
        view = self.conn.device.sandbox.device_view
        while chunk := os.read(pipe.fileno(), self.conn.max_payload - 5):
            if not self.closed:
                self.write(self._packet(kind, view(chunk)))

    def _finish(self, pumps) -> None:
        for pump in pumps:
            pump.join()
        code = self.proc.wait()
        if self.v2 and not self.closed:
            self.write(self._packet(SHELL_EXIT, bytes([code & 0xFF])))
        self.close()

    def on_data(self, data: bytes) -> None:
        if not self.v2:
            self._stdin(data)
            return
        self.inbound += data
        while len(self.inbound) >= 5:
            kind, size = struct.unpack("<BI", self.inbound[:5])
            if len(self.inbound) < 5 + size:
                return
            payload, self.inbound = self.inbound[5:5 + size], self.inbound[5 + size:]
            if kind == SHELL_STDIN:
                self._stdin(payload)
            elif kind == SHELL_CLOSE_STDIN:
                self._stdin(None)

    def _stdin(self, data: bytes | None) -> None:
        if self.proc is None:
            return
        try:
            if data is None:
                self.proc.stdin.close()
            else:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def on_peer_close(self) -> None:
        super().on_peer_close()
        self._stdin(None)


class SyncStream(Stream):
    """`sync:` file transfer: requests are a 4-byte id and a little-endian length."""

    WITH_PAYLOAD = {b"STAT", b"STA2", b"LST2", b"LIST", b"SEND", b"RECV", b"DATA"}

    def __init__(self, conn, local_id, remote_id):
        super().__init__(conn, local_id, remote_id)
        self.buffer, self.upload = b"", None
        self.sandbox = conn.device.sandbox
        # Replies wait for the peer's OKAY, which the connection's reader thread delivers:
        # requests are therefore handled on a thread of their own.
        self.inbox: queue.Queue[bytes | None] = queue.Queue()
        threading.Thread(target=self._work, daemon=True).start()

    def on_data(self, data: bytes) -> None:
        self.inbox.put(data)

    def on_peer_close(self) -> None:
        super().on_peer_close()
        self.inbox.put(None)

    def close(self) -> None:
        super().close()
        self.inbox.put(None)

    def _work(self) -> None:
        while (data := self.inbox.get()) is not None:
            self._parse(data)
        if self.upload is not None:
            self.upload.close()

    def _parse(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 8:
            request, size = self.buffer[:4], struct.unpack("<I", self.buffer[4:8])[0]
            payload_size = size if request in self.WITH_PAYLOAD else 0
            if len(self.buffer) < 8 + payload_size:
                return
            payload = self.buffer[8:8 + payload_size]
            self.buffer = self.buffer[8 + payload_size:]
            self._handle(request, size, payload)

    def _handle(self, request: bytes, size: int, payload: bytes) -> None:
        handlers = {b"STAT": self._stat_v1, b"STA2": self._stat_v2, b"LST2": self._stat_v2,
                    b"LIST": self._list, b"SEND": self._send, b"DATA": self._data,
                    b"RECV": self._recv}
        if request == b"DONE":
            self._done(size)
        elif request == b"QUIT":
            self.close()
        elif request in handlers:
            handlers[request](payload, request)
        else:
            self._fail(f"unknown sync request {request!r}")

    def _fail(self, message: str) -> None:
        text = message.encode()
        self.write(b"FAIL" + struct.pack("<I", len(text)) + text)

    def _lstat(self, path: bytes) -> os.stat_result | None:
        try:
            return os.stat(self.sandbox.host_path(path.decode()))
        except (OSError, PermissionError):
            return None

    def _stat_v1(self, path: bytes, _request: bytes) -> None:
        st = self._lstat(path)
        fields = (st.st_mode, st.st_size, int(st.st_mtime)) if st else (0, 0, 0)
        self.write(b"STAT" + struct.pack("<3I", *[f & 0xFFFFFFFF for f in fields]))

    def _stat_v2(self, path: bytes, request: bytes) -> None:
        st = self._lstat(path)
        if st is None:
            self.write(request + struct.pack("<I2Q4IQ3q", 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
            return
        self.write(request + struct.pack(
            "<I2Q4IQ3q", 0, st.st_dev, st.st_ino, st.st_mode, st.st_nlink, st.st_uid,
            st.st_gid, st.st_size, int(st.st_atime), int(st.st_mtime), int(st.st_ctime)))

    def _list(self, path: bytes, _request: bytes) -> None:
        folder = self.sandbox.host_path(path.decode())
        entries = sorted(folder.iterdir()) if folder.is_dir() else []
        for entry in entries:
            st, name = entry.stat(), entry.name.encode()
            self.write(b"DENT" + struct.pack("<4I", st.st_mode, st.st_size & 0xFFFFFFFF,
                                             int(st.st_mtime), len(name)) + name)
        self.write(b"DONE" + struct.pack("<4I", 0, 0, 0, 0))

    def _send(self, spec: bytes, _request: bytes) -> None:
        path, _, mode = spec.decode().rpartition(",")
        try:
            target = self.sandbox.host_path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            self.upload = open(target, "wb")  # noqa: SIM115
            os.chmod(target, stat.S_IMODE(int(mode)) or 0o644)
        except (OSError, PermissionError, ValueError) as exc:
            self.upload = None
            self._fail(f"cannot open {path}: {exc}")

    def _data(self, chunk: bytes, _request: bytes) -> None:
        if self.upload is not None:
            self.upload.write(chunk)
            self.upload.flush()
        self.conn.device.pushed(len(chunk))

    def _done(self, _mtime: int) -> None:
        if self.upload is None:
            return
        self.upload.close()
        self.upload = None
        self.write(b"OKAY" + struct.pack("<I", 0))

    def _recv(self, path: bytes, _request: bytes) -> None:
        try:
            content = self.sandbox.host_path(path.decode()).read_bytes()
        except (OSError, PermissionError) as exc:
            self._fail(f"cannot read {path.decode()}: {exc.strerror or exc}")
            return
        for start in range(0, len(content), SYNC_DATA_MAX):
            chunk = content[start:start + SYNC_DATA_MAX]
            self.write(b"DATA" + struct.pack("<I", len(chunk)) + chunk)
        self.write(b"DONE" + struct.pack("<I", 0))


# --- the connection and the device ---------------------------------------------------------

class Connection:
    """One TCP connection from the adb server: CNXN handshake, then stream messages."""

    def __init__(self, device: LoopbackDevice, sock: socket.socket):
        self.device, self.sock = device, sock
        self.max_payload = MAX_PAYLOAD
        self.streams: dict[int, Stream] = {}
        self.lock = threading.Lock()
        self.next_id = 1
        self.dead = False

    def send(self, command: int, arg0: int, arg1: int, data: bytes = b"") -> None:
        try:
            with self.lock:
                self.sock.sendall(pack_message(command, arg0, arg1, data))
        except OSError:
            self.dead = True

    def forget(self, local_id: int) -> None:
        self.streams.pop(local_id, None)

    def serve(self) -> None:
        try:
            while not self.dead:
                if self.device.frozen.is_set():
                    time.sleep(0.05)
                    continue
                self._dispatch(*read_message(self.sock))
        except (ConnectionError, OSError, struct.error):
            pass
        finally:
            self.dead = True
            for stream in list(self.streams.values()):
                stream.on_peer_close()

    def _dispatch(self, command: int, arg0: int, arg1: int, data: bytes) -> None:
        if command == A_CNXN:
            self.max_payload = min(MAX_PAYLOAD, arg1 or MAX_PAYLOAD)
            banner = "device::" + "".join(f"{k}={v};" for k, v in PRODUCT.items())
            self.send(A_CNXN, VERSION, MAX_PAYLOAD, (banner + f"features={FEATURES}").encode())
        elif command == A_OPEN:
            self._open(arg0, data.rstrip(b"\0").decode())
        elif command == A_OKAY and arg1 in self.streams:
            self.streams[arg1].ready.set()
        elif command == A_WRTE and arg1 in self.streams:
            self.streams[arg1].on_data(data)
            self.send(A_OKAY, arg1, arg0)
        elif command == A_CLSE and arg1 in self.streams:
            self.streams.pop(arg1).on_peer_close()

    def _open(self, remote_id: int, service: str) -> None:
        faults = self.device.faults
        if faults.stall_on_open and service.startswith(faults.stall_on_open):
            self.device.frozen.set()
            return
        if faults.garbage_on_open and service.startswith(faults.garbage_on_open):
            self.device.garbage_sent += 1
            with self.lock:
                self.sock.sendall(b"HTTP/1.1 200 OK\r\n\r\n" + os.urandom(200))
            return
        local_id, self.next_id = self.next_id, self.next_id + 1
        stream = self._make_stream(service, local_id, remote_id)
        if stream is None:
            self.send(A_CLSE, 0, remote_id)
            return
        self.streams[local_id] = stream
        self.send(A_OKAY, local_id, remote_id)
        if isinstance(stream, ShellStream):
            stream.start()

    def _make_stream(self, service: str, local_id: int, remote_id: int) -> Stream | None:
        if service.startswith("sync:"):
            return SyncStream(self, local_id, remote_id)
        if service.startswith("shell"):
            head, _, command = service.partition(":")
            options = head.split(",")[1:]
            return ShellStream(self, local_id, remote_id, command, "v2" in options)
        return None


class LoopbackDevice:
    """An adb device on 127.0.0.1 whose filesystem is a sandbox folder."""

    def __init__(self, root: Path, benchmark_model: bool = True):
        self.sandbox = Sandbox(root)
        self.listener: socket.socket | None = None
        self.connections: list[Connection] = []
        self.spawned: list[int] = []
        self.commands: list[str] = []
        self.on_command = None
        self.frozen = threading.Event()
        self.faults = Faults()
        self.pushed_bytes = 0
        self.garbage_sent = 0
        if benchmark_model:
            install_benchmark_model(self.sandbox)

    @property
    def port(self) -> int:
        return self._port

    @property
    def serial(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, port: int = 0) -> LoopbackDevice:
        self.listener = socket.create_server(("127.0.0.1", port))
        self._port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()
        return self

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(self, sock)
            self.connections.append(conn)
            threading.Thread(target=conn.serve, daemon=True).start()

    def shell_env(self) -> dict[str, str]:
        root = self.sandbox.root
        return {"PATH": f"{root}/system/bin:/usr/bin:/bin", "HOME": f"{root}/data/local/tmp",
                "TMPDIR": f"{root}/data/local/tmp", "LOOPBACK_DEVICE_ROOT": str(root),
                "LANG": "C.UTF-8"}

    def pushed(self, count: int) -> None:
        """Count pushed bytes; unplug or freeze when a fault says so."""
        self.pushed_bytes += count
        faults = self.faults
        if faults.vanish_after_push_bytes is not None \
                and self.pushed_bytes >= faults.vanish_after_push_bytes:
            self.drop_connections()
        if faults.stall_after_push_bytes is not None \
                and self.pushed_bytes >= faults.stall_after_push_bytes:
            self.frozen.set()

    def drop_connections(self, stop_listening: bool = True) -> None:
        """Unplug the cable: close every connection (and refuse new ones)."""
        if stop_listening and self.listener is not None:
            self.listener.close()
        for conn in self.connections:
            conn.dead = True
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.sock.close()

    def alive_processes(self) -> list[int]:
        """Commands started on this device that still run (a harness should leave none)."""
        alive = []
        for pid in self.spawned:
            try:
                os.kill(pid, 0)
                if not _is_zombie(pid):
                    alive.append(pid)
            except ProcessLookupError:
                pass
        return alive

    def stop(self) -> None:
        self.drop_connections()
        for pid in self.alive_processes():
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# --- the device's benchmark_model ----------------------------------------------------------

def install_benchmark_model(sandbox: Sandbox) -> Path:
    """Put an executable `benchmark_model` at /data/local/tmp, as the TFLite docs do."""
    target = sandbox.root / "data/local/tmp/benchmark_model"
    here = Path(__file__).resolve().parent
    target.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(here)!r})\n"
                      "from adb_device import benchmark_model_main\n"
                      "sys.exit(benchmark_model_main(sys.argv[1:]))\n")
    target.chmod(0o755)
    return target


def _mode(root: Path) -> str:
    mode_file = root / "data/local/tmp/.benchmark_mode"
    return mode_file.read_text().strip() if mode_file.exists() else "normal"


NONSENSE = (
    "Running benchmark for at least 1 iterations and at least 0.5 seconds\n"
    "count=1 first=e curr=. min=- max=1e999 avg=nan std=-\n\n"
    "Running benchmark for at least 50 iterations and at least 1 seconds\n"
    "count=50 first=-12 curr=e min=-3 max=inf avg=-7.5 std=NaN\n\n"
    "Inference timings in us: Init: e, First inference: -, Warmup (avg): ., "
    "Inference (avg): -4\n"
    "Memory footprint delta from the start of the tool (MB): init=e overall=.\n")

GARBAGE = {
    "garbage": lambda: bytes(range(256)) * 64 + os.urandom(16_384) + b"\xff\xfe\x00" * 100,
    "nonsense": lambda: NONSENSE.encode(),
    "flood": lambda: b"count=" + b"7" * (24 * 1024 ** 2),
}


def benchmark_model_main(argv: list[str]) -> int:
    """TFLite's benchmark_model, emulated with the LiteRT interpreter and its output format.

    Modes (file /data/local/tmp/.benchmark_mode): normal, hang, disconnect, fail, and
    garbage output: `garbage` (random bytes), `nonsense` (its line formats with impossible
    numbers), `flood` (tens of MB without a newline); all three exit 0.
    """
    root = Path(os.environ["LOOPBACK_DEVICE_ROOT"])
    flags, mode = parse_flags(argv), _mode(root)
    print("STARTING!", flush=True)
    if mode in GARBAGE:
        sys.stdout.flush()
        os.write(1, GARBAGE[mode]())
        return 0
    if mode in ("hang", "disconnect"):
        (root / "data/local/tmp/.benchmark_started").write_text(str(os.getpid()))
        time.sleep(3600)
    if mode == "fail":
        print("ERROR: Failed to apply delegate.", flush=True)
        return 1
    battery = root / "sys/class/power_supply/battery"
    if battery.exists():
        (battery / "current_now").write_text(f"{RUN_CURRENT_UA}\n")
    try:
        return _benchmark(flags)
    finally:
        if battery.exists():
            (battery / "current_now").write_text(f"{IDLE_CURRENT_UA}\n")


def _interpreter(flags: dict[str, str], model: str):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType, load_delegate

    resolver = (OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
                if flags.get("use_xnnpack") == "false" else OpResolverType.AUTO)
    threads = int(flags.get("num_threads", "-1"))
    delegates = None
    if flags.get("external_delegate_path"):  # as benchmark_model: key:value;key:value
        options = dict(item.split(":", 1) for item in
                       flags.get("external_delegate_options", "").split(";") if ":" in item)
        try:
            delegates = [load_delegate(flags["external_delegate_path"], options)]
        except (ValueError, OSError):  # benchmark_model warns and runs without it
            print("WARNING: The external delegate failed to create; running without it.")
    interpreter = Interpreter(model_path=model, num_threads=threads if threads > 0 else None,
                              experimental_op_resolver_type=resolver,
                              experimental_delegates=delegates)
    interpreter.allocate_tensors()
    return interpreter


def _set_inputs(interpreter, flags: dict[str, str], rng) -> None:
    import numpy as np

    files = dict(item.split(":", 1) for item in flags.get("input_layer_value_files", "").split(",")
                 if item)
    half_precision = flags.get("use_gpu") == "true"
    for detail in interpreter.get_input_details():
        dtype = np.dtype(detail["dtype"])
        if detail["name"] in files:
            value = np.fromfile(files[detail["name"]], dtype).reshape(detail["shape"])
        elif dtype.kind == "f":
            value = rng.uniform(-0.5, 0.5, detail["shape"]).astype(dtype)
        else:
            value = rng.integers(0, 100, detail["shape"]).astype(dtype)
        if half_precision and dtype == np.float32:
            value = value.astype(np.float16).astype(np.float32)
        interpreter.set_tensor(detail["index"], value)


def _timed_invoke(interpreter) -> float:
    start = time.perf_counter()
    interpreter.invoke()
    return (time.perf_counter() - start) * 1e6


def _stat_line(times: list[float]) -> str:
    import numpy as np

    t = np.array(times)
    return (f"count={len(t)} first={t[0]:.0f} curr={t[-1]:.0f} min={t.min():.0f} "
            f"max={t.max():.0f} avg={t.mean():g} std={t.std():.0f}")


def _benchmark(flags: dict[str, str]) -> int:
    import numpy as np

    model = flags["graph"]
    runs, warmup = int(flags.get("num_runs", "50")), int(flags.get("warmup_runs", "1"))
    print(f"Graph: [{model}]")
    start = time.perf_counter()
    try:
        interpreter = _interpreter(flags, model)
    except (ValueError, RuntimeError) as exc:
        print(f"ERROR: Could not build the interpreter: {exc}", flush=True)
        return 1
    init_us = (time.perf_counter() - start) * 1e6
    print(f"Loaded model {model}\nInitialized session in {init_us / 1000:.3f}ms.")
    _set_inputs(interpreter, flags, np.random.default_rng(0))
    warm = [_timed_invoke(interpreter) for _ in range(max(warmup, 1))]
    print("Running benchmark for at least 1 iterations and at least 0.5 seconds but terminate "
          f"if exceeding 150 seconds.\ncount={len(warm)} curr={warm[-1]:.0f}\n")
    min_secs = float(flags.get("min_secs", "1"))
    print(f"Running benchmark for at least {runs} iterations and at least {min_secs:g} seconds "
          "but terminate if exceeding 150 seconds.", flush=True)
    steady, start = [], time.perf_counter()
    while len(steady) < max(runs, 1) or time.perf_counter() - start < min_secs:
        steady.append(_timed_invoke(interpreter))
    print(f"{_stat_line(steady)}\n", flush=True)
    _save_outputs(interpreter, flags)
    print(f"Inference timings in us: Init: {init_us:.0f}, First inference: {warm[0]:.0f}, "
          f"Warmup (avg): {np.mean(warm):g}, Inference (avg): {np.mean(steady):g}")
    print("Memory footprint delta from the start of the tool (MB): init=4.21094 "
          "overall=6.0859", flush=True)
    return 0


def _save_outputs(interpreter, flags: dict[str, str]) -> None:
    import numpy as np

    path = flags.get("output_filepath")
    if not path:
        return
    with open(path, "wb") as f:
        for detail in interpreter.get_output_details():
            value = interpreter.get_tensor(detail["index"])
            if flags.get("use_gpu") == "true" and value.dtype == np.float32:
                value = value.astype(np.float16).astype(np.float32)
            f.write(value.tobytes())

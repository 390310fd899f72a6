"""report.html in a real browser: headless Chromium loads the sample's report with no console
error and no network request, and every section is on the page with its charts drawn.

Chromium is driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON
messages ending in NUL on file descriptors 3 and 4), so no websocket client is needed.
Skipped when Chromium is not installed (`apt-get install chromium`; .ci/run installs it).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")

# Keep the browser from calling home: the test also asserts no request leaves the page.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--mute-audio", "--window-size=1280,2400")
SECTIONS = ("summary", "comparison", "validation", "conversion", "io", "layers", "placement",
            "latency", "data", "toolchain")


class DevTools:
    """A Chromium process and the DevTools protocol over its pipe."""

    def __init__(self, profile_dir: Path):
        to_browser, self._commands = os.pipe()
        self._events, from_browser = os.pipe()
        # The browser reads commands on fd 3 and writes replies and events on fd 4; its
        # ends move above 9 first so that bash's `3<&N 4>&M` cannot clobber either.
        to_browser, from_browser = _high_fd(to_browser), _high_fd(from_browser)
        script = f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser}'
        self.proc = subprocess.Popen(
            ["bash", "-c", script, CHROMIUM, *FLAGS, "--remote-debugging-pipe",
             f"--user-data-dir={profile_dir}", "about:blank"],
            pass_fds=(to_browser, from_browser), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._events], [], [], left)[0]:
                raise TimeoutError("no reply from chromium")
            chunk = os.read(self._events, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: str | None = None, timeout: float = 60,
             **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._read_message(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._commands)
        os.close(self._events)


def _high_fd(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return high


PAGE_STATE = """JSON.stringify({
  sections: [...document.querySelectorAll('main > section')].map(s => ({
    id: s.id, title: (s.querySelector('h2') || {}).textContent,
    height: s.getBoundingClientRect().height,
    svgs: [...s.querySelectorAll('svg')].map(g => {
      const r = g.getBoundingClientRect();
      return {label: g.getAttribute('aria-label'), width: r.width, height: r.height,
              marks: g.querySelectorAll('rect').length};
    })})),
  external: document.querySelectorAll('script, link, img, iframe, object, embed').length,
  title: document.title})"""


def open_report(report: Path, profile_dir: Path) -> tuple[dict, list[dict]]:
    """Load the page; return its rendered state and every DevTools event seen."""
    browser = DevTools(profile_dir)
    try:
        target = browser.call("Target.createTarget", url="about:blank")["targetId"]
        session = browser.call("Target.attachToTarget", targetId=target,
                               flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            browser.call(f"{domain}.enable", session)
        browser.call("Page.navigate", session, url=report.as_uri())
        browser.wait_for("Page.loadEventFired")
        state = browser.call("Runtime.evaluate", session, expression=PAGE_STATE,
                             returnByValue=True)["result"]["value"]
        return json.loads(state), browser.events
    finally:
        browser.close()


@pytest.fixture(scope="module")
def sample_bundle(sample_bundles) -> Path:
    """The README's sample build, compared across every shipped device."""
    return sample_bundles("onnx")


def _problems(events: list[dict]) -> list[str]:
    """Console errors, uncaught exceptions, failed loads, and requests that left the file."""
    found = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            found.append(f"console: {params.get('args')}")
        elif method == "Runtime.exceptionThrown":
            found.append(f"exception: {params.get('exceptionDetails')}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            found.append(f"log: {params['entry'].get('text')}")
        elif method == "Network.loadingFailed":
            found.append(f"failed load: {params.get('errorText')}")
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if not url.startswith("file://"):
                found.append(f"request: {url}")
    return found


@pytest.fixture(scope="module")
def rendered(sample_bundle, tmp_path_factory) -> tuple[dict, list[dict]]:
    return open_report(sample_bundle / "report.html", tmp_path_factory.mktemp("profile"))


def test_the_check_sees_console_errors_and_requests(tmp_path):
    """The harness itself: a page that logs an error and loads a missing file fails it."""
    page = tmp_path / "broken.html"
    page.write_text("<!doctype html><title>x</title><img src='missing.png'>"
                    "<script>console.error('boom')</script>")
    _, events = open_report(page, tmp_path / "profile")
    problems = _problems(events)
    assert any("boom" in p for p in problems) and any("failed load" in p for p in problems)


def test_sample_report_renders_every_section_without_errors(rendered):
    state, events = rendered
    assert _problems(events) == []
    requests = [e for e in events if e.get("method") == "Network.requestWillBeSent"]
    assert len(requests) == 1  # the page itself, nothing else
    assert state["external"] == 0 and "digits_cnn.tflite" in state["title"]
    sections = {s["id"]: s for s in state["sections"]}
    assert set(SECTIONS) <= set(sections)
    for key in SECTIONS:
        assert sections[key]["height"] > 40 and sections[key]["title"], key


def test_sample_report_draws_its_charts(rendered, sample_bundle):
    state, _ = rendered
    charts = {(s["id"], g["label"]): g for s in state["sections"] for g in s["svgs"]}
    manifest = json.loads((sample_bundle / "manifest.json").read_text())
    devices = len(manifest["comparison"])
    expected = {("summary", "model size"): 2,
                ("comparison", "device comparison"): 3 * devices,
                ("layers", "layer SQNR"): len(manifest["quantization"]["layer_report"][:20]),
                ("placement", "op placement"): sum(
                    manifest["placement"][k] for k in ("delegated_ops", "cpu_ops")),
                ("latency", "latency by unit"): 1,
                ("latency", "latency breakdown"): 1}
    for key, marks in expected.items():
        chart = charts[key]
        assert chart["width"] > 100 and chart["height"] > 10, key
        assert chart["marks"] >= marks, (key, chart["marks"])
